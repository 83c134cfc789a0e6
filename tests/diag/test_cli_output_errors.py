"""Output that cannot be written: one error line and status 2, or a quiet status 0 for a pipe the
reader closed; never a traceback. Real processes (the console script's entry point, ``run``),
since the failure is the process's stdout itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = str(ROOT / "sample_logs" / "train.jsonl")
FULL = "/dev/full"  # every write fails with ENOSPC (Linux)

pytestmark = pytest.mark.skipif(not os.path.exists(FULL), reason="needs /dev/full")


def _run(args: list[str], stdout) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dflash_diag", *args],
        check=False,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "80"},
        timeout=120,
    )


@pytest.mark.parametrize(
    "args",
    [
        ["converge", SAMPLE, "-f", "json", "--no-cache"],
        ["converge", SAMPLE, "-f", "text", "--no-cache"],
        ["converge", SAMPLE, "-f", "csv", "--no-cache"],
        ["compare", SAMPLE, SAMPLE, "-f", "json"],
        ["watch", SAMPLE, "--once"],
        ["--version"],
        ["--help"],
        ["converge", "--help"],
    ],
)
def test_a_full_disk_is_one_error_line_and_status_2(args):
    with open(FULL, "w") as full:
        done = _run(args, full)
    errors = [line for line in done.stderr.splitlines() if not line.startswith("dflash-diag: note")]
    assert done.returncode == 2, done.stderr
    assert errors == ["dflash-diag: error: cannot write the output: No space left on device"]


def test_a_closed_pipe_ends_quietly_with_status_0():
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte: every write is EPIPE
    try:
        done = _run(["converge", SAMPLE, "-f", "json", "--no-cache"], write_end)
    finally:
        os.close(write_end)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "error" not in done.stderr
