"""The native JSONL reader's fast paths for small files (issue 21): a log of one chunk is parsed
without a worker thread and joined in one select, the counting query also says whether every
row is kept, and :func:`detect_preset` keeps its answer per key set. Each gives what the general
path (several chunks, a worker thread, the per-column join) gives.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random

import polars as pl
import pytest

from dflash_diag.read import jsonl, presets
from dflash_diag.read.formats.load import load_log
from dflash_diag.read.jsonl import parse_records, parse_stream


def _log(seed: int, lines: int = 60) -> bytes:
    """A seeded small log of this project's schema with what the reader has rules for: headers
    (one with a script), events, NaN and Infinity, a numeric string, a bool, a malformed line, a
    blank line, an out-of-range step, a record without a step, a walk histogram, a torn tail."""
    rng = random.Random(seed)
    out = [json.dumps({"event": "run_start", "script": "sync", "config": {"lr": 1e-3}})]
    for step in range(1, lines + 1):
        record: dict[str, object] = {"step": step, "loss": round(3 - step / lines, 4)}
        if rng.random() < 0.7:
            record["acc"] = round(rng.random(), 4)
        if rng.random() < 0.3:
            record["lr"] = 1e-4 * rng.random()
        if rng.random() < 0.1:
            record["walk_hist"] = [rng.random() for _ in range(3)]
        out.append(json.dumps(record))
        kind = rng.random()
        if kind < 0.05:
            out.append(json.dumps({"event": "eval", "step": step, "acc": 0.5}))
        elif kind < 0.07:
            out.append(f'{{"step": {step}, "loss": NaN, "acc": Infinity}}')
        elif kind < 0.09:
            out.append(f'{{"step": {step}, "loss": "0.25", "acc": true}}')
        elif kind < 0.10:
            out.append("not json")
        elif kind < 0.11:
            out.append("")
        elif kind < 0.12:
            out.append('{"step": 1e300, "loss": 1.0}')
        elif kind < 0.13:
            out.append('{"loss": 1.5}')
        elif kind < 0.14:
            out.append(json.dumps({"event": "run_start", "config": {}}))
    text = "\n".join(out) + "\n"
    if seed % 2:
        text += '{"step": 999, "lo'  # torn
    return text.encode()


def _same(a, b) -> None:
    assert a.metrics.schema == b.metrics.schema
    assert a.metrics.equals(b.metrics)
    assert a.issues == b.issues
    assert [(e.kind, e.seq, e.step, e.fields) for e in a.events] == [
        (e.kind, e.seq, e.step, e.fields) for e in b.events
    ]
    assert a.consumed_bytes == b.consumed_bytes
    assert (a.first_line_no, a.next_line_no) == (b.first_line_no, b.next_line_no)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("lists", [False, True])
def test_one_chunk_gives_what_several_chunks_give(tmp_path, seed, lists):
    data = _log(seed)
    path = tmp_path / "train.jsonl"
    path.write_bytes(data)
    with path.open("rb") as handle:  # a plain file: its one chunk is known to be the last
        one = parse_stream(handle, lists=lists)
    several = parse_stream(io.BytesIO(data), lists=lists, chunk_bytes=700)
    assert len(several.chunk_starts[0]) > 3  # the general path: pieces joined column by column
    assert one.chunk_starts[0] == [(0, 1)]
    _same(one, several)
    _same(one, parse_records(data, lists=lists))


def test_one_chunk_starts_no_thread(tmp_path, monkeypatch):
    class NoPool:
        def __init__(self, *args, **kwargs):
            raise AssertionError("a worker thread for a file of one chunk")

    monkeypatch.setattr(jsonl, "ThreadPoolExecutor", NoPool)
    path = tmp_path / "train.jsonl"
    path.write_bytes(_log(3))
    with path.open("rb") as handle:
        log = parse_stream(handle)
    assert log.metrics.height > 50
    with path.open("rb") as handle, pytest.raises(AssertionError, match="worker thread"):
        parse_stream(handle, chunk_bytes=700)


def test_single_piece_join_keeps_the_schema_order():
    # only a few of the schema's fields hold a value: the others are null literals, in order
    data = b'{"step": 1, "lr": 0.5}\n{"step": 2, "lr": 0.25, "acc": 0.1}\n'
    log = parse_records(data, lists=False)
    wide = parse_stream(io.BytesIO(data * 40), lists=False, chunk_bytes=64)
    assert log.metrics.columns == wide.metrics.columns
    assert log.metrics["acc"].to_list() == [None, 0.1]
    assert log.metrics["loss"].null_count() == 2


def test_rows_dropped_without_the_keep_query():
    # an event, a record without a step and one out of range: the rows are filtered
    data = (
        b'{"event": "run_start", "script": "s"}\n{"step": 1, "loss": 1}\n{"loss": 2}\n'
        b'{"step": 1e300, "loss": 3}\n{"step": 2, "loss": 4}\n'
    )
    log = parse_records(data)
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.metrics["seq"].to_list() == [2, 5]
    assert log.metrics["script"].to_list() == ["s", "s"]
    assert log.metrics["run"].to_list() == [0, 0]
    assert (log.issues.without_step, log.issues.bad_step) == (1, 1)
    clean = parse_records(b'{"step": 1, "loss": 1}\n{"step": 2, "loss": 4}\n')
    assert clean.metrics["script"].to_list() == [None, None]
    assert clean.metrics["run"].to_list() == [-1, -1]


def test_many_small_files_read_as_one_large_one(tmp_path):
    # each file alone (the fast path) against the same records read as one file in small
    # chunks (the general path): the frames agree but for the source and the header index
    paths = []
    for k in range(12):
        path = tmp_path / f"run{k:02d}.jsonl"
        path.write_bytes(_log(2 * k, lines=30))  # even seeds: no torn tail
        paths.append(path)
    many = load_log(paths)
    assert many.metrics["source"].unique().sort().to_list() == list(range(12))
    for index, path in enumerate(paths):
        with path.open("rb") as handle:
            alone = parse_stream(handle, source=index, lists=False)
        chunked = parse_stream(
            io.BytesIO(path.read_bytes()), source=index, lists=False, chunk_bytes=500
        )
        _same(alone, chunked)
        part = many.metrics.filter(pl.col("source") == index).drop("run")
        assert part.equals(alone.metrics.drop("run"))


def test_detect_preset_answer_kept_and_renewed(monkeypatch):
    keys = ["train/loss", "train/acc_0", "train/lr", "step"]
    first = presets.detect_preset(keys)
    assert presets.detect_preset(keys) is first
    assert first is presets._detect(tuple(keys), tuple(presets.PRESETS.values()))
    # a preset replaced since: its answer is found again, not the kept one
    if first is not None:
        replaced = dataclasses.replace(first, name=first.name)
        monkeypatch.setitem(presets.PRESETS, first.name, replaced)
        assert presets.detect_preset(keys) is replaced
    # the key set is the key: another set gets its own answer
    assert presets.detect_preset(["step", "loss", "acc"]) is presets._detect(
        ("step", "loss", "acc"), tuple(presets.PRESETS.values())
    )


def test_lists_still_cut_where_a_list_column_has_values():
    from dflash_diag.read.records import MAX_LIST_ELEMENTS

    long = [0.5] * (MAX_LIST_ELEMENTS + 3)
    data = (
        json.dumps({"step": 1, "loss": 1.0}) + "\n" + json.dumps({"step": 2, "walk_hist": long})
    ).encode() + b"\n"
    log = parse_records(data)
    assert log.metrics["walk_hist"].to_list() == [None, [0.5] * MAX_LIST_ELEMENTS]
    # no list anywhere: the column is null, nothing to cut
    plain = parse_records(b'{"step": 1, "loss": 1.0}\n')
    assert plain.metrics["walk_hist"].to_list() == [None]
