"""The parsed-log cache (dflash_diag/read/cache.py) never changes an answer.

Each case changes a log between two cached reads (appends, a torn line completed, truncation,
an in-place rewrite to the same size, rotation) and compares the cached read with an uncached
one; a corrupt entry or an unwritable cache folder falls back to a normal read; the cache is
bounded; converge's report is the same with and without it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.read import cache
from dflash_diag.read.jsonl import load_log

from .make_sample_log import generate

runner = CliRunner()


def same(path: Path, **kwargs) -> None:
    cached = load_log(path, cache=True, **kwargs)
    plain = load_log(path, **kwargs)
    assert cached.metrics.equals(plain.metrics)
    assert cached.events == plain.events
    assert cached.issues == plain.issues
    assert (cached.next_line_no, cached.consumed_bytes) == (
        plain.next_line_no,
        plain.consumed_bytes,
    )
    assert cached.lists_pending == plain.lists_pending


def entries() -> list[Path]:
    return sorted(cache.cache_dir().glob("*.json"))


@pytest.fixture
def log(tmp_path):
    data = generate(seed=2, pipeline_steps=600, torn=False)
    path = tmp_path / "train.jsonl"
    path.write_bytes(data)
    return path, data


def test_cache_in_the_test_folder_never_home():
    assert str(cache.cache_dir()).startswith(os.environ["XDG_CACHE_HOME"])
    assert not str(cache.cache_dir()).startswith(str(Path.home() / ".cache"))


def test_appends_reuse_and_extend_the_entry(log, monkeypatch):
    path, data = log
    same(path)
    assert len(entries()) == 1
    lines = data.splitlines(keepends=True)
    with path.open("ab") as out:
        out.writelines(lines[-30:])  # grown by 30 lines (steps going back: a restart)
    parsed = []
    real = cache.join_sequential
    monkeypatch.setattr(cache, "join_sequential", lambda parts: parsed.append(parts) or real(parts))
    same(path)
    assert parsed
    assert parsed[0][1].issues.lines == 30
    same(path)  # an exact hit


def test_many_growths_add_segments_then_compact(log):
    path, data = log
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-40]))
    same(path)
    for i in range(12):  # each growth adds one segment of new rows; the ninth writes one again
        with path.open("ab") as out:
            out.writelines(lines[-40 + 3 * i : -40 + 3 * i + 3])
        same(path)
        frames = json.loads(entries()[0].read_text())["frames"]
        assert len(frames) == (i + 2 if i < 7 else (i - 7) % 8 + 1)
        assert sorted(p.name for p in cache.cache_dir().glob("*.arrow")) == sorted(frames)


def test_a_torn_line_completed_later(log):
    path, data = log
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])
    same(path)
    with path.open("ab") as out:
        out.write(lines[-1][20:])
    same(path)


def test_an_unterminated_valid_record_is_not_cached_as_complete(tmp_path):
    path = tmp_path / "train.jsonl"
    records = b"".join(
        json.dumps({"step": s, "loss": 2.0, "acc": 0.1}).encode() + b"\n" for s in range(1, 200)
    )
    path.write_bytes(records + b'{"step": 200, "loss": 1.0}')
    same(path)
    with path.open("ab") as out:
        out.write(b'{"step": 201, "loss": 1.0}\n')  # glued to the last line: one malformed line
    same(path)


def test_truncation_and_rewrites_in_place_are_misses(log):
    path, data = log
    same(path)
    path.write_bytes(data[: len(data) // 2])  # truncated
    same(path)
    # rewritten in place to the very same size: one digit changed in the middle of the file
    middle = data.find(b'"loss": ', len(data) // 2) + len(b'"loss": ')
    changed = (
        data[:middle] + (b"7" if data[middle : middle + 1] != b"7" else b"8") + data[middle + 1 :]
    )
    path.write_bytes(data)
    same(path)
    stat = path.stat()
    with path.open("r+b") as out:
        out.write(changed)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # even with the old mtime
    assert path.stat().st_size == len(data)
    same(path)
    # rewritten in place and grown (the same inode): the first block's hash differs
    head = data.find(b'"loss": ') + len(b'"loss": ')
    rewritten = data[:head] + (b"7" if data[head : head + 1] != b"7" else b"8") + data[head + 1 :]
    with path.open("r+b") as out:
        out.write(rewritten + data.splitlines(keepends=True)[-1])
    same(path)


def test_rotation_is_a_miss(log, tmp_path):
    path, data = log
    same(path)
    other = tmp_path / "new.jsonl"
    other.write_bytes(data[:1000] + data[-5000:])
    os.replace(other, path)
    same(path)


def test_options_key_the_entry(log):
    path, _ = log
    same(path)
    same(path, lists=True)
    same(path, fields={"acc": "loss", "loss": "acc"})
    assert len(entries()) == 3


def test_corrupt_entries_and_unwritable_folders_fall_back(log):
    path, data = log
    same(path)
    for meta in entries():
        meta.write_text("{not json")
    same(path)
    for frame in cache.cache_dir().glob("*.arrow"):
        frame.write_bytes(b"garbage")
    with path.open("ab") as out:
        out.write(data.splitlines(keepends=True)[-1])
    same(path)
    folder = cache.cache_dir()
    for item in folder.iterdir():
        item.unlink()
    folder.rmdir()
    folder.write_text("a file where the folder should be")
    same(path)


def test_the_cache_is_bounded(tmp_path, monkeypatch):
    for i in range(4):
        path = tmp_path / f"run{i}.jsonl"
        path.write_bytes(generate(seed=i, pipeline_steps=200, torn=False))
        load_log(path, cache=True)
    sizes = [p.stat().st_size for p in cache.cache_dir().iterdir()]
    assert len(entries()) == 4
    monkeypatch.setenv("DFLASH_DIAG_CACHE_MAX_BYTES", str(sum(sizes) // 2))
    path = tmp_path / "run4.jsonl"
    path.write_bytes(generate(seed=9, pipeline_steps=200, torn=False))
    load_log(path, cache=True)
    assert sum(p.stat().st_size for p in cache.cache_dir().iterdir()) <= sum(sizes) // 2
    assert len(entries()) < 5


def test_converge_report_is_the_same_cached_grown_and_uncached(log):
    path, data = log

    def report(*args):
        result = runner.invoke(app, ["converge", str(path), "--format", "json", *args])
        assert result.exit_code == 0, result.output
        return result.stdout

    first = report()
    assert entries()
    assert report() == first == report("--no-cache")
    with path.open("ab") as out:
        out.writelines(data.splitlines(keepends=True)[-50:])
    assert report() == report("--no-cache")


def test_no_cache_writes_nothing(log):
    path, _ = log
    result = runner.invoke(app, ["converge", str(path), "--format", "json", "--no-cache"])
    assert result.exit_code == 0
    assert not cache.cache_dir().exists() or not entries()


def _stored_columns() -> list[set[str]]:
    import polars as pl

    folder = cache.cache_dir()
    (meta_path,) = entries()
    meta = json.loads(meta_path.read_text())
    return [set(pl.read_ipc_schema(folder / name)) for name in meta["frames"]]


def test_an_entry_holds_the_columns_with_a_value_and_reads_back_whole(log):
    # the sample log's pipeline records carry no walk fields: those columns are nulls only
    path, data = log
    lines = data.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-20]))
    plain = load_log(path)
    null_only = {
        c for c in plain.metrics.columns if plain.metrics[c].null_count() == plain.metrics.height
    }
    assert null_only
    same(path)
    (stored,) = _stored_columns()
    assert stored == set(plain.metrics.columns) - null_only
    for grown in (False, True):
        if grown:
            with path.open("ab") as out:
                out.writelines(lines[-20:])
        cached = load_log(path, cache=True)
        # every column, in the reader's order and types, each in one chunk as the reader gives
        # it (a sum over another chunking can move a mean's last bit)
        assert cached.metrics.schema == load_log(path).metrics.schema
        assert cached.metrics.n_chunks("all") == [1] * cached.metrics.width
        same(path)
    assert len(_stored_columns()) == 2  # the new rows: one more segment


@pytest.mark.parametrize("height", [0, 3])
def test_a_segment_of_nulls_only_keeps_its_height(tmp_path, height):
    import polars as pl

    frame = pl.DataFrame(
        {"row": [None] * height, "loss": [None] * height},
        schema={"row": pl.Int64, "loss": pl.Float64},
    )
    cache.write_segment(frame, tmp_path / "segment.arrow")
    back = cache.read_segments(tmp_path, ["segment.arrow"], cache.schema_text(frame))
    assert back.equals(frame)
    assert back.schema == frame.schema


def test_watch_shares_the_cache_and_gives_the_uncached_frame(tmp_path):
    """watch on another trainer's JSONL (the real LLaMA-Factory log, cut at 80% and then grown to
    its end): it writes the cache converge reads, and its frame is the uncached one; --no-cache
    writes nothing."""
    real = (
        Path(__file__).resolve().parents[2]
        / "shared/wild/xueh88401-web__qwen2.5-7b-medical-finetune/trainer_log.jsonl"
    )
    if not real.is_file():
        pytest.skip("the real-log corpus shared/wild is absent")
    lines = real.read_bytes().splitlines(keepends=True)
    path = tmp_path / "trainer_log.jsonl"
    path.write_bytes(b"".join(lines[: len(lines) * 4 // 5]))

    def frame(*args):
        result = runner.invoke(app, ["watch", str(path), "--once", "-f", "json", *args])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout)
        for clock in ("since_last_record", "alerts"):  # "no new record for 3 s": the clock's
            data.pop(clock)
        return data

    assert frame("--no-cache")
    assert not entries()
    first = frame()
    assert entries()
    assert first == frame("--no-cache")
    with path.open("ab") as out:
        out.writelines(lines[len(lines) * 4 // 5 :])
    grown = frame()
    assert grown == frame("--no-cache") != first
    assert grown["last_step"] > first["last_step"]
