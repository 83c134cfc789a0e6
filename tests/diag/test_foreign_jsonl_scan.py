"""The polars fast path for other trainers' JSONL gives the line reader's log exactly, or declines.

Each case reads a file both ways (the fast path, then the line reader it replaces) and compares
the canonical logs; where the fast path must apply (clean, regular files) it must not decline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflash_diag.read.formats.canonical import to_parsed_log
from dflash_diag.read.formats.detect import HEAD_BYTES
from dflash_diag.read.formats.foreign_jsonl import FORMAT, STEP_KEYS, read_foreign_jsonl
from dflash_diag.read.formats.foreign_jsonl_scan import read_foreign_jsonl_scan

ROOT = Path(__file__).resolve().parents[2]
REAL = [
    ROOT / "shared/wild/AolinGuo__graduate_agent/trainer_log.jsonl",
    ROOT / "shared/wild/gi7014__SunXiaochuan-V1/trainer_log.jsonl",
    # LLaMA-Factory's eval rows repeat the train row's step with its total_steps: summaries
    ROOT / "shared/wild/xueh88401-web__qwen2.5-7b-medical-finetune/trainer_log.jsonl",
    ROOT / "tests/fixtures/formats/speculators_jsonl/metrics.jsonl",
]


def both(path: Path):
    fast = read_foreign_jsonl_scan(path, FORMAT, STEP_KEYS)
    slow = to_parsed_log(read_foreign_jsonl(path))
    if fast is not None:
        got = to_parsed_log(fast)
        assert got.log.metrics.equals(slow.log.metrics)
        assert got.log.events == slow.log.events
        assert got.log.issues == slow.log.issues
        assert got.notes == slow.notes
        assert got.description == slow.description
    return fast, slow


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_real_logs_read_fast_and_the_same(path):
    if not path.exists():
        pytest.skip(f"{path} not in this checkout (the corpus merge brings it)")
    fast, _ = both(path)
    assert fast is not None


def _hf(step: int) -> dict:
    return {
        "loss": 2.0 / step,
        "grad_norm": 1.5,
        "learning_rate": 1e-4,
        "epoch": step / 100,
        "step": step,
    }


def _write(path: Path, records, tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_keys_first_written_after_the_head_are_found(tmp_path):
    records = [_hf(s) for s in range(1, HEAD_BYTES // 50)]
    records.append({"eval_loss": 0.5, "eval_mean_token_accuracy": 0.6, "step": len(records)})
    records.append({"train_runtime": 100.0, "total_flos": 1e12, "step": len(records)})
    fast, slow = both(_write(tmp_path / "late.jsonl", records))
    assert fast is not None
    assert slow.log.events  # the eval record became an eval event both ways


@pytest.mark.parametrize(
    "case",
    [
        "null",
        "numeric_string",
        "duplicate_key",
        "bool",
        "torn",
        "malformed",
        "nan",
        "list",
        "time",
        "late_nested_field",
        "colon_text",
        "event",
        "type_change",
    ],
)
def test_dirty_files_decline_or_agree(tmp_path, case):
    records = [_hf(s) for s in range(1, 400)]
    tail = ""
    if case == "null":
        records[200]["grad_norm"] = None
    elif case == "numeric_string":
        records[1]["note"] = "warm-up"  # a string key in the head...
        records[300]["note"] = " 0.25 "  # ...that the line reader keeps as a number here
    elif case == "bool":
        records[10]["skipped"] = True
    elif case == "torn":
        tail = '{"loss": 0.1, "st'
    elif case == "list":
        records[5]["acc_pos"] = [0.5, 0.4]
    elif case == "time":
        records[5]["time"] = 17.0
    elif case == "late_nested_field":
        records = [{"global_step": s, "train": {"loss": 1.0 / s}} for s in range(1, 3000)]
        records[-1]["train"]["full_acc"] = 0.5
    elif case == "colon_text":
        records[3]["elapsed"] = "0:01:02 null"
        records[4]["a:null:b"] = 1.0
    elif case == "event":
        records[7] = {"event": "eval", "step": 7, "tau": 3.0}
    elif case == "type_change":
        records[350]["epoch"] = "late"
    path = _write(tmp_path / f"{case}.jsonl", records, tail)
    text = path.read_text()
    if case == "duplicate_key":
        text = text.replace('"step": 9}', '"step": 9, "loss": 7.0}', 1)
    elif case == "malformed":
        text = text.replace("\n", "\nnot json\n", 1)
    elif case == "nan":
        text = text.replace('"grad_norm": 1.5', '"grad_norm": NaN', 1)
    path.write_text(text)
    fast, _ = both(path)
    if case in ("late_nested_field", "colon_text", "bool"):
        assert fast is not None  # clean enough: the fast path must take it
    if case in (
        "duplicate_key",
        "torn",
        "malformed",
        "nan",
        "type_change",
        "numeric_string",
    ):
        assert fast is None


@pytest.mark.parametrize(
    "case",
    [
        "every_record",
        "with_nulls",
        "late",
        "empty",
        "in_object",
        "text",
        "objects",
        "object_with_null_and_a_missing_colon",
        "nested",
        "number_then_list",
    ],
)
def test_lists_are_no_values_as_the_line_reader_reads_them(tmp_path, case):
    # the line reader keeps numbers only, so a list (per-position accuracies) is no value; the
    # fast path reads lists of numbers to account for their keys and declines any other list
    # a null value in the head declines any file: "with_nulls" puts one past it
    n = HEAD_BYTES // 60 if case == "with_nulls" else 400
    records = [_hf(s) for s in range(1, n)]
    for i, record in enumerate(records):
        if case in ("every_record", "with_nulls", "number_then_list"):
            record["acc_pos"] = [0.5 - i * 1e-4, 0.4, 0.3]
        elif case == "empty":
            record["acc_pos"] = []
        elif case == "in_object":
            record["train"] = {"loss": 1.0 / (i + 1), "acc_pos": [0.5, 0.25]}
    if case == "with_nulls":
        records[10]["acc_pos"] = [0.5, None, None]
        records[-2]["acc_pos"] = None
        records[-1]["acc_pos"] = [None]
    elif case == "late":
        records[300]["acc_pos"] = [0.5, 0.4]
    elif case == "text":
        records[300]["acc_pos"] = ["a:b", "null"]
    elif case == "objects":
        records[300]["acc_pos"] = [{"k": 1.0}]
    elif case == "object_with_null_and_a_missing_colon":
        records[300]["acc_pos"] = [{"k": None}]
    elif case == "nested":
        records[300]["acc_pos"] = [[0.5], [0.4]]
    elif case == "number_then_list":
        records[200]["acc_pos"] = 0.5
    fast, slow = both(_write(tmp_path / f"{case}.jsonl", records))
    if case in ("every_record", "with_nulls", "late", "empty", "in_object"):
        assert fast is not None  # lists of numbers: the fast path takes them
        assert slow.log.metrics["loss"].len() == n - 1
    elif case in ("text", "objects", "nested", "number_then_list"):
        assert fast is None


@pytest.mark.parametrize(
    "case",
    [
        "number",
        "text",
        "late_number",
        "some_null",
        "with_wandb_timestamp",
        "wandb_timestamp_where_time_is_missing",
        "wandb_timestamp_and_a_null_time",
        "wandb_timestamp_and_a_text_time",
        "wandb_timestamp_and_time_null_in_every_record",
        "text_late",
        "bool",
    ],
)
def test_a_time_key_is_the_records_time_as_the_line_reader_reads_it(tmp_path, case):
    # the line reader's clock is the numeric "time" value where the file writes "time" (a
    # record without one has no time, "_timestamp" or not), else "_timestamp"; the fast path
    # reads it so (both() compares), or declines where polars cannot tell (a "time" written
    # null in every record reads as no key: "_timestamp" would be taken)
    records = [_hf(s) for s in range(1, 400)]
    for i, record in enumerate(records):
        if case in ("number", "some_null") or case.startswith(("with_wandb", "wandb")):
            record["time"] = 1_700_000_000.0 + 2.5 * i
        elif case == "bool":
            record["time"] = i % 2 == 0
        elif case == "text":
            record["time"] = f"2026-11-01T12:{i // 60 % 60:02d}:{i % 60:02d}"
    if case == "late_number":
        records[300]["time"] = 17.0
    elif case == "some_null":
        records[200]["time"] = None
    if case.startswith(("with_wandb", "wandb")):
        for i, record in enumerate(records):
            record["_timestamp"] = 1_600_000_000.0 + i
    if case == "wandb_timestamp_where_time_is_missing":
        for record in records[100:200]:
            del record["time"]
    elif case == "wandb_timestamp_and_a_null_time":
        records[300]["time"] = None
    elif case == "wandb_timestamp_and_a_text_time":
        records[300]["time"] = "12:00:01"
    elif case == "wandb_timestamp_and_time_null_in_every_record":
        for record in records:
            record["time"] = None
    elif case == "text_late":
        records[-1]["time"] = "00:25:00"
    fast, slow = both(_write(tmp_path / f"{case}.jsonl", records))
    if case in ("wandb_timestamp_and_a_text_time", "wandb_timestamp_and_time_null_in_every_record"):
        assert fast is None  # a number and a text "time"; a "time" polars cannot see
    elif case == "wandb_timestamp_where_time_is_missing":
        assert fast is not None  # W&B's clock beside the trainer's: read fast (was declined)
        assert slow.log.metrics["time"][100:200].null_count() == 100
    elif case not in ("some_null",):  # a null value: declined as any null is, or read the same
        assert fast is not None  # a clean log with a "time" key: the fast path takes it
    if case == "number":
        assert slow.log.metrics["time"].to_list()[:2] == [1_700_000_000.0, 1_700_000_002.5]


def test_a_file_of_many_pieces_reads_as_one(tmp_path, monkeypatch):
    """Read in pieces of a few KiB: keys first written in a late piece, a null in another, a
    line longer than a piece and a last line with no newline give the line reader's log."""
    from dflash_diag.read.formats import foreign_jsonl_scan

    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 4096)
    records = [_hf(s) for s in range(1, 3000)]
    records[1500]["grad_norm"] = None
    records[2000]["note"] = "x" * 10_000
    records.append({"eval_loss": 0.5, "step": len(records)})
    records.append({"train_runtime": 100.0, "step": len(records)})
    text = "".join(json.dumps(r) + "\n" for r in records)
    path = tmp_path / "pieces.jsonl"
    path.write_text(text.rstrip("\n"))
    fast, slow = both(path)
    assert fast is not None
    assert slow.log.events
    assert fast.wide[0].height == len(records)


def test_released_pieces_give_the_same_log_and_the_nothing_maps_line_its_series(tmp_path):
    """The canonical build may free the reader's wide pieces as it goes: the same log, and a
    log with nothing to map still names the series it holds (read again for the line)."""
    from dflash_diag import load_log
    from dflash_diag.errors import DiagError

    path = _write(tmp_path / "hf.jsonl", [_hf(s) for s in range(1, 300)])
    kept = to_parsed_log(read_foreign_jsonl_scan(path, FORMAT, STEP_KEYS))
    scalars = read_foreign_jsonl_scan(path, FORMAT, STEP_KEYS)
    released = to_parsed_log(scalars, release=True)
    assert scalars.wide == []
    assert released.log.metrics.equals(kept.log.metrics)
    assert released.log.events == kept.log.events
    bare = [{"grad_norm": 1.5, "learning_rate": 1e-4, "step": s} for s in range(1, 300)]
    with pytest.raises(DiagError, match=r"no series maps to loss or acc.*grad_norm"):
        load_log(_write(tmp_path / "bare.jsonl", bare))


def _nested(step: int) -> dict:
    return {
        "global_step": step,
        "lr": 1e-4,
        "train": {"loss": 2.0 / step, "full_acc": 0.5, "position_1_acc": 0.4},
    }


_OBJECT_CASES = [
    "plain",
    "compact",
    "not_last",
    "null_object",
    "empty_object",
    "object_in_object",
    "object_elsewhere",
    "braces_in_strings",
    "escaped_quote_key",
    "field_named_like_a_key",
    "two_objects_same_fields",
    "mixed_separators",
    "crlf",
    "string_field_with_brace",
    "no_trailing_newline",
]


@pytest.mark.parametrize("case", _OBJECT_CASES)
def test_objects_opened_give_the_line_readers_log(tmp_path, monkeypatch, case):
    """Pieces read with their objects opened (``"train": {`` and its brace made blanks) give the
    line reader's log whatever else the file holds, in pieces of a few KiB so that clean and
    odd pieces mix; the regular layouts are read fast."""
    from dflash_diag.read.formats import foreign_jsonl_scan

    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 4096)
    records = [_nested(s) for s in range(1, 1200)]
    separators = (", ", ": ")
    if case == "compact":
        separators = (",", ":")
    elif case == "not_last":
        records = [
            {"global_step": r["global_step"], "train": r["train"], "lr": 1e-4} for r in records
        ]
    elif case == "null_object":
        records[300]["train"] = None
    elif case == "empty_object":
        records[300]["train"] = {}
    elif case == "object_in_object":
        records[300]["train"]["extra"] = {"a": 1.0}
    elif case == "object_elsewhere":
        records[300]["other"] = {"train": {"loss": 9.0}}
    elif case == "braces_in_strings":
        records[1]["note"] = 'a "train": {x} }'
        records[300]["note"] = "}}{"
    elif case == "escaped_quote_key":
        records[300]['x"train'] = {"loss": 9.0}
    elif case == "field_named_like_a_key":
        records[300]["loss"] = 7.0
    elif case == "two_objects_same_fields":
        for r in records:
            r["val"] = {"loss": 3.0, "full_acc": 0.4}
    elif case == "string_field_with_brace":
        records[1]["train"]["tag"] = "a}b"
        records[300]["train"]["tag"] = "}"
    text = "".join(json.dumps(r, separators=separators) + "\n" for r in records)
    if case == "mixed_separators":
        # the head writes "train": {, the file's end "train":{ too (its pieces read as they are)
        lines = text.splitlines(keepends=True)
        lines[-50:] = [line.replace('"train": {', '"train":{') for line in lines[-50:]]
        text = "".join(lines)
    elif case == "crlf":
        text = text.replace("\n", "\r\n")
    elif case == "no_trailing_newline":
        text = text.rstrip("\n")
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(text.encode())
    fast, _ = both(path)
    if case in (
        "plain",
        "compact",
        "not_last",
        "mixed_separators",
        "crlf",
        "no_trailing_newline",
        "braces_in_strings",
        "two_objects_same_fields",
    ):
        assert fast is not None
        assert fast.wide[0].height == len(records)


def test_objects_are_opened_on_the_regular_layouts(tmp_path):
    """The opened read takes the pieces of the layouts it is for (not a fallback every time):
    the speculators fixture and json.dumps' and compact separators."""
    from dflash_diag.read.formats import foreign_jsonl_scan as scan

    real = ROOT / "tests/fixtures/formats/speculators_jsonl/metrics.jsonl"
    compact = tmp_path / "compact.jsonl"
    compact.write_text(
        "".join(json.dumps(_nested(s), separators=(",", ":")) + "\n" for s in range(1, 300))
    )
    for path in (real, compact):
        head = path.read_bytes()[:HEAD_BYTES]
        tree = scan._head_tree(head)
        opening = scan._Opening.of(tree, [], head)
        assert opening is not None
        pieces = list(scan._pieces(path))
        for piece in pieces:
            read = opening.read(piece)
            assert read is not None
            frame, columns, colons, found, nulls = read
            assert frame.height == len(piece.splitlines())
            assert colons == piece.count(b":") - piece.count(b'"train":')
            assert colons == found
            assert nulls == 0
            assert "train/loss" in [c.name for c in columns]
            assert b'"train"' not in scan._opened(piece, opening.patterns)[0]
    # a field named like a top-level key, an object in an object: no opening
    assert scan._Opening.of({"loss": "Float64", "train": {"loss": "Float64"}}, [], b"") is None
    assert scan._Opening.of({"t": {"a": {"b": "Float64"}}}, [], b'"t": {') is None


@pytest.mark.parametrize(
    "case",
    ["first_record", "null_everywhere", "validation_key", "in_object", "text_later", "epoch"],
)
def test_nulls_in_the_head_are_read_as_the_line_reader_reads_them(tmp_path, case):
    # a null gives no type: the fast path reads on (a later number gives the type, a key null
    # everywhere is no value) where the line reader's rules do not ask for the key's presence
    n = HEAD_BYTES // 60
    records = [_hf(s) for s in range(1, n)]
    if case == "first_record":
        records[0]["grad_norm"] = None
    elif case == "null_everywhere":
        for record in records:
            record["grad_norm"] = None
    elif case == "validation_key":
        records[0]["eval_loss"] = None
        records[-1]["eval_loss"] = 0.5
    elif case == "in_object":
        records = [{"global_step": s, "train": {"loss": 1.0 / s, "acc": None}} for s in range(1, n)]
        records[-1]["train"]["acc"] = 0.5
    elif case == "text_later":
        records[0]["note"] = None
        records[-1]["note"] = "done"
    elif case == "epoch":
        records[0]["epoch"] = None
    fast, _ = both(_write(tmp_path / f"{case}.jsonl", records))
    if case in ("validation_key", "epoch"):
        assert fast is None  # the epoch-summary rule asks for these keys' presence
    else:
        assert fast is not None


_SKIP_CASES = [
    "plain",
    "compact",
    "unknown_key_beside_null_elements",
    "space_before_colon",
    "text_with_colon_and_null",
    "object_then",
    "object_of_the_same_name",
    "list_in_an_object",
    "pattern_in_a_string",
    "key_ending_like_the_list",
    "null_value",
    "list_of_lists",
    "mixed_separators",
]


@pytest.mark.parametrize("case", _SKIP_CASES)
def test_lists_skipped_give_the_line_readers_log(tmp_path, monkeypatch, case):
    """Pieces read with their lists left out (each ``"acc_pos": [`` counted as a key) give the
    line reader's log whatever else the file holds, in pieces of a few KiB so that clean and
    odd pieces mix; a colon the count leaves over is never taken for a list's."""
    from dflash_diag.read.formats import foreign_jsonl_scan as scan

    monkeypatch.setattr(scan, "PIECE_BYTES", 4096)
    records = [{**_hf(s), "acc_pos": [0.5, 0.4, 0.3]} for s in range(1, 1200)]
    separators = (", ", ": ")
    late = records[900]
    if case == "compact":
        separators = (",", ":")
    elif case == "unknown_key_beside_null_elements":
        # the missing key's colon and the list's null token: equal counts, one value lost
        late["acc_pos"] = [0.5, None]
        late["acc"] = 0.7
    elif case == "text_with_colon_and_null":
        late["acc_pos"] = ["a:b", "null"]
    elif case == "object_then":
        late["acc_pos"] = {"acc_pos": 1.0}
    elif case == "object_of_the_same_name":
        for r in records:
            r["train"] = {"acc_pos": 0.5}
    elif case == "list_in_an_object":
        late["train"] = {"acc_pos": [0.5], "x": 2.0}
    elif case == "pattern_in_a_string":
        late["note"] = '"acc_pos": [1'
    elif case == "key_ending_like_the_list":
        late['x"acc_pos'] = [1.0]
        late["acc"] = 0.7
    elif case == "null_value":
        late["acc_pos"] = None
    elif case == "list_of_lists":
        late["acc_pos"] = [[0.5], [0.4]]
    text = "".join(json.dumps(r, separators=separators) + "\n" for r in records)
    if case == "space_before_colon":
        lines = text.splitlines(keepends=True)
        lines[900] = lines[900].replace('"acc_pos": [', '"acc_pos" : [')
        text = "".join(lines)
    elif case == "mixed_separators":
        # the head writes "acc_pos": [, the file's end "acc_pos":[ too (read with lists declared)
        lines = text.splitlines(keepends=True)
        lines[-50:] = [line.replace('"acc_pos": [', '"acc_pos":[') for line in lines[-50:]]
        text = "".join(lines)
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(text.encode())
    fast, slow = both(path)
    if case in ("unknown_key_beside_null_elements", "key_ending_like_the_list"):
        assert slow.log.metrics["acc"].drop_nulls().to_list() == [0.7]  # the one late value
    if case in (
        "plain",
        "compact",
        "space_before_colon",
        "null_value",
        "pattern_in_a_string",
        "mixed_separators",
    ):
        assert fast is not None
        assert fast.wide[0].height == len(records)
    if case in ("plain", "compact"):
        # every piece taken by the skipping read (not read again with the lists declared)
        head = path.read_bytes()[:HEAD_BYTES]
        skipping = scan._Skipping.of(scan._head_tree(head), [], head)
        assert skipping is not None
        assert all(skipping.read(piece) is not None for piece in scan._pieces(path))


def test_lists_are_not_skipped_where_a_count_could_name_two_keys():
    from dflash_diag.read.formats import foreign_jsonl_scan as scan

    assert scan._Skipping.of({"acc": "List", "train": {"acc": "Float64"}}, [], b"") is None
    assert scan._Skipping.of({"acc": "List", 'x"acc': "List"}, [], b"") is None
    assert scan._Skipping.of({"eval_acc": "List", "step": "Float64"}, ["eval_acc"], b"") is None
    tree = {"acc": "List", "step": "Float64"}
    skipping = scan._Skipping.of(tree, [], b"")
    assert skipping is not None
    assert skipping.patterns == (b'"acc": [', b'"acc":[')  # the head writes neither: both
    assert list(skipping.schema) == ["step"]
    assert scan._Skipping.of(tree, [], b'{"acc":[1]}').patterns == (b'"acc":[',)


@pytest.mark.parametrize(
    "case",
    ["null_in_head", "null_late", "null_spaced", "missing", "later_key_null", "null_only_key"],
)
def test_a_null_step_key_is_no_step_as_the_line_reader_reads_it(tmp_path, case):
    # the line reader takes the first step key a record holds, a null one too (no step); polars
    # reads a null as no key, where the wide piece's next step key would stand in
    records = [{"step": s, "global_step": 2 * s, "loss": 1.0 / s} for s in range(1, 1500)]
    at = 10 if case == "null_in_head" else 1200
    if case in ("null_in_head", "null_late", "null_spaced"):
        records[at]["step"] = None
    elif case == "missing":
        del records[at]["step"]
    elif case == "later_key_null":
        records[at]["global_step"] = None
    elif case == "null_only_key":
        records = [{"global_step": 2 * s, "loss": 1.0 / s} for s in range(1, 1500)]
        records[at]["step"] = None
    text = "".join(json.dumps(r) + "\n" for r in records)
    if case == "null_spaced":
        text = text.replace('"step": null', '"step" :\tnull')
    path = tmp_path / f"{case}.jsonl"
    path.write_text(text)
    fast, slow = both(path)
    steps = slow.log.metrics["step"].to_list()
    if case in ("missing", "later_key_null"):
        assert fast is not None
    else:
        assert len(steps) == len(records) - 1  # the null step's record has none


@pytest.mark.parametrize(
    "case", ["epoch_null_late", "validation_null_late", "null_grad_norm", "null_in_text"]
)
def test_a_null_epoch_or_validation_key_is_a_key_as_the_line_reader_reads_it(tmp_path, case):
    # the epoch-summary rule asks whether a record holds "epoch" and a validation key, a null one
    # too: a row at the step before's with a train value is a summary and its values renamed
    records = []
    for s in range(1, 1500):
        records.append({"loss": 2.0 / s, "learning_rate": 1e-4, "epoch": s / 100, "step": s})
        if s % 100 == 0:
            records.append({"eval_loss": 1.0 / s, "epoch": s / 100, "step": s})  # HF's eval row
    last = records[-1]
    if case == "epoch_null_late":
        records.append({"eval_loss": 0.5, "loss": 0.4, "epoch": None, "step": last["step"]})
    elif case == "validation_null_late":
        records.append({"eval_loss": None, "loss": 0.4, "epoch": 15.0, "step": last["step"]})
    elif case == "null_grad_norm":
        last["grad_norm"] = None
    elif case == "null_in_text":
        last["note"] = "a: null"
        records[-2]["grad_norm"] = None
    fast, slow = both(_write(tmp_path / f"{case}.jsonl", records))
    if case in ("epoch_null_late", "validation_null_late"):
        assert slow.log.metrics["loss"].drop_nulls().len() == len(records) - 14 - 1
    if case == "null_grad_norm":
        assert fast is not None


_SUMMARY_CASES = [
    "llama_factory",
    "with_time",
    "in_object",
    "two_step_keys",
    "first_record",
    "twice",
    "no_epoch",
    "named_like_a_summary",
    "eval_without_train_values",
]


@pytest.mark.parametrize("case", _SUMMARY_CASES)
def test_epoch_summaries_are_renamed_as_the_line_reader_renames_them(tmp_path, monkeypatch, case):
    """A row at the step of the record before it, with an epoch and a validation key, is an
    end-of-epoch summary: its other values are ``epoch_summary/<name>``, in the fast path as in
    the line reader; read in pieces of a few KiB (summaries on both sides of a cut)."""
    from dflash_diag.read.formats import foreign_jsonl_scan

    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 4096)
    records: list[dict] = []
    for s in range(10, 6000, 10):
        row = {"current_steps": s, "total_steps": 6000, "loss": 2.0 / s, "lr": 1e-4}
        row |= {"epoch": s / 2000, "percentage": s / 60, "elapsed_time": "0:00:32"}
        records.append(row)
        if s % 500 == 0:
            summary = {k: v for k, v in row.items() if k not in ("loss", "lr")}
            records.append({**summary, "eval_loss": 1.0 / s})
    evals = [i for i, r in enumerate(records) if "eval_loss" in r]
    if case == "with_time":
        for i, r in enumerate(records):
            r["time"] = 1_700_000_000.0 + i
    elif case == "in_object":
        for i in evals:
            records[i]["train"] = {"tokens": 5.0, "loss": 0.3}
    elif case == "two_step_keys":
        for r in records:
            r["global_step"] = r.pop("current_steps")
        for i in evals:
            records[i]["step"] = records[i]["global_step"]
    elif case == "first_record":
        records.insert(0, {"current_steps": 10, "epoch": 0.0, "eval_loss": 3.0, "loss": 2.5})
    elif case == "twice":
        for i in reversed(evals):
            records.insert(i + 1, {**records[i], "eval_loss": 0.25, "percentage": 1.0})
    elif case == "no_epoch":
        for i in evals:
            del records[i]["epoch"]
    elif case == "named_like_a_summary":
        records[-1]["epoch_summary/loss"] = 1.0
    elif case == "eval_without_train_values":
        for i in evals:
            records[i] = {k: records[i][k] for k in ("current_steps", "epoch", "eval_loss")}
    fast, _ = both(_write(tmp_path / f"{case}.jsonl", records))
    if case != "named_like_a_summary":
        assert fast is not None
        assert fast.wide[0].height == len(records)
    keys = {c for w in (fast.wide if fast is not None else []) for c in w.columns}
    if case in ("llama_factory", "with_time", "in_object", "two_step_keys", "twice"):
        assert "epoch_summary/total_steps" in keys or "epoch_summary/percentage" in keys
    if case == "in_object":
        assert "epoch_summary/train/loss" in keys
    if case in ("no_epoch", "eval_without_train_values"):
        assert not any(k.startswith("epoch_summary/") for k in keys)


@pytest.mark.parametrize("places", [1, 2, 6])
def test_keys_first_written_in_many_places_are_all_found(tmp_path, monkeypatch, places):
    """New keys first written in several pieces (reads that stop at the first such piece, then
    the read that takes every such piece at once) give the line reader's log, read fast."""
    from dflash_diag.read.formats import foreign_jsonl_scan

    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 4096)
    records = [_hf(s) for s in range(1, 4000)]
    for k in range(places):
        at = 1000 + k * 450
        for record in records[at::300]:
            record[f"extra_{k}"] = float(k)  # recurs from its first piece on
    records.append({"train_runtime": 100.0, "step": len(records)})
    fast, _ = both(_write(tmp_path / f"{places}.jsonl", records))
    assert fast is not None
    assert fast.wide[0].height == len(records)
    assert {f"extra_{k}" for k in range(places)} | {"train_runtime"} <= set(fast.wide[0].columns)
