"""What the forecast adds to a converge report: the report built with and without it, in turn,
on the same parsed log (the sample log and our pipeline runs), medians of ``--repeat`` rounds.

Run: ``python benchmarks/bench_forecast_cost.py [--repeat 5]``. Prints, per log, the report's CPU
seconds without the forecast, with it, and the ratio. (This replaces a timed test: a suite on a
loaded machine is no place for a speed limit.)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.analysis.run_forecast import ForecastConfig
from dflash_diag.converge.report import build_converge_report
from dflash_diag.read.jsonl import load_log

ROOT = Path(__file__).resolve().parents[1]


def logs() -> list[Path]:
    return [
        ROOT / "sample_logs" / "train.jsonl",
        *sorted((ROOT / "tests/fixtures/runs").glob("*/train.jsonl")),
    ]


def cpu_of(log, enabled: bool) -> float:
    start = time.process_time()
    build_converge_report(log, DiagnosisConfig(forecast=ForecastConfig(enabled=enabled)))
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'log':40} {'without':>9} {'with':>9} {'ratio':>7}")
    for path in logs():
        log = load_log([str(path)], lists=False)
        build_converge_report(log)  # warm: imports and caches
        off, on = [], []
        for _ in range(args.repeat):  # in turn, so both see the same machine load
            off.append(cpu_of(log, False))
            on.append(cpu_of(log, True))
        a, b = statistics.median(off), statistics.median(on)
        name = path.relative_to(ROOT).as_posix()[-40:]
        print(f"{name:40} {a:8.3f}s {b:8.3f}s {b / a:6.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
