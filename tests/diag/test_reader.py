"""The reader: torn and malformed lines, NaN/Inf, types, events, gz, stdin, bisection, appending."""

from __future__ import annotations

import gzip
import io
import json
import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag import DiagError, load_log, parse_records

from .logs import dumps, write


def test_torn_last_line_is_ignored_quietly():
    log = parse_records(b'{"step": 1, "acc": 0.5}\n{"step": 2, "acc": 0.6}\n{"step": 3, "ac')
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.issues.malformed == 0
    assert log.issues.torn_tail == [0]
    assert log.consumed_bytes == len(b'{"step": 1, "acc": 0.5}\n{"step": 2, "acc": 0.6}\n')


def test_complete_last_record_without_newline_is_kept_only_when_final():
    data = b'{"step": 1}\n{"step": 2}'
    assert parse_records(data).metrics["step"].to_list() == [1, 2]
    partial = parse_records(data, final=False)
    assert partial.metrics["step"].to_list() == [1]
    assert partial.consumed_bytes == len(b'{"step": 1}\n')


def test_malformed_lines_are_counted_with_line_numbers():
    lines = [json.dumps({"step": s, "acc": 0.1}) for s in range(1, 11)]
    lines[2] = "not json"
    lines[6] = '{"step": 7, "acc": '
    lines[8] = "[1, 2, 3]"  # valid JSON, not an object
    log = parse_records(("\n".join(lines) + "\n").encode())
    assert log.issues.malformed == 3
    assert [line for _, line in log.issues.malformed_lines] == [3, 7, 9]
    assert log.metrics["step"].to_list() == [1, 2, 4, 5, 6, 8, 10]


def test_strict_makes_a_malformed_line_an_error():
    with pytest.raises(DiagError, match="line 2"):
        parse_records(b'{"step": 1}\n{oops\n{"step": 3}\n', strict=True)
    # ... but a torn tail is still only a writer that is mid-line.
    assert parse_records(b'{"step": 1}\n{"st', strict=True).metrics.height == 1


def test_bisection_keeps_every_good_line_of_a_large_buffer():
    records = [
        {"step": s, "loss": 2.0 - s / 1e4, "acc": s / 1e4, "acc_pos": [0.5, 0.25]}
        for s in range(3000)
    ]
    clean = parse_records(dumps(records)).metrics
    lines = dumps(records).split(b"\n")
    lines[1234] = b'{"step": 1234, "loss": '  # one bad line in the middle
    dirty = parse_records(b"\n".join(lines))
    assert dirty.issues.malformed == 1
    assert dirty.issues.malformed_lines == [(0, 1235)]
    expected = clean.filter(pl.col("step") != 1234).drop("seq")
    assert dirty.metrics.drop("seq").equals(expected)


def test_nan_and_infinity_tokens_are_parsed_and_counted():
    data = dumps(
        [
            {"step": 1, "loss": float("nan"), "acc": 0.5, "acc_pos": [0.5, float("-inf")]},
            {"step": 2, "loss": float("inf"), "acc": 0.6, "grad_norm": float("nan")},
            {"step": 3, "loss": 1.0, "acc": 0.7},
        ]
    )
    assert b"NaN" in data
    assert b"Infinity" in data
    log = parse_records(data)
    loss = log.metrics["loss"].to_list()
    assert math.isnan(loss[0])
    assert loss[1] == math.inf
    assert loss[2] == 1.0
    assert log.metrics["acc_pos"][0].to_list() == [0.5, -math.inf]
    assert log.issues.nonfinite == {"loss": 2, "acc_pos": 1, "grad_norm": 1}
    assert log.issues.nonfinite_total == 4


def test_nan_inside_a_string_is_left_alone():
    log = parse_records(
        b'{"event": "checkpoint", "step": 5, "path": "runs/NaN,Infinity]"}\n{"step": 5}\n'
    )
    assert log.events[0].fields["path"] == "runs/NaN,Infinity]"


def test_strings_where_numbers_belong_are_converted_or_counted():
    log = parse_records(
        dumps(
            [
                {"step": 1, "loss": "1.5", "acc": "nan"},
                {"step": "2", "loss": "abc", "acc": True},
                {"step": 3, "loss": 1.0, "acc": {"x": 1}, "acc_pos": "0.5"},
            ]
        )
    )
    frame = log.metrics
    assert frame["step"].to_list() == [1, 2, 3]
    assert frame["loss"].to_list() == [1.5, None, 1.0]
    assert math.isnan(frame["acc"][0])
    assert frame["acc"][1] is None
    assert frame["acc"][2] is None
    assert log.issues.coerced == 3  # "1.5", "nan", "2"
    assert log.issues.nonnumeric == 4  # "abc", true, {"x": 1}, "0.5" for a list
    assert [line for _, line in log.issues.nonnumeric_lines] == [2, 3]
    assert log.issues.nonfinite == {"acc": 1}


def test_float_steps_blank_lines_and_crlf():
    log = parse_records(b'{"step": 1.0, "acc": 0.1}\r\n\r\n   \n{"step": 2, "acc": 0.2}\r\n')
    assert log.metrics["step"].dtype == pl.Int64
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.issues.malformed == 0


def test_mixed_record_kinds():
    log = parse_records(
        dumps(
            [
                {"step": 1, "acc": 0.1},
                {
                    "event": "run_start",
                    "script": "pipeline",
                    "schedule": {"kind": "cosine", "peak_lr": 1e-3},
                    "config": {"a": [1, 2]},
                    "resumed_from": {"path": "ck", "step": 1},
                    "block_size": 8,
                },
                {"step": 2, "acc": 0.2, "tok_per_sec": 100.0},
                {"event": "metrics", "step": 3, "acc": 0.3},
                {"event": "eval", "step": 3, "tau": 2.5, "tau_hist": [0, 1, 1], "n_prompts": 4},
                {"event": "checkpoint", "step": 3, "path": "ck3"},
                {"hello": "a record with neither step nor event"},
                {"event": "run_start", "script": "sync"},
                {"step": 4, "acc": 0.4},
            ]
        )
    )
    assert log.metrics["step"].to_list() == [1, 2, 3, 4]
    assert log.metrics["run"].to_list() == [-1, 0, 0, 1]
    assert log.metrics["script"].to_list() == [None, "pipeline", "pipeline", "sync"]
    assert [e.kind for e in log.events] == ["run_start", "eval", "checkpoint", "run_start"]
    header = log.run_starts[0]
    assert header.step == 1
    assert header.fields["schedule"] == {"kind": "cosine", "peak_lr": 1e-3}
    assert header.fields["config"] == {"a": [1, 2]}
    assert header.fields["block_size"] == 8
    assert log.evals[0].fields["tau"] == 2.5
    assert log.evals[0].fields["tau_hist"] == [0, 1, 1]
    assert log.issues.without_step == 1


def test_field_map_renames_other_trainers_fields():
    data = dumps([{"global_step": s, "train/acc": 0.1 * s, "acc": 99.0} for s in (1, 2)])
    log = parse_records(data, fields={"step": "global_step", "acc": "train/acc"})
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.metrics["acc"].to_list() == pytest.approx([0.1, 0.2])


def test_append_continues_runs_and_positions():
    records = [{"event": "run_start", "script": "pipeline"}] + [
        {"step": s, "acc": 0.1} for s in range(6)
    ]
    data = dumps(records)
    cut = data.index(b'{"step": 3')
    first = parse_records(data[: cut + 5], final=False)
    rest = data[first.consumed_bytes :]
    joined = first.append(parse_records(rest))
    whole = parse_records(data)
    assert joined.metrics.equals(whole.metrics)
    assert joined.consumed_bytes == len(data)


def test_load_log_gz_and_several_files_in_step_order(tmp_path):
    a = write(tmp_path / "rank0.jsonl.gz", [{"step": s, "acc": 0.1} for s in (1, 3, 5)], gz=True)
    b = write(tmp_path / "rank1.jsonl", [{"step": s, "acc": 0.2} for s in (2, 4)])
    log = load_log([a, b])
    assert log.sources == [str(a), str(b)]
    assert sorted(log.metrics["step"].to_list()) == [1, 2, 3, 4, 5]
    assert set(log.metrics["source"].to_list()) == {0, 1}


def test_load_log_stdin(monkeypatch):
    fake = io.TextIOWrapper(io.BytesIO(gzip.compress(b'{"step": 7, "acc": 0.3}\n')))
    monkeypatch.setattr("sys.stdin", fake)
    assert load_log("-").metrics["step"].to_list() == [7]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty log"),
        (b"\n\n", "empty log"),
        (b'{"acc": 0.1}\n', "no record has a 'step'"),
        (b'{"event": "run_start"}\n', "no metric records"),
    ],
)
def test_load_log_input_errors(tmp_path, content, message):
    path = tmp_path / "log.jsonl"
    path.write_bytes(content)
    with pytest.raises(DiagError, match=message):
        load_log(path)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DiagError, match="no such file"):
        load_log(tmp_path / "nope.jsonl")
    with pytest.raises(DiagError, match="directory"):
        load_log(tmp_path)


def test_streaming_in_small_chunks_matches_one_parse():
    from dflash_diag.read.jsonl import parse_stream

    from .make_sample_log import generate

    data = generate(seed=2, pipeline_steps=200)
    lines = data.split(b"\n")
    lines[300] = b"{garbage"
    data = b"\n".join(lines)
    whole = parse_records(data)
    streamed = parse_stream(io.BytesIO(data), chunk_bytes=4096)
    assert streamed.metrics.equals(whole.metrics)
    assert [(e.kind, e.seq, e.step) for e in streamed.events] == [
        (e.kind, e.seq, e.step) for e in whole.events
    ]
    assert streamed.issues == whole.issues
    assert streamed.issues.malformed_lines == [(0, 301)]
    assert streamed.issues.torn_tail == [0]


def test_streamed_chunks_holding_different_fields_keep_every_column_in_order():
    """A chunk keeps only the fields with a value in it (a field first written half-way, one
    written in the first chunk only, most never): the streamed frame has every column of the
    schema, in its order and dtype, with nulls where a chunk had no value, as one parse does."""
    from dflash_diag.read.jsonl import parse_stream
    from dflash_diag.read.schema import read_schema

    lines = []
    for step in range(1, 401):
        record = {"step": step, "loss": 3.0 - step / 400}
        if step <= 50:
            record["grad_norm"] = 1.0
        if step > 200:
            record["tok_per_sec"] = 1000.0 + step
            record["walk_hist"] = [1.0, 2.0]
        lines.append(json.dumps(record))
    data = ("\n".join(lines) + "\n").encode()
    whole = parse_records(data, lists=False)
    streamed = parse_stream(io.BytesIO(data), chunk_bytes=1500, lists=False)
    assert len(streamed.chunk_starts[0]) > 10
    assert streamed.metrics.equals(whole.metrics)
    schema, _ = read_schema(None, None)
    fields = [n for n in schema if n not in ("step", "event")]
    assert streamed.metrics.columns == ["source", "seq", "run", "script", "step", *fields]
    assert all(streamed.metrics.schema[n] == schema[n] for n in fields)
    assert streamed.metrics["tok_per_sec"].null_count() == 200
    assert streamed.metrics["grad_norm"].null_count() == 350
    assert streamed.metrics["walk_hist"].to_list()[-1] == [1.0, 2.0]
    assert streamed.metrics["tau_train"].null_count() == 400


def test_event_and_record_line_numbers():
    log = parse_records(
        b'{"step": 1}\n\n{"event": "eval", "step": 1, "tau": 2.0}\n  \n{"step": 2}\n'
    )
    assert log.metrics["seq"].to_list() == [1, 5]
    assert log.events[0].seq == 3


def test_lists_read_lazily_for_the_rows_that_need_them(tmp_path):
    from dflash_diag.read.jsonl import fetch_lists

    from .make_sample_log import generate

    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(generate(seed=4, pipeline_steps=300)))
    eager = load_log(path, lists=True)
    lazy = load_log(path, lists=False)
    assert lazy.lists_pending == [0]
    assert eager.lists_pending == []
    assert lazy.metrics["acc_pos"].null_count() == lazy.metrics.height
    assert lazy.metrics.drop("acc_pos", "accept_pos").equals(
        eager.metrics.drop("acc_pos", "accept_pos")
    )
    tail = lazy.metrics.tail(40)
    fetched = fetch_lists(lazy, tail, chunk_bytes=2048)
    assert fetched.equals(eager.metrics.tail(40))
    assert fetch_lists(eager, eager.metrics.tail(3)).equals(eager.metrics.tail(3))


def test_plain_file_chunks_seek_back_and_long_lines(tmp_path):
    from dflash_diag.read.jsonl import parse_stream

    from .make_sample_log import generate

    data = generate(seed=5, pipeline_steps=40)
    path = tmp_path / "train.jsonl"
    path.write_bytes(data)
    whole = parse_records(data)
    for chunk_bytes in (100, 1000, 7919):  # 100 is shorter than most lines
        with path.open("rb") as handle:
            streamed = parse_stream(handle, chunk_bytes=chunk_bytes)
        assert streamed.metrics.equals(whole.metrics)
        assert streamed.issues == whole.issues
        assert [e.seq for e in streamed.events] == [e.seq for e in whole.events]


def test_plain_file_pipelined_chunks_keep_lines_issues_and_list_offsets(tmp_path):
    """The plain-file path (probe + pread, polars parsing the next chunk in a worker thread):
    blank lines, NaN, a malformed line and a torn tail in different chunks give the same result
    as one parse; --strict names the right line; fetch_lists seeks to the recorded chunk starts."""
    from dflash_diag.errors import DiagError
    from dflash_diag.read.jsonl import fetch_lists, parse_stream

    from .make_sample_log import generate

    lines = generate(seed=6, pipeline_steps=120).split(b"\n")
    lines[40] = b""
    lines[41] = b"   "
    lines[150] = lines[150].replace(b'"loss": ', b'"loss": NaN, "x": ', 1)
    lines[200] = b'{"step": 7, "acc": '
    data = b"\n".join(lines)
    path = tmp_path / "train.jsonl"
    path.write_bytes(data)
    whole = parse_records(data)
    assert whole.issues.malformed_lines == [(0, 201)]
    assert whole.issues.nonfinite.get("loss") == 1
    for chunk_bytes in (700, 4096, 50_000):
        with path.open("rb") as handle:
            streamed = parse_stream(handle, chunk_bytes=chunk_bytes)
        assert streamed.metrics.equals(whole.metrics)
        assert streamed.issues == whole.issues
        assert [(e.kind, e.seq, e.step) for e in streamed.events] == [
            (e.kind, e.seq, e.step) for e in whole.events
        ]
        with path.open("rb") as handle, pytest.raises(DiagError, match="line 201"):
            parse_stream(handle, chunk_bytes=chunk_bytes, strict=True)
    eager = load_log(path, lists=True)
    lazy = load_log(path, lists=False)
    assert len(lazy.chunk_starts[0]) == 1  # one default-sized chunk for a small file
    rows = lazy.metrics.filter(pl.col("seq") > 250)
    assert fetch_lists(lazy, rows, chunk_bytes=2048).equals(
        eager.metrics.filter(pl.col("seq") > 250)
    )
    middle = pl.col("seq").is_between(100, 140)  # inside one chunk: only those lines are parsed
    assert fetch_lists(lazy, lazy.metrics.filter(middle)).equals(eager.metrics.filter(middle))
    with path.open("rb") as handle:  # recorded chunk starts of a many-chunk parse
        chunked = parse_stream(handle, chunk_bytes=700, lists=False)
    chunked.sources = [str(path)]
    assert len(chunked.chunk_starts[0]) > 10
    rows = chunked.metrics.filter(pl.col("seq").is_between(180, 260))
    assert fetch_lists(chunked, rows, chunk_bytes=700).equals(
        eager.metrics.filter(pl.col("seq").is_between(180, 260))
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=60),
    st.booleans(),
    st.sampled_from([1, 3, 16, 2**16]),
)
def test_line_index_finds_every_line_like_a_split(lines, trailing_newline, block):
    from dflash_diag.read.jsonl import _count_newlines, _LineIndex

    body = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    split = body.split(b"\n")
    index = type("SmallBlocks", (_LineIndex,), {"BLOCK": block})(body)
    assert index.newlines == _count_newlines(body) == body.count(b"\n")
    assert [index.line(i) for i in range(len(split))] == split


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=300),
    st.lists(st.integers(0, 320), max_size=80).map(sorted),
    st.sampled_from([1, 3, 16, 2**16]),
    st.sampled_from([0, 2, 64]),
)
def test_line_index_finds_many_lines_in_one_walk_like_one_by_one(lines, wanted, block, near):
    """The walk from line to line (the event lines of an eval-dense log) gives each line as the
    lookup of that line alone: near and far gaps, repeats, past the last line."""
    from dflash_diag.read.jsonl import _LineIndex

    body = b"\n".join(lines) + b"\n"
    index = type("Small", (_LineIndex,), {"BLOCK": block, "NEAR": near})(body)
    assert list(index.lines(wanted)) == [index.line(i) for i in wanted]
