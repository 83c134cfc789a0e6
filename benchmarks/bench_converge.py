"""Benchmark: `dflash-diag converge` on a 1M-line log against plain Python and a bare polars scan.

Not a timed test: run it by hand and read the figures.

    python benchmarks/bench_converge.py                # 1,000,000 lines in a temp dir
    python benchmarks/bench_converge.py --lines 200000  # quicker

It writes a log shaped like the pipeline's (a lock-step phase, then pipeline records carrying
15-element ``acc_pos``/``accept_pos`` lists, stage/queue dicts, events), then runs four readers,
each in a fresh process so that peak memory (``ru_maxrss``) is its own:

* ``diag``    the real CLI, ``dflash-diag converge LOG --format json`` (whole analysis + render);
* ``python``  a plain-Python reader doing the same core work: ``json.loads`` per line, the
              pipeline filter, 50-step bins with n_pred-weighted accuracy;
* ``reader``  ``load_log(LOG, lists=False)`` alone: converge's read without the analysis, to show
              which part of the gap to the scan is reading and which is the report;
* ``polars``  ``pl.scan_ndjson`` of the same file with the same columns, collected (no analysis):
              the metric scalars and ``event``; like converge's main pass it leaves the
              per-position lists, which converge then reads for the last window only.

Times are process wall times (start-up included, best of ``--repeat``) and the CPU time of the
same processes (user + system, all threads: the work done, less sensitive to what else runs);
the readers run interleaved, round by round, and the machine is shared, so the load average is
printed with each round. Targets: issue 2 section 6, diag >= 10x faster than python, within 1.5x
of polars, peak memory under twice the file size; issue 11 item 6, within 1.25x of polars' CPU
time, peak memory under the file size. Run it with byte-compiled modules (not under
``PYTHONDONTWRITEBYTECODE``): otherwise every process compiles the package's sources again,
about 0.07 s of CPU that an installed package does not pay.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PYTHON_READER = textwrap.dedent("""
    import json, sys
    bins = {}
    script = None
    with open(sys.argv[1], "rb") as handle:
        for raw in handle:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            event = rec.get("event")
            if event == "run_start":
                script = rec.get("script")
            if event is not None and event != "metrics":
                continue
            step = rec.get("step")
            if step is None or ("tok_per_sec" not in rec and script != "pipeline"):
                continue
            b = bins.setdefault((int(step) - 15001) // 50, [0, 0.0, 0.0, 0.0])
            acc, n_pred = rec.get("acc"), rec.get("n_pred") or 1
            b[0] += 1
            if acc is not None:
                b[1] += acc * n_pred
                b[2] += n_pred
            b[3] += rec.get("loss") or 0.0
    print(len(bins), file=sys.stderr)
""")

POLARS_SCAN = textwrap.dedent("""
    import sys
    import polars as pl
    from dflash_diag.read.schema import read_schema
    schema, _ = read_schema(lists=False)  # the columns converge's main pass reads
    frame = pl.scan_ndjson(sys.argv[1], schema=schema).collect()
    print(frame.height, file=sys.stderr)
""")

DIAG_READER = textwrap.dedent("""
    import sys
    from dflash_diag.read.jsonl import load_log
    log = load_log(sys.argv[1], lists=False)  # converge's main pass alone, no analysis
    print(log.metrics.height, file=sys.stderr)
""")

DIAG_CLI = textwrap.dedent("""
    import sys
    from dflash_diag.cli import main
    sys.argv = ["dflash-diag", "converge", sys.argv[1], "--format", "json"]
    main()
""")

# Runs a snippet, then prints the process's peak resident set (ru_maxrss is KiB on Linux).
WRAPPER = textwrap.dedent("""
    import resource, runpy, sys
    code = sys.argv.pop(1)
    try:
        exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        sys.stdout.flush()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        print("MAXRSS_KIB", usage.ru_maxrss, "CPU_S", usage.ru_utime + usage.ru_stime, file=sys.stderr)
""")


def write_log(path: Path, lines: int, seed: int = 0) -> None:
    """A pipeline-shaped log: 5% legacy records, then pipeline records, events every 1000 steps."""
    rng = random.Random(seed)
    positions = [
        "[" + ", ".join(f"{rng.uniform(0.02, 0.6):.5f}" for _ in range(15)) + "]" for _ in range(512)
    ]
    legacy = lines // 20
    with path.open("w") as out:
        t = 1.767e9
        for step in range(1, legacy + 1):
            t += 0.93
            out.write(f'{{"step": {step}, "time": {t:.3f}, "epoch": {step / 5000:.4f}, '
                      f'"loss": {1.6 + rng.random() * 0.1:.4f}, "acc": {0.14 + rng.random() * 0.02:.4f}, '
                      f'"lr": {6e-4 * step / 37500:.6e}}}\n')
        out.write('{"event": "run_start", "schema": 1, "script": "pipeline", "config": {"token_budget": '
                  '65536}, "schedule": {"kind": "cosine", "peak_lr": 0.0006, "warmup_steps": 37500, '
                  '"total_steps": 2000000, "min_lr": 6e-05}, "block_size": 16, "steps_per_epoch": 5000, '
                  f'"world_size": 1, "resumed_from": {{"path": "ckpt/step_{legacy}", "step": {legacy}}}}}\n')
        step = legacy
        written = legacy + 1
        while written < lines:
            step += 1
            t += 4.1
            acc = 0.15 + 0.1 * step / (lines * 1.1) + rng.gauss(0, 0.01)
            n_pred = rng.randint(52000, 64000)
            out.write(
                f'{{"step": {step}, "time": {t:.3f}, "epoch": {step / 5000:.4f}, "loss": {3.1 - acc:.4f}, '
                f'"acc": {acc:.4f}, "lr": {6e-4 * min(1.0, step / 37500):.6e}, '
                f'"tok_per_sec": {16000 + rng.random() * 500:.1f}, "n_tokens": 65536, '
                f'"n_blocks": {n_pred // 15}, "n_pred": {n_pred}, '
                f'"acc_pos": {positions[step % 512]}, "accept_pos": {positions[(step * 7) % 512]}, '
                f'"tau_train": {2.5 + acc:.4f}, "grad_norm": {rng.random():.4f}, '
                '"stage_busy": {"loader": 0.2, "target": 0.97, "draft": 0.9, "optim": 0.05}, '
                '"queue_fill": {"batches": 0.4, "hidden": 0.9, "grads": 0.1}}\n'
            )
            written += 1
            if step % 1000 == 0 and written < lines:
                out.write(f'{{"event": "eval", "step": {step}, "tau": {3 + acc:.3f}, "tau_hist": [0, 1, 2], '
                          '"n_prompts": 32, "new_tokens": 4096, "temperature": 0.0}\n')
                written += 1


@dataclass(frozen=True)
class Run:
    """One reader process: wall seconds (start-up included), CPU seconds (all threads), peak RSS."""

    wall: float
    cpu: float
    maxrss: int


def run(code: str, log: Path) -> Run:
    """Wall and CPU seconds and peak RSS (bytes) of a fresh Python process running ``code`` on ``log``."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, code, str(log)], capture_output=True, check=False,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark step failed:\n{proc.stderr[-2000:]}")
    fields = proc.stderr.rsplit("MAXRSS_KIB", 1)[1].split()
    return Run(wall=wall, cpu=float(fields[2]), maxrss=int(fields[0]) * 1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per reader (best is kept)")
    parser.add_argument("--python-repeat", type=int, default=1, help="runs of the slow plain reader")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.jsonl"
        t0 = time.perf_counter()
        write_log(log, args.lines)
        size = log.stat().st_size
        print(f"log: {args.lines:,} lines, {size / 2**20:.1f} MiB, written in {time.perf_counter() - t0:.1f} s")
        print(f"load average before: {os.getloadavg()}")
        # Rounds interleave the readers so that each sees the same (shared, varying) machine load.
        runs: dict[str, list[Run]] = {"polars": [], "reader": [], "diag": [], "python": []}
        for round_ in range(max(1, args.repeat)):
            this_round = {"polars": run(POLARS_SCAN, log), "reader": run(DIAG_READER, log),
                          "diag": run(DIAG_CLI, log)}
            if round_ < args.python_repeat:
                this_round["python"] = run(PYTHON_READER, log)
            for name, result in this_round.items():
                runs[name].append(result)
            print(f"  round {round_ + 1}: " + ", ".join(
                f"{name} {r.wall:.2f} s wall / {r.cpu:.2f} s CPU" for name, r in this_round.items())
                + f"   load {os.getloadavg()[0]:.2f}")
        print(f"load average after: {os.getloadavg()}")
        runs = {name: r for name, r in runs.items() if r}  # --python-repeat 0 leaves python out
        best = {name: min(r, key=lambda x: x.wall) for name, r in runs.items()}
        least_cpu = {name: min(x.cpu for x in r) for name, r in runs.items()}
        for name, r in runs.items():
            rss = max(x.maxrss for x in r)
            print(f"{name:>7}: best {best[name].wall:6.2f} s wall, {least_cpu[name]:6.2f} s CPU   "
                  f"peak RSS {rss / 2**20:7.1f} MiB ({rss / size:.2f}x file)")
        diag, scan = best["diag"].wall, best["polars"].wall
        if "python" in best:
            print(f"diag vs plain Python: {best['python'].wall / diag:.1f}x faster in wall time, "
                  f"{least_cpu['python'] / least_cpu['diag']:.1f}x in CPU time (target >= 10x)")
        print(f"diag vs bare polars scan: {diag / scan:.2f}x the scan's wall time, "
              f"{least_cpu['diag'] / least_cpu['polars']:.2f}x its CPU time (target <= 1.5x; issue 11: <= 1.25x CPU)")
        print(f"reader alone (load_log) vs bare polars scan: {best['reader'].wall / scan:.2f}x wall, "
              f"{least_cpu['reader'] / least_cpu['polars']:.2f}x CPU")
        print(f"diag peak memory: {max(x.maxrss for x in runs['diag']) / size:.2f}x the file size (target < 2x; issue 11: < 1x)")

if __name__ == "__main__":
    main()
