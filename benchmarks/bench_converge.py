"""Benchmark: `dflash-diag converge` and `load_log` against a bare polars scan, on several log shapes.

Not a timed test: run it by hand and read the ratios.

    python benchmarks/bench_converge.py                        # 200,000 lines per shape
    python benchmarks/bench_converge.py --lines 1000000        # the issue's size
    python benchmarks/bench_converge.py --shapes hf,mixed      # some shapes only
    python benchmarks/bench_converge.py --against 8e14ce4      # side by side with a commit
    python benchmarks/bench_converge.py --rerun --lines 300000 # the re-run after 1% growth only

The shapes (benchmarks/bench_shapes.py) are the layouts real trainers write: ``pipeline`` (this
project's pipeline log: a lock-step phase, then records with two 15-element lists, stage/queue
dicts, events), ``mixed`` (30% plain records, then 70% pipeline records with one ``acc_pos``
list), ``hf`` (``{"loss", "grad_norm", "learning_rate", "epoch", "step"}``, step last),
``nested`` (speculators' ``{"train": {...}}`` objects with numbered position accuracies), and
``tensorboard`` / ``trainer_state`` (the HF values in those formats; their bare scan is the HF
JSONL's). For every shape, each reader runs in a fresh process, so that its peak memory
(``VmHWM``) is its own:

* ``scan``      ``pl.scan_ndjson`` of the shape's scalar columns and the 50-step group-by: what
                reading the values costs at the least (its RSS/file is the floor: Python and
                polars, about 50 MiB, plus the file's pages polars maps);
* ``floor``     the same scan after importing numpy and typer, the rest of the stack converge's
                JSON path imports, with numpy's BLAS pool as converge sets it (one thread):
                ``floor x scan`` above 1.25 says no converge on this stack can meet the target
                at that size, ``conv x floor`` what the package adds;
* ``parse``     polars' read of every key of the file (one whole-file call) after the same
                imports: what a reader that returns every value pays at the least, where the
                scan reads two to five columns; ``conv x parse`` what the package adds over it;
* ``converge``  the CLI, ``dflash-diag converge LOG --format json`` (read + analysis + render);
* ``load_log``  ``dflash_diag.load_log(LOG)``, the library entry point the README shows;
* ``first`` / ``rerun``  converge through the parsed-log cache (JSONL shapes): a first run on a
                log 1% shorter (it writes the cache), then the same log grown by its last 1% of
                records: the re-run's CPU against the first's (target <= 0.1x).

With ``--against REV`` the same shapes also run with the code of commit REV, built once in a
scratch virtual environment (a ``git worktree`` and ``pip install -e`` of it, no torch), so a
regression shows as a ratio now / REV.

Figures are CPU seconds (user + system, all threads: the work done, less sensitive to what
else runs than wall time), medians of ``--repeat`` rounds; the readers run interleaved, round
by round, so each sees the same shared, varying machine load, printed with each round.
Targets (issue 21): converge and load_log at most 1.25x the scan's CPU and peak RSS at most the
file size on every shape. Run it with byte-compiled modules (not under
``PYTHONDONTWRITEBYTECODE``): otherwise every process compiles the package's sources again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Records of the small copy of each shape that measures a process's start-up.
START_LINES = 100

# The bare scan: polars' NDJSON reader on the scalar columns, and the 50-step group-by.
POLARS_SCAN = textwrap.dedent("""
    import json, sys
    import polars as pl
    spec = json.loads(sys.argv[2])
    def dtype(t):
        if isinstance(t, dict):
            return pl.Struct({k: dtype(v) for k, v in t.items()})
        if isinstance(t, list):  # ["List", inner]
            return pl.List(dtype(t[1]))
        return getattr(pl, t)()
    def col(path):
        head, *rest = path.split(".")
        expr = pl.col(head)
        for name in rest:
            expr = expr.struct.field(name)
        return expr
    schema = {k: dtype(v) for k, v in spec["schema"].items()}
    frame = (pl.scan_ndjson(sys.argv[1], schema=schema)
             .group_by((col(spec["step"]) // 50).alias("bin"))
             .agg(col(spec["value"]).mean(), pl.len()).collect())
    print(frame.height, file=sys.stderr)
""")

# The floor: the bare scan after importing the third-party stack converge cannot do without
# (numpy for the forecast's fits, typer for the command line, rich for the terminal), so that
# what the package itself adds shows apart from what its dependencies cost.
# What converge imports besides polars on its JSON path (numpy, typer: no rich, scipy or
# pydantic), with numpy's BLAS pool set as converge's process sets it (THREAD_DEFAULTS): the
# floor ran with one BLAS thread per core, about 0.1 s of CPU that converge does not pay.
STACK = "import os\nos.environ.update(json.loads(sys.argv[3]))\nimport numpy, typer\n"
FLOOR = POLARS_SCAN.replace("import polars as pl\n", STACK + "import polars as pl\n", 1)

# polars' read of every key of the shape (the whole file, one call, its own threads), after
# the same imports: what a reader that returns every value pays at the least, beside the
# scan's two to five columns.
PARSE = textwrap.dedent("""
    import json, os, sys
    os.environ.update(json.loads(sys.argv[3]))
    import numpy, typer
    import polars as pl
    def dtype(t):
        if isinstance(t, dict):
            return pl.Struct({k: dtype(v) for k, v in t.items()})
        if isinstance(t, list):
            return pl.List(dtype(t[1]))
        return getattr(pl, t)()
    schema = {k: dtype(v) for k, v in json.loads(sys.argv[2]).items()}
    print(pl.scan_ndjson(sys.argv[1], schema=schema).collect().height, file=sys.stderr)
""")

LOAD_LOG = textwrap.dedent("""
    import sys
    from dflash_diag import load_log
    log = load_log(sys.argv[1])
    print(log.metrics.height, file=sys.stderr)
""")

CONVERGE = textwrap.dedent("""
    import sys
    from dflash_diag.cli import main
    sys.argv = ["dflash-diag", "converge", sys.argv[1], "--format", "json", *sys.argv[3:]]
    main()
""")

# Runs a snippet, then prints the process's peak resident set (VmHWM, KiB) and CPU seconds.
WRAPPER = textwrap.dedent("""
    import resource, sys
    code = sys.argv.pop(1)
    try:
        exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        sys.stdout.flush()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across fork and exec, so a child would
        # report the benchmark's own peak (it holds the logs' bytes) when that is larger
        with open("/proc/self/status") as status:
            hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
        print("MAXRSS_KIB", hwm, "CPU_S", usage.ru_utime + usage.ru_stime, file=sys.stderr)
""")


def write_log(path: Path, lines: int, seed: int = 0) -> None:
    """A pipeline-shaped log: 5% legacy records, then pipeline records, events every 1000 steps."""
    rng = random.Random(seed)
    positions = [
        "[" + ", ".join(f"{rng.uniform(0.02, 0.6):.5f}" for _ in range(15)) + "]"
        for _ in range(512)
    ]
    legacy = lines // 20
    with path.open("w") as out:
        t = 1.767e9
        for step in range(1, legacy + 1):
            t += 0.93
            out.write(
                f'{{"step": {step}, "time": {t:.3f}, "epoch": {step / 5000:.4f}, '
                f'"loss": {1.6 + rng.random() * 0.1:.4f}, "acc": {0.14 + rng.random() * 0.02:.4f}, '
                f'"lr": {6e-4 * step / 37500:.6e}}}\n'
            )
        out.write(
            '{"event": "run_start", "schema": 1, "script": "pipeline", "config": {"token_budget": '
            '65536}, "schedule": {"kind": "cosine", "peak_lr": 0.0006, "warmup_steps": 37500, '
            '"total_steps": 2000000, "min_lr": 6e-05}, "block_size": 16, "steps_per_epoch": 5000, '
            f'"world_size": 1, "resumed_from": {{"path": "ckpt/step_{legacy}", "step": {legacy}}}}}\n'
        )
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
                out.write(
                    f'{{"event": "eval", "step": {step}, "tau": {3 + acc:.3f}, "tau_hist": [0, 1, 2], '
                    '"n_prompts": 32, "new_tokens": 4096, "temperature": 0.0}\n'
                )
                written += 1


@dataclass(frozen=True)
class Run:
    """One reader process: CPU seconds (all threads) and peak RSS (bytes)."""

    cpu: float
    maxrss: int


def run(
    code: str,
    args: list[str],
    *,
    python: str = sys.executable,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> Run:
    """CPU seconds and peak RSS of a fresh Python process running ``code`` with ``args``."""
    proc = subprocess.run(
        [python, "-c", WRAPPER, code, *args],
        capture_output=True,
        check=False,
        text=True,
        cwd=cwd,
        env=env,
    )
    if proc.returncode != 0 or "MAXRSS_KIB" not in proc.stderr:
        raise SystemExit(f"benchmark step failed ({python}):\n{proc.stderr[-2000:]}")
    fields = proc.stderr.rsplit("MAXRSS_KIB", 1)[1].split()
    return Run(cpu=float(fields[2]), maxrss=int(fields[0]) * 1024)


def build_against(rev: str, scratch: Path) -> tuple[str, Path]:
    """The python and the source tree of commit ``rev``, in a scratch venv (built once per commit).

    Returns:
        ``(python, tree)``: the venv's interpreter and the commit's worktree.
    """
    sha = subprocess.run(
        ["git", "rev-parse", "--short=12", f"{rev}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    home = scratch / f"against-{sha}"
    tree, venv = home / "tree", home / "venv"
    python = venv / "bin" / "python"
    if not (python.exists() and (home / "ready").exists()):
        home.mkdir(parents=True, exist_ok=True)
        if not tree.exists():
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(tree), sha],
                cwd=ROOT,
                check=True,
                capture_output=True,
            )
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"building {rev} ({sha}) in {home} (pip install -e, no torch)...", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-e", str(tree)], check=True)
        (home / "ready").write_text(sha)
    return str(python), tree


def every_key(path: Path, blocks: int = 16, block_bytes: int = 2**20) -> dict[str, object]:
    """The schema of every key of a JSONL file, as :data:`PARSE` reads it, from ``blocks``
    pieces of ``block_bytes`` spread evenly over the file (a key first written past the head
    counts: the mixed shape's pipeline records begin 30% in; eval rows recur every 100-500
    lines): numbers and nulls as Float64 (a JSON number may be either), objects as dicts,
    lists as ``["List", inner]``."""
    import polars as pl

    size = path.stat().st_size
    pieces = []
    with path.open("rb") as handle:
        for i in range(blocks):
            handle.seek(max(0, min(size - block_bytes, size * i // blocks)))
            data = handle.read(block_bytes)
            if handle.tell() - len(data) > 0:  # not the file's start: from the next line
                data = data[data.find(b"\n") + 1 :]
            pieces.append(data[: data.rfind(b"\n") + 1])

    def spec(dtype: object) -> object:
        if isinstance(dtype, pl.Struct):
            return {f.name: spec(f.dtype) for f in dtype.fields}
        if isinstance(dtype, pl.List):
            return ["List", spec(dtype.inner)]
        if dtype in (pl.String, pl.Boolean):
            return str(dtype)
        return "Float64"

    schema = pl.read_ndjson(b"".join(pieces), infer_schema_length=None).schema
    return {k: spec(v) for k, v in schema.items()}


def child_env(**extra: str) -> dict[str, str]:
    """The environment of every measured process: bytecode cached, as an installed user has it.

    With ``PYTHONDONTWRITEBYTECODE`` set (this machine's shell sets it) every process compiles
    each module of an editable tree from source, about 0.15 s of CPU per converge run that no user
    of an installed copy pays. Without it the tree's ``__pycache__`` folders (ignored by git) are
    written once, by :func:`warm`, and read by every measured run.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def warm(python: str, tree: Path) -> None:
    """Compile ``tree``'s package to bytecode before the timed runs."""
    subprocess.run(
        [python, "-m", "compileall", "-q", str(tree / "dflash_diag")],
        check=True,
        env=child_env(),
        capture_output=True,
    )


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_shapes import SHAPES

    from dflash_diag.cli import THREAD_DEFAULTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000, help="records per shape")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated shape names")
    parser.add_argument("--against", metavar="REV", help="also run the code of this commit")
    parser.add_argument(
        "--scratch",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dflash-diag-bench",
        help="where --against builds its venvs (kept for the next run)",
    )
    parser.add_argument(
        "--rerun",
        action="store_true",
        help="the re-run measurement only: per JSONL shape a first run, a re-run after 1%% "
        "growth and the re-run's in-process split (import, read, analysis, render)",
    )
    args = parser.parse_args()
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown} (known: {', '.join(SHAPES)})")
    if args.rerun:
        rerun_benchmark(names, args.lines, args.repeat)
        return
    against = build_against(args.against, args.scratch) if args.against else None

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths: dict[str, Path] = {}
        for name in dict.fromkeys([SHAPES[n].scan_of or n for n in names] + names):
            shape = SHAPES[name]
            (folder / name).mkdir()
            paths[name] = folder / name / shape.file
            t0 = time.perf_counter()
            shape.write(paths[name], args.lines)
            size = _size(paths[name])
            print(
                f"{name}: {args.lines:,} records, {size / 2**20:.1f} MiB, "
                f"written in {time.perf_counter() - t0:.1f} s"
            )
        # the same shapes at START_LINES records: what each process costs before the log's
        # size counts (interpreter, imports, set-up), so that the per-record cost shows apart
        tiny: dict[str, Path] = {}
        for name in dict.fromkeys([SHAPES[n].scan_of or n for n in names] + names):
            (folder / f"{name}_tiny").mkdir()
            tiny[name] = folder / f"{name}_tiny" / SHAPES[name].file
            SHAPES[name].write(tiny[name], START_LINES)
        grow: dict[str, tuple[bytes, bytes]] = {}
        if _converge_flags(ROOT):  # this tree has the cache: first run and re-run after 1% growth
            for name in names:
                shape = SHAPES[name]
                if shape.scan_of or not shape.file.endswith(".jsonl"):
                    continue
                full = folder / name / "grow_full.jsonl"
                shape.write(full, args.lines + args.lines // 100)
                data = full.read_bytes()
                full.unlink()
                cut = data.rfind(b"\n", 0, len(data) * 100 // 101) + 1
                grow[name] = (data[:cut], data[cut:])
        readers = ["scan", "converge", "load_log", "scan0", "converge0", "load_log0"]
        readers += ["floor", "floor0", "parse"]
        readers += ["first", "rerun"] + (["converge@REV", "load_log@REV"] if against else [])
        runs = {n: {r: [] for r in readers} for n in names}
        loads = []
        env = child_env(XDG_CACHE_HOME=str(folder / "cache"))
        threads = json.dumps(THREAD_DEFAULTS)
        keys = {n: json.dumps(every_key(paths[SHAPES[n].scan_of or n])) for n in names}
        warm(sys.executable, ROOT)
        if against:
            warm(*against)
        for round_ in range(max(1, args.repeat)):
            for name in names:
                shape = SHAPES[name]
                log = str(paths[name])
                spec = json.dumps(
                    {
                        "schema": shape.scan_schema,
                        "step": shape.scan_step,
                        "value": shape.scan_value,
                    }
                )
                scan_log = str(paths[shape.scan_of or name])
                this = runs[name]
                this["scan"].append(run(POLARS_SCAN, [scan_log, spec], env=env))
                this["floor"].append(run(FLOOR, [scan_log, spec, threads], env=env))
                this["parse"].append(run(PARSE, [scan_log, keys[name], threads], env=env))
                this["converge"].append(run(CONVERGE, [log, "-", *_converge_flags(ROOT)], env=env))
                this["load_log"].append(run(LOAD_LOG, [log], env=env))
                small = str(tiny[name])
                this["scan0"].append(
                    run(POLARS_SCAN, [str(tiny[shape.scan_of or name]), spec], env=env)
                )
                this["floor0"].append(
                    run(FLOOR, [str(tiny[shape.scan_of or name]), spec, threads], env=env)
                )
                this["converge0"].append(
                    run(CONVERGE, [small, "-", *_converge_flags(ROOT)], env=env)
                )
                this["load_log0"].append(run(LOAD_LOG, [small], env=env))
                if name in grow:
                    grown = folder / name / f"grow_{round_}.jsonl"
                    grown.write_bytes(grow[name][0])
                    own = dict(env, XDG_CACHE_HOME=str(folder / f"cache_{name}_{round_}"))
                    this["first"].append(run(CONVERGE, [str(grown), "-"], env=own))
                    with grown.open("ab") as out:
                        out.write(grow[name][1])
                    this["rerun"].append(run(CONVERGE, [str(grown), "-"], env=own))
                    grown.unlink()
                if against:
                    python, tree = against
                    this["converge@REV"].append(
                        run(
                            CONVERGE,
                            [log, "-", *_converge_flags(tree)],
                            python=python,
                            cwd=tree,
                            env=env,
                        )
                    )
                    this["load_log@REV"].append(
                        run(LOAD_LOG, [log], python=python, cwd=tree, env=env)
                    )
            loads.append(os.getloadavg()[0])
            print(f"  round {round_ + 1} done, load {loads[-1]:.2f}", flush=True)

        print(
            f"\nmedians of {args.repeat} rounds, {args.lines:,} records per shape, load average "
            f"{min(loads):.1f}-{max(loads):.1f} (uptime: {_uptime()})"
        )
        header = (
            f"{'shape':<14}{'MiB':>7}{'scan s':>8}{'RSS/file':>9}{'conv s':>8}{'x scan':>7}"
            f"{'RSS/file':>9}{'load s':>8}{'x scan':>7}{'RSS/file':>9}"
        )
        header += f"{'rerun/first':>12}"
        if against:
            header += f"{'conv now/REV':>13}{'RSS now/REV':>12}{'load now/REV':>13}"
        print(header)
        for name in names:
            size = _size(paths[name])
            med = {r: _median([x.cpu for x in runs[name][r]]) for r in readers if runs[name][r]}
            rss = {r: max(x.maxrss for x in runs[name][r]) for r in readers if runs[name][r]}
            # the scan's own peak: the Python + polars floor plus the scanned file's pages
            scan_size = _size(paths[SHAPES[name].scan_of or name])
            line = (
                f"{name:<14}{size / 2**20:7.1f}{med['scan']:8.2f}{rss['scan'] / scan_size:9.2f}"
                f"{med['converge']:8.2f}{med['converge'] / med['scan']:7.2f}{rss['converge'] / size:9.2f}"
                f"{med['load_log']:8.2f}{med['load_log'] / med['scan']:7.2f}{rss['load_log'] / size:9.2f}"
            )
            line += f"{med['rerun'] / med['first']:12.2f}" if "rerun" in med else f"{'n/a':>12}"
            if against:
                line += (
                    f"{med['converge'] / med['converge@REV']:13.2f}"
                    f"{rss['converge'] / rss['converge@REV']:12.2f}"
                    f"{med['load_log'] / med['load_log@REV']:13.2f}"
                )
            print(line)
        print("targets: x scan <= 1.25 (CPU), RSS/file <= 1.0")
        print(
            f"\nstart-up: each process on the shape's first {START_LINES} records (CPU s), and the "
            "ratios of what the log's size adds (CPU - start-up)"
        )
        print(
            f"{'shape':<14}{'scan s':>8}{'conv s':>8}{'load s':>8}{'conv x scan':>12}{'load x scan':>12}"
        )
        for name in names:
            med = {r: _median([x.cpu for x in runs[name][r]]) for r in readers if runs[name][r]}
            added = med["scan"] - med["scan0"]
            print(
                f"{name:<14}{med['scan0']:8.2f}{med['converge0']:8.2f}{med['load_log0']:8.2f}"
                f"{_ratio(med['converge'] - med['converge0'], added):>12}"
                f"{_ratio(med['load_log'] - med['load_log0'], added):>12}"
            )
        print(
            "\nthe floor: the bare scan after the imports converge's JSON path needs besides "
            "polars (numpy with\nconverge's one BLAS thread, typer); 'floor x scan' above 1.25: "
            "no converge on this stack meets the\ntarget. parse: polars' read of every key of the "
            "file after the same imports (what a reader\nthat returns every value pays at the "
            "least); 'conv x parse': what the package adds over it"
        )
        print(
            f"{'shape':<14}{'floor0 s':>9}{'floor s':>8}{'floor x scan':>13}{'conv x floor':>13}"
            f"{'parse s':>8}{'parse x scan':>13}{'conv x parse':>13}"
        )
        for name in names:
            med = {r: _median([x.cpu for x in runs[name][r]]) for r in readers if runs[name][r]}
            print(
                f"{name:<14}{med['floor0']:9.2f}{med['floor']:8.2f}"
                f"{med['floor'] / med['scan']:13.2f}{med['converge'] / med['floor']:13.2f}"
                f"{med['parse']:8.2f}{med['parse'] / med['scan']:13.2f}"
                f"{med['converge'] / med['parse']:13.2f}"
            )


# The re-run's CPU by share, in one process, as the CLI runs it (same reading options, same
# config): the imports, the cached read, the analysis (the forecast's part of it named), the JSON.
RERUN_SPLIT = textwrap.dedent("""
    import sys, time
    clock = time.process_time
    t0 = clock()
    import dflash_diag.cli
    from dflash_diag.analysis import diagnosis
    from dflash_diag.converge.report import build_converge_report
    from dflash_diag.read.formats.load import load_log
    from dflash_diag.render.json import render_json
    t1 = clock()
    spent = {"forecast": 0.0}
    forecast_of = diagnosis.forecast_of
    def timed(*args, **kwargs):
        start = clock()
        try:
            return forecast_of(*args, **kwargs)
        finally:
            spent["forecast"] += clock() - start
    diagnosis.forecast_of = timed
    log = load_log(sys.argv[1], lists=False, cache=True)
    t2 = clock()
    report = build_converge_report(log, diagnosis.DiagnosisConfig())
    t3 = clock()
    out = render_json(report)
    t4 = clock()
    print(f"SPLIT {t1 - t0:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {spent['forecast']:.3f} {t4 - t3:.3f}",
          file=sys.stderr)
""")


def rerun_benchmark(names: list[str], lines: int, repeat: int) -> None:
    """``--rerun``: converge's first run on a log (it writes the cache), then the run after the
    log grew by 1% of its records, each in a fresh process, and the grown run's in-process split
    (from the same cache state). Target (issue 21): re-run <= 0.1x the first run's CPU."""
    import shutil

    from bench_shapes import SHAPES

    jsonl = [n for n in names if not SHAPES[n].scan_of and SHAPES[n].file.endswith(".jsonl")]
    results: dict[str, dict[str, list]] = {}
    loads = []
    warm(sys.executable, ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        grow = {}
        for name in jsonl:
            full = folder / f"{name}_full.jsonl"
            SHAPES[name].write(full, lines + lines // 100)
            data = full.read_bytes()
            full.unlink()
            cut = data.rfind(b"\n", 0, len(data) * 100 // 101) + 1
            grow[name] = (data[:cut], data[cut:])
            print(f"{name}: {lines:,} + 1% records, {len(data) / 2**20:.1f} MiB", flush=True)
        for round_ in range(max(1, repeat)):
            for name in jsonl:
                this = results.setdefault(name, {k: [] for k in ("first", "rerun", "split")})
                log = folder / f"{name}.jsonl"
                log.write_bytes(grow[name][0])
                cache = folder / f"cache_{name}"
                shutil.rmtree(cache, ignore_errors=True)
                env = child_env(XDG_CACHE_HOME=str(cache))
                this["first"].append(run(CONVERGE, [str(log), "-"], env=env).cpu)
                shutil.copytree(cache, folder / "cache_before")
                with log.open("ab") as out:
                    out.write(grow[name][1])
                this["rerun"].append(run(CONVERGE, [str(log), "-"], env=env).cpu)
                shutil.rmtree(cache)
                shutil.move(folder / "cache_before", cache)
                this["split"].append(_split(RERUN_SPLIT, log, env))
                log.unlink()
            loads.append(os.getloadavg()[0])
            print(f"  round {round_ + 1} done, load {loads[-1]:.2f}", flush=True)
    print(
        f"\nmedians of {repeat} rounds, {lines:,} records + 1%, load average "
        f"{min(loads):.1f}-{max(loads):.1f}; re-run split in CPU s (one process, same cache state)"
    )
    print(
        f"{'shape':<10}{'first s':>9}{'rerun s':>9}{'ratio':>7}"
        f"{'import':>8}{'read':>7}{'analysis':>10}{'forecast':>10}{'render':>8}"
    )
    for name, this in results.items():
        first, rerun = _median(this["first"]), _median(this["rerun"])
        ratios = _median([r / f for f, r in zip(this["first"], this["rerun"], strict=True)])
        parts = [_median([s[i] for s in this["split"]]) for i in range(5)]
        print(
            f"{name:<10}{first:9.2f}{rerun:9.2f}{ratios:7.2f}"
            f"{parts[0]:8.3f}{parts[1]:7.3f}{parts[2]:10.3f}{parts[3]:10.3f}{parts[4]:8.3f}"
        )
    print("ratio: median of the per-round re-run / first; target <= 0.1 (issue 21)")


def _split(code: str, log: Path, env: dict[str, str]) -> list[float]:
    proc = subprocess.run(
        [sys.executable, "-c", code, str(log)],
        capture_output=True,
        check=False,
        text=True,
        cwd=ROOT,
        env=env,
    )
    line = next((x for x in proc.stderr.splitlines() if x.startswith("SPLIT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"re-run split failed:\n{proc.stderr[-2000:]}")
    return [float(x) for x in line.split()[1:]]


def _ratio(part: float, whole: float) -> str:
    """``part / whole`` as a ratio, or n/a where ``whole`` is within the timer's noise."""
    return f"{part / whole:.2f}" if whole > 0.02 else "n/a"


def _size(path: Path) -> int:
    """Bytes of a log (a folder's files summed)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _converge_flags(tree: Path) -> list[str]:
    """``--no-cache`` where the tree's CLI has it (a first run's figures, not a cache hit)."""
    return ["--no-cache"] if (tree / "dflash_diag" / "read" / "cache.py").exists() else []


def _uptime() -> str:
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "n/a"


if __name__ == "__main__":
    main()
