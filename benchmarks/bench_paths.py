"""Every command and notable option on big, realistic inputs at two sizes: finds super-linear paths.

Issue 21's hunt: ``bench_converge.py`` measures ``converge -f json`` and ``load_log`` on seven
shapes; slow paths hide in the other commands, options and layouts (``compare`` once took 252 s
on a 1M-record log). This driver writes each input at two sizes (records), runs each case in a
fresh process (bytecode cached, no parsed-log cache) and prints CPU seconds (user + system, all
threads), peak RSS and the large/small CPU ratio, also past start-up (converge on 100 records
taken off both): about ``large/small`` (10 by default) is linear, above twice that is
super-linear (flagged ``!``). ``vs json`` is the case's CPU over ``converge -f
json`` on the same log at the large size (flagged when above 2).

    python benchmarks/bench_paths.py                      # 100k and 1M records, every case
    python benchmarks/bench_paths.py --sizes 20000,200000 --only compare,watch

Inputs go to ``--out`` (default /tmp/hunt6), written once per size and reused. ``watch-tail``
is measured in-process: a thread appends 1,000 records per round while ``LiveLog.refresh`` reads
the new bytes; it prints the median and last refresh CPU against the first (full) read.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from bench_shapes import SHAPES, _event, _framed

# ---------------------------------------------------------------- writers (path, records)


def _mixed(path: Path, n: int) -> None:
    SHAPES["mixed"].write(path, n)


def _mixed_b(path: Path, n: int) -> None:
    """A second run of the mixed shape (another seed), for two-run compare."""
    from bench_shapes import _mixed as write

    write(path, n, seed=7)


def _hf(path: Path, n: int) -> None:
    SHAPES["hf"].write(path, n)


def _eagle(path: Path, n: int) -> None:
    SHAPES["heldout_eagle"].write(path, n)


def _gz(path: Path, n: int) -> None:
    plain = path.with_suffix("")
    _mixed(plain, n)
    with plain.open("rb") as src, gzip.open(path, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    plain.unlink()


def _records(out, start: int, stop: int, rng: random.Random, lists: int = 15) -> None:
    """Pipeline records ``start..stop-1`` with one ``acc_pos`` list of ``lists`` elements."""
    pos = [
        "[" + ", ".join(f"{rng.uniform(0.02, 0.6):.5f}" for _ in range(lists)) + "]"
        for _ in range(64)
    ]
    for step in range(start, stop):
        acc = 0.15 + 0.1 * step / 1e6 + rng.gauss(0, 0.01)
        out.write(
            f'{{"step": {step}, "loss": {3.1 - acc:.4f}, "acc": {acc:.4f}, '
            f'"lr": {6e-4 * min(1.0, step / 20000):.6e}, "time": {1.7e9 + step * 0.9:.3f}, '
            f'"tok_per_sec": {16000 + rng.random() * 500:.1f}, "acc_pos": {pos[step % 64]}}}\n'
        )


def _header(resume: int = 0) -> str:
    return (
        json.dumps(
            {
                "event": "run_start",
                "schema": 1,
                "script": "pipeline",
                "config": {"block_size": 16, "peak_lr": 6e-4, "schedule": "cosine"},
                "resume_step": resume,
            }
        )
        + "\n"
    )


def _restarts(path: Path, n: int) -> None:
    """A resume every 1,000 steps, each going back 200 steps (orphaning the crashed tail)."""
    rng = random.Random(11)
    with path.open("w") as out:
        out.write(_header())
        step, written = 1, 0
        while written < n:
            stop = step + 1000
            _records(out, step, min(stop, step + n - written), rng)
            written += stop - step
            step = stop - 200
            out.write(_header(step - 1))


def _acc64(path: Path, n: int) -> None:
    """64-element ``acc_pos`` lists on every record."""
    with path.open("w") as out:
        out.write(_header())
        _records(out, 1, n + 1, random.Random(12), lists=64)


def _big_config(path: Path, n: int) -> None:
    """A 10 MB config on the run_start line, then the records."""
    with path.open("w") as out:
        blob = {"block_size": 16, "peak_lr": 6e-4, "vocab": [f"tok{i:06d}" for i in range(900_000)]}
        out.write(json.dumps({"event": "run_start", "schema": 1, "config": blob}) + "\n")
        _records(out, 1, n + 1, random.Random(13))


def _evals(path: Path, n: int) -> None:
    """An eval record (tau, loss, acc) every 10 steps."""
    rng = random.Random(14)
    with path.open("w") as out:
        out.write(_header())
        for start in range(1, n + 1, 10):
            _records(out, start, min(n + 1, start + 10), rng)
            step = min(n, start + 9)
            out.write(
                f'{{"event": "eval", "step": {step}, "tau": {2 + step / n + rng.gauss(0, 0.02):.4f}, '
                f'"loss": {2.5 - step / n:.4f}, "acc": {0.2 + 0.1 * step / n:.4f}, "n_prompts": 8}}\n'
            )


def _parts(count: int) -> Callable[[Path, int], None]:
    """``count`` files of consecutive steps, each resuming 50 steps before the last one ended."""

    def write(folder: Path, n: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        rng = random.Random(15)
        per = n // count
        step = 1
        for k in range(count):
            with (folder / f"part{k:03d}.jsonl").open("w") as out:
                out.write(_header(max(0, step - 1)))
                _records(out, step, step + per, rng)
            step += per - 50

    return write


def _tensorboard_tags(folder: Path, n: int) -> None:
    """``n`` scalar events over 300 tags (loss, lr and 298 per-layer norms)."""
    folder.mkdir(parents=True, exist_ok=True)
    import struct

    from dflash_diag.read.formats.tensorboard import masked_crc32c

    tags = ["train/loss", "train/learning_rate"] + [f"grad_norm/layer_{k}" for k in range(298)]
    version = b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2"
    header = struct.pack("<Q", len(version))
    rng = random.Random(16)
    with (folder / "events.out.tfevents.1700000000.bench.1.0").open("wb") as tb:
        tb.write(header + struct.pack("<I", masked_crc32c(header)) + version)
        tb.write(struct.pack("<I", masked_crc32c(version)))
        events: list[bytes] = []
        for i in range(n):
            step, tag = 1 + i // len(tags), tags[i % len(tags)]
            value = 2.0 / step**0.3 if tag == "train/loss" else rng.random()
            events.append(_event(step, tag, value))
            if len(events) >= 2**16:
                tb.write(_framed(events))
                events = []
        tb.write(_framed(events))


def _trainer_state_evals(path: Path, n: int) -> None:
    """``log_history`` of ``n`` train entries with an eval entry every 5 steps."""
    rng = random.Random(17)
    history: list[dict] = []
    for step in range(1, n + 1):
        history.append(
            {
                "loss": round(2.0 / step**0.3 + rng.gauss(0, 0.01), 4),
                "learning_rate": 2e-4,
                "epoch": round(step / 5000, 4),
                "step": step,
            }
        )
        if step % 5 == 0:
            history.append(
                {"eval_loss": round(2.1 / step**0.3, 4), "epoch": step / 5000, "step": step}
            )
    path.write_text(json.dumps({"global_step": n, "max_steps": 2 * n, "log_history": history}))


def _lightning_csv(folder: Path, n: int) -> None:
    """Lightning's CSVLogger ``metrics.csv``: 11 sparse columns, a val row every 20 train rows."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(18)
    cols = "epoch,epoch_time,step,train_loss_step,train_perplexity_step,val_loss,val_perplexity"
    with (folder / "metrics.csv").open("w") as out:
        out.write(cols + "\n")
        for i in range(n):
            step = 49 + 50 * i
            loss = 7.0 - step / (60 * n) + rng.gauss(0, 0.01)
            out.write(f"{step // 50000},,{step},{loss:.6f},{2.7**loss:.3f},,\n")
            if i % 20 == 19:
                out.write(f"{step // 50000},,{step},,,{loss + 0.1:.6f},{2.7 ** (loss + 0.1):.3f}\n")


def _mlflow(root: Path, n: int) -> None:
    """An MLflow file store: 8 metric files of ``n / 8`` values each."""
    run = root / "0" / "r1"
    (run / "metrics" / "train").mkdir(parents=True, exist_ok=True)
    (run / "meta.yaml").write_text("run_id: r1\nstart_time: 5\nlifecycle_stage: active\n")
    rng = random.Random(19)
    per = n // 8
    for key in ("loss", "lr", *(f"acc_{k}" for k in range(6))):
        with (run / "metrics" / "train" / key).open("w") as out:
            for step in range(1, per + 1):
                out.write(f"{1764486000000 + step * 1000} {rng.random():.6f} {step}\n")


@dataclass(frozen=True)
class Input:
    """A generated input: its writer and the name of its file or folder under the size's folder."""

    write: Callable[[Path, int], None]
    name: str


INPUTS: dict[str, Input] = {
    "mixed": Input(_mixed, "mixed.jsonl"),
    "mixed_b": Input(_mixed_b, "mixed_b.jsonl"),
    "hf": Input(_hf, "hf.jsonl"),
    "eagle": Input(_eagle, "eagle.jsonl"),
    "gz": Input(_gz, "mixed.jsonl.gz"),
    "restarts": Input(_restarts, "restarts.jsonl"),
    "acc64": Input(_acc64, "acc64.jsonl"),
    "config10mb": Input(_big_config, "config10mb.jsonl"),
    "evals": Input(_evals, "evals.jsonl"),
    "parts20": Input(_parts(20), "parts20"),
    "runs200": Input(_parts(200), "runs200"),
    "tb300": Input(_tensorboard_tags, "tb300"),
    "trainer_state": Input(_trainer_state_evals, "trainer_state.json"),
    "csv": Input(_lightning_csv, "lightning"),
    "mlflow": Input(_mlflow, "mlruns"),
}


@dataclass(frozen=True)
class Case:
    """One command line: ``{name}`` in ``argv`` is replaced by the input's path.

    Attributes:
        name: the row's name.
        input: the key in INPUTS.
        argv: the dflash-diag arguments.
        stdin: feed the input on standard input (its ``argv`` says ``-``).
        glob: pass the folder's files as separate arguments, sorted.
    """

    name: str
    input: str
    argv: tuple[str, ...]
    stdin: bool = False
    glob: bool = False


C = "converge"
CASES: tuple[Case, ...] = (
    Case("converge json", "mixed", (C, "{}", "-f", "json")),
    Case("converge text", "mixed", (C, "{}", "-f", "text")),
    Case("converge text --rows 0", "mixed", (C, "{}", "-f", "text", "--rows", "0")),
    Case("converge rich", "mixed", (C, "{}", "-f", "rich")),
    Case("converge markdown", "mixed", (C, "{}", "-f", "markdown")),
    Case("converge csv", "mixed", (C, "{}", "-f", "csv")),
    Case("converge -w 10 json", "mixed", (C, "{}", "-w", "10", "-f", "json")),
    Case("converge -w 1 json", "mixed", (C, "{}", "-w", "1", "-f", "json")),
    Case("converge -w 10 text", "mixed", (C, "{}", "-w", "10", "-f", "text")),
    Case("converge --target-tau", "mixed", (C, "{}", "--target-tau", "3.5", "-f", "json")),
    Case("converge --target-loss", "mixed", (C, "{}", "--target-loss", "2.8", "-f", "json")),
    Case("converge --noise-aware", "mixed", (C, "{}", "--noise-aware", "-f", "json")),
    Case("converge --keep-all", "restarts", (C, "{}", "--keep-all", "-f", "json")),
    Case(
        "converge --from/--to",
        "hf",
        (C, "{}", "--from-step", "1000", "--to-step", "90000", "-f", "json"),
    ),
    Case("converge --phase all", "mixed", (C, "{}", "--phase", "all", "-f", "json")),
    Case("converge hf json", "hf", (C, "{}", "-f", "json")),
    Case("converge eagle json", "eagle", (C, "{}", "-f", "json")),
    Case(
        "converge eagle --field",
        "eagle",
        (C, "{}", "--field", "acc=train/acc_0", "--field", "acc_pos=train/acc_{i}", "-f", "json"),
    ),
    Case("converge .gz", "gz", (C, "{}", "-f", "json")),
    Case("converge stdin", "mixed", (C, "-", "-f", "json"), stdin=True),
    Case("converge restarts/1000", "restarts", (C, "{}", "-f", "json")),
    Case("converge restarts text", "restarts", (C, "{}", "-f", "text")),
    Case("converge acc_pos 64", "acc64", (C, "{}", "-f", "json")),
    Case("converge acc_pos 64 tau", "acc64", (C, "{}", "--target-tau", "3.5", "-f", "json")),
    Case("converge 10MB config", "config10mb", (C, "{}", "-f", "json")),
    Case("converge evals/10", "evals", (C, "{}", "-f", "json")),
    Case("converge evals text", "evals", (C, "{}", "-f", "text")),
    Case("converge 20 parts", "parts20", (C, "-f", "json"), glob=True),
    Case("converge 200 files", "runs200", (C, "-f", "json"), glob=True),
    Case("converge tb 300 tags", "tb300", (C, "{}", "-f", "json")),
    Case("converge trainer_state", "trainer_state", (C, "{}", "-f", "json")),
    Case("converge lightning csv", "csv", (C, "{}", "-f", "json")),
    Case("converge mlflow", "mlflow", (C, "{}", "-f", "json")),
    Case("compare regimes json", "mixed", ("compare", "{}", "-f", "json")),
    Case("compare regimes text", "mixed", ("compare", "{}", "-f", "text")),
    Case("compare two runs json", "mixed", ("compare", "{}", "{mixed_b}", "-f", "json")),
    Case("compare two runs text", "mixed", ("compare", "{}", "{mixed_b}", "-f", "text")),
    Case("compare restarts", "restarts", ("compare", "{}", "-f", "json")),
    Case("watch --once", "mixed", ("watch", "{}", "--once")),
    Case("watch --once --plot", "mixed", ("watch", "{}", "--once", "--plot")),
    Case("watch json", "mixed", ("watch", "{}", "-f", "json")),
    Case("watch restarts", "restarts", ("watch", "{}", "--once")),
    Case("watch evals", "evals", ("watch", "{}", "--once")),
)


def build(out: Path, size: int, keys: set[str]) -> dict[str, Path]:
    """Write the inputs ``keys`` at ``size`` records (once: an existing one is reused)."""
    folder = out / str(size)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key in sorted(keys):
        spec = INPUTS[key]
        path = folder / spec.name
        done = folder / f".{spec.name}.done"
        if not done.exists():
            if path.is_dir():
                shutil.rmtree(path)
            t0 = time.time()
            # in a child: a forked process starts with its parent's peak RSS (Linux keeps
            # ru_maxrss across fork and exec), so the driver stays small
            subprocess.run(
                [sys.executable, __file__, "--write", key, str(size), str(path)], check=True
            )
            done.write_text("")
            print(f"  wrote {path} in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        paths[key] = path
    return paths


@dataclass(frozen=True)
class Measure:
    cpu: float
    rss: int
    rc: int
    wall: float


def measure(case: Case, paths: dict[str, Path], timeout: float, env: dict[str, str]) -> Measure:
    """One fresh process of ``case``: CPU seconds, peak RSS (bytes), exit status, wall seconds."""
    path = paths[case.input]
    argv = [
        a.replace("{}", str(path)).replace("{mixed_b}", str(paths.get("mixed_b", "")))
        for a in case.argv
    ]
    if case.glob:
        argv[1:1] = [str(p) for p in sorted(path.iterdir())]
    if argv[0] != "watch":  # watch reads incrementally and has no parsed-log cache
        argv.append("--no-cache")
    stdin = path.open("rb") if case.stdin else subprocess.DEVNULL
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dflash_diag", *argv],
        stdin=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.time() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            status = -1
            break
        time.sleep(0.02)
    wall = time.time() - t0
    if case.stdin:
        stdin.close()
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    rc = os.waitstatus_to_exitcode(status) if status != -1 else 124
    if rc not in (0, 1):
        print(f"  {case.name}: exit {rc}: {err.strip().splitlines()[-1:]}", file=sys.stderr)
    return Measure(usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, rc, wall)


def watch_tail(path: Path, rounds: int, env: dict[str, str]) -> None:
    """Refresh CPU of ``LiveLog`` on a copy of ``path`` growing by 1,000 records a round."""
    import resource
    import threading

    from rich.console import Console

    from dflash_diag.watch import LiveLog, WatchConfig, build_view, render_view

    work = path.with_name("growing.jsonl")
    shutil.copyfile(path, work)
    live = LiveLog(work, WatchConfig())
    console = Console(file=io.StringIO(), width=120)
    rng = random.Random(20)
    step = sum(1 for _ in work.open()) + 10

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    times = []
    for k in range(rounds + 1):
        if k:

            def append(start: int = step) -> None:
                with work.open("a") as out:
                    _records(out, start, start + 1000, rng)

            writer = threading.Thread(target=append)
            writer.start()
            writer.join()
            step += 1000
        t = cpu()
        live.refresh()
        console.print(render_view(build_view(live)))
        times.append(cpu() - t)
        console.file = io.StringIO()
    tail = sorted(times[1:])
    print(
        f"watch-tail {path.name}: first {times[0]:.2f} s, refresh median {tail[len(tail) // 2]:.3f} s, "
        f"last {times[-1]:.3f} s ({rounds} rounds of 1,000 records)",
        flush=True,
    )
    work.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="two record counts, small,large")
    parser.add_argument("--out", type=Path, default=Path("/tmp/hunt6"))
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per process")
    parser.add_argument("--tail-rounds", type=int, default=10, help="watch-tail rounds (0: skip)")
    parser.add_argument(
        "--write", nargs=3, metavar=("INPUT", "RECORDS", "PATH"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.write:
        key, records, path = args.write
        INPUTS[key].write(Path(path), int(records))
        return
    small, large = (int(s) for s in args.sizes.split(","))
    wanted = [w for w in args.only.split(",") if w]
    cases = [c for c in CASES if not wanted or any(w in c.name for w in wanted)]
    keys = {c.input for c in cases} | {"mixed"}
    if any("{mixed_b}" in a for c in cases for a in c.argv):
        keys.add("mixed_b")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["XDG_CACHE_HOME"] = str(args.out / "cache")
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "dflash_diag")], env=env, check=True
    )
    base = [c for c in CASES if c.name == "converge json"]
    results: dict[int, dict[str, Measure]] = {}
    for size in (small, large):
        paths = build(args.out, size, keys)
        results[size] = {}
        for case in [*base, *(c for c in cases if c not in base)]:
            results[size][case.name] = m = measure(case, paths, args.timeout, env)
            print(
                f"  {size:>8} {case.name:<28} {m.cpu:8.2f} s {m.rss / 2**20:7.0f} MiB rc {m.rc}",
                file=sys.stderr,
                flush=True,
            )
    ref = results[large]["converge json"].cpu
    # start-up (imports, the CLI): converge on the first 100 records, taken off both sizes so the
    # ratio is what the records add (at 100k records start-up is most of a run)
    start = measure(base[0], build(args.out, 100, {"mixed"}), args.timeout, env).cpu
    print(f"\nstart-up (converge -f json, 100 records): {start:.2f} s CPU")
    print(
        f"\n| case | CPU {small:,} | CPU {large:,} | ratio | past start-up | "
        f"peak RSS {large:,} | vs json |"
    )
    print("|---|---|---|---|---|---|---|")
    linear = large / small
    for case in cases:
        a, b = results[small][case.name], results[large][case.name]
        ratio = b.cpu / a.cpu if a.cpu else float("inf")
        past = (b.cpu - start) / (a.cpu - start) if a.cpu > start else float("inf")
        flag = " !" if past > 2 * linear else ""
        timed = " (timeout)" if b.rc == 124 else ""
        vs = b.cpu / ref
        print(
            f"| {case.name} | {a.cpu:.2f} s | {b.cpu:.2f} s{timed} | {ratio:.1f}x | {past:.1f}x{flag} "
            f"| {b.rss / 2**20:.0f} MiB | {vs:.2f}x{' !' if vs > 2 else ''} |"
        )
    if args.tail_rounds:
        watch_tail(build(args.out, large, {"mixed"})["mixed"], args.tail_rounds, env)


if __name__ == "__main__":
    main()
