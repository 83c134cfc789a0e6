"""The foreign-JSONL cache (dflash_diag/read/scalars_cache.py) never changes an answer.

Every real foreign JSONL log of the corpus, and generated HF and speculators-style logs, is cut
at several points (a torn line among them), read once through the cache, then appended to,
rewritten in place (same size, same times), truncated: each time converge's whole output (stdout,
stderr, exit code) is compared with a ``--no-cache`` run. A re-run on a grown log reads the new
bytes only, on both of the reader's paths (polars' scan, the line reader).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.read import scalars_cache
from dflash_diag.read.formats import load

ROOT = Path(__file__).resolve().parents[2]
WILD = sorted(
    p
    for folder in ("shared/wild", "shared/wild_heldout")
    for p in (ROOT / folder).rglob("*.jsonl")
    if p.stat().st_size > 1000
)
runner = CliRunner()


def hf_log(lines: int, seed: int = 0) -> bytes:
    """HF Trainer records (step last), an eval record every 50 steps."""
    rng = random.Random(seed)
    out = []
    for step in range(1, lines + 1):
        record = {
            "loss": round(2.5 - step / (lines * 1.5) + rng.gauss(0, 0.02), 4),
            "grad_norm": round(rng.random(), 4),
            "learning_rate": 5e-5 * (1 - step / (lines + 1)),
            "epoch": round(step / 400, 4),
            "step": step,
        }
        out.append(json.dumps(record))
        if step % 50 == 0:
            out.append(json.dumps({"eval_loss": round(2.4 - step / lines, 4), "step": step}))
    return ("\n".join(out) + "\n").encode()


def extras_log(lines: int, seed: int = 2) -> bytes:
    """HF records with what other trainers add: a text ``time``, a per-position list, and a
    ``grad_norm`` null in the first record (the scan's schema then lists it last)."""
    rng = random.Random(seed)
    out = []
    for step in range(1, lines + 1):
        record = {
            "loss": round(2.5 - step / (lines * 1.5) + rng.gauss(0, 0.02), 4),
            "grad_norm": None if step == 1 else round(rng.random(), 4),
            "learning_rate": 5e-5 * (1 - step / (lines + 1)),
            "epoch": round(step / 400, 4),
            "time": f"2026-11-01T12:{step // 60 % 60:02d}:{step % 60:02d}",
            "acc_pos": [round(0.5 * 0.9**k, 4) for k in range(3)],
            "step": step,
        }
        out.append(json.dumps(record))
    return ("\n".join(out) + "\n").encode()


def nested_log(lines: int, seed: int = 1) -> bytes:
    """speculators' records: a ``train`` object with numbered per-position accuracies."""
    rng = random.Random(seed)
    out = []
    for step in range(1, lines + 1):
        acc = 0.3 + 0.3 * step / lines
        train = {"loss": round(3 - acc, 4), "full_acc": round(acc + rng.gauss(0, 0.01), 4)}
        train |= {f"acc_{i}": round(acc * 0.9**i, 4) for i in range(4)}
        out.append(json.dumps({"step": step, "train": train, "lr": 1e-4}))
    return ("\n".join(out) + "\n").encode()


def converge(path: Path, *flags: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["converge", str(path), "-f", "json", *flags])
    return result.exit_code, result.stdout, result.stderr


def check(path: Path) -> None:
    """converge through the cache says what converge without it says, byte for byte."""
    assert converge(path) == converge(path, "--no-cache")


def cuts(data: bytes) -> list[int]:
    """Cut points: after about half, 90% and all but one of the lines, and inside a line."""
    ends = [i + 1 for i, b in enumerate(data) if b == ord("\n")]
    picks = {ends[len(ends) // 2], ends[len(ends) * 9 // 10], ends[-2] if len(ends) > 1 else 0}
    picks.add(ends[len(ends) * 3 // 4] - 7)  # a torn line, completed by the next bytes
    return sorted(p for p in picks if 0 < p < len(data))


def grow_and_change(path: Path, data: bytes) -> None:
    for cut in cuts(data):
        path.write_bytes(data[:cut])
        check(path)  # the first (cached) read of the prefix
        with path.open("ab") as out:
            out.write(data[cut:])
        check(path)  # grown
        check(path)  # unchanged: a hit
    # rewritten in place, same size and times: a digit changed in the middle
    st = path.stat()
    middle = data.find(b"1", len(data) // 2)
    changed = data[:middle] + (b"2" if data[middle : middle + 1] != b"2" else b"3")
    changed += data[middle + 1 :]
    path.write_bytes(changed)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    check(path)
    path.write_bytes(changed[: len(changed) // 3])  # truncated
    check(path)
    # rewritten near its start and grown: the hashed first block tells
    path.write_bytes(data[: cuts(data)[-1]])
    check(path)
    first = data.find(b"1")
    path.write_bytes(data[:first] + b"2" + data[first + 1 :])
    check(path)


@pytest.mark.parametrize("log", WILD, ids=lambda p: str(p.relative_to(ROOT / "shared")))
def test_real_logs_cached_read_as_uncached(log, tmp_path):
    path = tmp_path / log.name
    grow_and_change(path, log.read_bytes())


@pytest.mark.parametrize("make", [hf_log, nested_log, extras_log])
def test_generated_logs_cached_read_as_uncached(make, tmp_path):
    path = tmp_path / "log.jsonl"
    grow_and_change(path, make(400))


@pytest.mark.parametrize(
    ("make", "joined"),
    [(hf_log, "_join_wide"), (nested_log, "_join_wide"), (extras_log, "_join_wide")],
    ids=["hf", "nested", "extras"],
)
def test_a_grown_log_reads_its_new_bytes_only(make, joined, tmp_path, monkeypatch):
    data = make(600)
    path = tmp_path / "log.jsonl"
    cut = data.rfind(b"\n", 0, len(data) * 99 // 100) + 1
    path.write_bytes(data[:cut])
    check(path)
    with path.open("ab") as out:
        out.write(data[cut:])
    wholes, joins = [], []
    real_whole, real_join = load._foreign_jsonl_scalars, getattr(scalars_cache, joined)
    monkeypatch.setattr(
        load, "_foreign_jsonl_scalars", lambda *a, **k: wholes.append(1) or real_whole(*a, **k)
    )
    monkeypatch.setattr(scalars_cache, joined, lambda *a, **k: joins.append(1) or real_join(*a))
    cached = converge(path)
    assert (wholes, joins) == ([], [1])
    monkeypatch.undo()
    assert cached == converge(path, "--no-cache")


def test_the_line_readers_records_grow_too(tmp_path, monkeypatch):
    # a string that looks like a number sends the file to the line reader (no scan)
    lines = [
        json.dumps({"step": s, "train_loss": 2 - s / 500, "note": "1.5" if s == 1 else "x"})
        for s in range(1, 301)
    ]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "log.jsonl"
    cut = data.rfind(b"\n", 0, len(data) * 9 // 10) + 1
    path.write_bytes(data[:cut])
    check(path)
    with path.open("ab") as out:
        out.write(data[cut:])
    joins = []
    real = scalars_cache._join
    monkeypatch.setattr(scalars_cache, "_join", lambda *a, **k: joins.append(1) or real(*a, **k))
    cached = converge(path)
    assert joins == [1]
    monkeypatch.undo()
    assert cached == converge(path, "--no-cache")


def test_an_epoch_summary_first_in_the_new_bytes_reads_the_whole_file(tmp_path, monkeypatch):
    lines = [json.dumps({"step": s, "train_loss": 2 - s / 500, "n": "1"}) for s in range(1, 201)]
    summary = json.dumps({"epoch": 1, "step": 200, "train_loss": 1.5, "val_loss": 1.7})
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(lines) + "\n")
    check(path)
    with path.open("a") as out:
        out.write(summary + "\n")
    joins = []
    real = scalars_cache._join
    monkeypatch.setattr(scalars_cache, "_join", lambda *a, **k: joins.append(1) or real(*a, **k))
    cached = converge(path)
    assert joins == []
    monkeypatch.undo()
    assert cached == converge(path, "--no-cache")


def test_the_new_bytes_malformed_lines_are_numbered_after_the_cached_lines(tmp_path):
    # the text report names the malformed lines: a line of the new bytes keeps its file number
    lines = [
        json.dumps({"step": s, "train_loss": 2 - s / 500, "note": "1.5" if s == 1 else "x"})
        for s in range(1, 301)
    ]
    lines[100] = '{"step": 101, "train_loss": '  # malformed, in the cached part
    lines[280] = '{"step": 281, "train_loss": 1.'  # malformed, in the new bytes
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / "log.jsonl"
    cut = data.rfind(b"\n", 0, len(data) * 9 // 10) + 1
    path.write_bytes(data[:cut])
    converge(path)  # caches the prefix
    with path.open("ab") as out:
        out.write(data[cut:])
    cached = runner.invoke(app, ["converge", str(path), "-f", "text"])
    uncached = runner.invoke(app, ["converge", str(path), "-f", "text", "--no-cache"])
    assert "281" in uncached.stdout
    assert cached.stdout == uncached.stdout


def test_the_scans_piece_grows_by_a_segment_of_the_new_rows(tmp_path):
    data = hf_log(600)
    path = tmp_path / "log.jsonl"
    cut = data.rfind(b"\n", 0, len(data) * 9 // 10) + 1
    path.write_bytes(data[:cut])
    check(path)

    def wide_segments() -> list[str]:
        (meta_path,) = scalars_cache.cache_dir().glob("*.json")
        return json.loads(meta_path.read_text())["wide"][0]

    (first,) = wide_segments()
    with path.open("ab") as out:
        out.write(data[cut:])
    check(path)  # grown: the cached piece stays as written, the new rows are one more file
    assert wide_segments()[0] == first
    assert len(wide_segments()) == 2
    check(path)  # and the two read back as the one piece of the whole file
