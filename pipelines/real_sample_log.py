"""Regenerate ``sample_logs/train.jsonl`` from real training runs on the bundled tiny target.

The story of the original analysis, for real and small enough to commit:

1. ``dflash-train sync`` (the lock-step "old script", legacy records) to step ``--sync-steps``;
2. ``dflash-train pipeline --resume ... --resume-schedule restart`` from that checkpoint (the
   migration, with the pipeline's own lr schedule), checkpointing every
   ``--ckpt-every`` steps, killed with SIGKILL (a crash: no final checkpoint, no ``stop`` record)
   once it has logged ``--crash-after`` steps;
3. the pipeline restarted from its latest checkpoint to the end, so the steps between that
   checkpoint and the crash are logged twice (the diagnostics resolve the restart).

    python -m pipelines.real_sample_log                 # writes sample_logs/train.jsonl
    python -m pipelines.real_sample_log --out /tmp/t.jsonl --sync-steps 20 --pipeline-steps 20

Every phase runs the real ``dflash-train`` command in a scratch directory (relative paths, so the
log names no machine-specific directory). Timestamps and throughput are real, so two
regenerations differ in those; the training values follow from the seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "sample_logs" / "train.jsonl"


def _train(args: list[str], cwd: Path) -> None:
    cmd = [sys.executable, "-m", "pipelines.cli", *args]
    print("$ dflash-train " + " ".join(args), flush=True)
    subprocess.run(cmd, cwd=cwd, env=_env(), check=True)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _metric_steps(log: Path) -> list[int]:
    if not log.exists():
        return []
    steps = []
    for line in log.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # the torn last line of a log being written
        if "event" not in rec:
            steps.append(rec["step"])
    return steps


def _crash_pipeline(args: list[str], cwd: Path, log: Path, crash_at: int) -> None:
    """Run the pipeline and SIGKILL it once step ``crash_at`` is logged."""
    cmd = [sys.executable, "-m", "pipelines.cli", *args]
    print(
        "$ dflash-train " + " ".join(args) + f"   # killed with SIGKILL after step {crash_at}",
        flush=True,
    )
    proc = subprocess.Popen(cmd, cwd=cwd, env=_env())
    try:
        while proc.poll() is None:
            if any(s >= crash_at for s in _metric_steps(log)):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != -signal.SIGKILL:
        raise SystemExit(f"the pipeline ended before the crash point (exit {proc.returncode})")


def _latest_checkpoint(ckpt_dir: Path) -> Path:
    done = sorted(p for p in ckpt_dir.glob("step-*") if (p / "state.json").is_file())
    if not done:
        raise SystemExit(f"no checkpoint under {ckpt_dir}")
    return done[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--sync-steps", type=int, default=150)
    p.add_argument(
        "--pipeline-steps", type=int, default=260, help="pipeline steps after the sync phase"
    )
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument(
        "--crash-after",
        type=int,
        default=140,
        help="pipeline steps logged before the simulated crash",
    )
    args = p.parse_args(argv)
    if not 0 < args.crash_after < args.pipeline_steps:
        p.error("--crash-after must be between 0 and --pipeline-steps")
    if args.crash_after <= args.ckpt_every:
        p.error("--crash-after must exceed --ckpt-every (the restart needs a checkpoint)")

    s1 = args.sync_steps
    s2 = s1 + args.pipeline_steps
    with tempfile.TemporaryDirectory(prefix="sample_logs_") as tmp:
        work = Path(tmp)
        log = work / "train.jsonl"
        common = ["--log", "train.jsonl", "--ckpt-dir", "checkpoints"]
        _train(["sync", *common, "--max-steps", str(s1), "--ckpt-every", "0"], work)
        pipe = [
            "pipeline",
            *common,
            "--max-steps",
            str(s2),
            "--ckpt-every",
            str(args.ckpt_every),
            "--eval-every",
            str(args.eval_every),
        ]
        # The migration starts the pipeline's own lr schedule (warmup again, as in the original
        # analysis); the crash restart below continues it (the default).
        _crash_pipeline(
            [*pipe, "--resume", f"checkpoints/step-{s1:06d}", "--resume-schedule", "restart"],
            work,
            log,
            crash_at=s1 + args.crash_after,
        )
        restart = _latest_checkpoint(work / "checkpoints").relative_to(work)
        _train([*pipe, "--resume", str(restart)], work)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, args.out)
    steps = _metric_steps(args.out)
    print(
        f"wrote {args.out}: {len(steps)} metric records, steps {steps[0]}..{steps[-1]}, "
        f"{args.out.stat().st_size / 1024:.0f} KiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
