"""fetch_lists reads the per-position lists back as the whole parse reads them.

A clean range is read with the list columns alone (`jsonl._list_rows`); anything else goes
through `parse_records` as before. Both must give the eager read's values, rows and order.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from dflash_diag.read import jsonl
from dflash_diag.read.formats.load import load_log
from dflash_diag.read.records import MAX_LIST_ELEMENTS


def _record(step: int, **extra) -> dict:
    rec = {"step": step, "loss": 3.0 - step * 1e-3, "acc": 0.1 + step * 1e-4, "lr": 1e-4}
    rec["acc_pos"] = [round(0.5 - 0.01 * k + step * 1e-5, 5) for k in range(6)]
    rec["accept_pos"] = [round(0.4 - 0.02 * k, 5) for k in range(6)]
    rec.update(extra)
    return rec


def _write(path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines))


def _clean_lines(n: int = 120) -> list[str]:
    lines = [json.dumps({"event": "run_start", "schema": 1, "block_size": 8})]
    for step in range(1, n + 1):
        lines.append(json.dumps(_record(step)))
        if step % 25 == 0:
            lines.append("")  # a blank line: polars skips it, the line numbers do not
            lines.append(json.dumps({"event": "eval", "step": step, "tau": 2.5}))
    # a list longer than the reader keeps, and an integer element
    lines.append(json.dumps(_record(n + 1, acc_pos=[1, *([0.25] * (MAX_LIST_ELEMENTS + 5))])))
    return lines


def _fetched_equals_eager(path, rows_filter, **read) -> None:
    eager = load_log(path, lists=True, **read)
    lazy = load_log(path, lists=False, **read)
    assert lazy.lists_pending == [0]
    rows = lazy.metrics.filter(rows_filter)
    for chunk_bytes in (600, jsonl.CHUNK_BYTES):
        fetched = jsonl.fetch_lists(lazy, rows, chunk_bytes=chunk_bytes)
        assert fetched.equals(eager.metrics.filter(rows_filter))


def test_a_clean_range_is_read_with_the_list_columns_alone(tmp_path, monkeypatch):
    path = tmp_path / "train.jsonl"
    _write(path, _clean_lines())

    def whole_parse(*args, **kwargs):
        raise AssertionError("a clean range needs no whole parse")

    lazy_rows = pl.col("step") >= 30
    eager = load_log(path, lists=True)
    lazy = load_log(path, lists=False)
    monkeypatch.setattr(jsonl, "parse_records", whole_parse)
    fetched = jsonl.fetch_lists(lazy, lazy.metrics.filter(lazy_rows), chunk_bytes=600)
    assert fetched.equals(eager.metrics.filter(lazy_rows))
    assert fetched["acc_pos"][-1].len() == MAX_LIST_ELEMENTS
    monkeypatch.undo()
    _fetched_equals_eager(path, pl.col("step").is_between(10, 90))


def test_mapped_list_fields_are_read_under_their_log_names(tmp_path):
    lines = [
        line.replace('"acc_pos"', '"train/acc_pos"').replace('"accept_pos"', '"train/accept"')
        for line in _clean_lines(60)
    ]
    path = tmp_path / "mapped.jsonl"
    _write(path, lines)
    fields = {"acc_pos": "train/acc_pos", "accept_pos": "train/accept"}
    _fetched_equals_eager(path, pl.col("step") > 5, fields=fields)


@pytest.mark.parametrize(
    "bad",
    [
        '"loss": "2.5"',  # a number given as a string: coerced by the first pass
        '"loss": true',  # no number: counted as non-numeric
        '"acc_pos": [0.5, "0.25"]',  # a list element given as a string
        '"acc_pos": [0.5, NaN]',  # Python's bare NaN token: polars rejects the line
    ],
)
def test_ranges_with_bad_values_read_as_the_whole_parse_does(tmp_path, bad):
    lines = _clean_lines(80)
    key = bad.split(":")[0]
    record = json.loads(lines[40])
    record.pop(json.loads(key))
    lines[40] = json.dumps(record)[:-1] + ", " + bad + "}"
    path = tmp_path / "bad.jsonl"
    _write(path, lines)
    _fetched_equals_eager(path, pl.col("step").is_between(20, 70))


@pytest.mark.parametrize("name", ["train.jsonl", "train.jsonl.gz"])
@pytest.mark.parametrize("chunk_bytes", [600, jsonl.CHUNK_BYTES])
def test_consecutive_ranges_start_where_the_one_before_ended(tmp_path, name, chunk_bytes):
    """A list series reads the records batch after batch: each range starts at the line start
    the one before recorded (in the decompressed stream for a ``.gz``)."""
    import gzip

    text = "".join(line + "\n" for line in _clean_lines(150))
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    eager = load_log(path, lists=True)
    lazy = load_log(path, lists=False)
    recorded = list(lazy.chunk_starts[0])
    for first, last in [(1, 40), (41, 41), (42, 97), (98, 151)]:
        rows = pl.col("step").is_between(first, last)
        fetched = jsonl.fetch_lists(lazy, lazy.metrics.filter(rows), chunk_bytes=chunk_bytes)
        assert fetched.equals(eager.metrics.filter(rows))
    learnt = sorted(set(lazy.chunk_starts[0]) - set(recorded))
    assert len(learnt) >= 3
    data = text.encode()
    for offset, line_no in learnt:  # each a line's true start
        assert data[:offset].count(b"\n") == line_no - 1
        assert offset == 0 or data[offset - 1 : offset] == b"\n"
