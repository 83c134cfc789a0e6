"""Readers hold what their valid records cost, not the input (issue 19, items 1-3).

Each test builds a small hostile input, shrinks the reader's chunk so that the input spans
many chunks, and bounds the Python allocations of the read (``tracemalloc``) well below the
input's size: a reader that holds the whole input (or re-joins a record with every chunk)
fails. The full-size figures are in docs/reliability.md (benchmarks/bench_reader_bounds.py).
"""

from __future__ import annotations

import json
import struct
import tracemalloc

import polars as pl
import pytest

from dflash_diag.read.formats import tensorboard
from dflash_diag.read.formats.tensorboard import masked_crc32c, read_tensorboard
from dflash_diag.read.formats.wandb_offline import frame_records as _blocks

from .test_formats_readers import VERSION, _scalar_event


def peak_bytes(function, *args):
    """(result, peak Python allocation in bytes) of ``function(*args)``."""
    # the readers import numpy lazily: its first import (5 MB of module objects) is no
    # reader's allocation, and comes first when this file runs alone
    import numpy  # noqa: F401

    tracemalloc.start()
    try:
        result = function(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- TensorBoard: a record longer than a chunk ---------------------------------------------------


def _claim(length: int) -> bytes:
    header = struct.pack("<Q", length)
    return header + struct.pack("<I", masked_crc32c(header))


def test_tensorboard_huge_claimed_length_is_a_torn_tail_read_once(tmp_path, monkeypatch):
    """A valid header claiming 2^40 bytes: the records before it are kept, the rest of the file
    is not held (it used to be re-joined with every chunk to the end: quadratic, and the whole
    file in memory)."""
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 2**16)
    monkeypatch.setattr(tensorboard, "LONG_RECORD_BYTES", 2**16)
    good = b"".join(_scalar_event(s, "loss", 1.0 / s) for s in range(1, 101))
    filler = good * 600  # about 4 MB after the claim: 64 chunks
    (tmp_path / "events.out.tfevents.1.host").write_bytes(VERSION + good + _claim(2**40) + filler)
    scalars, peak = peak_bytes(read_tensorboard, tmp_path)
    assert scalars.long_frame()["step"].to_list() == list(range(1, 101))
    assert scalars.issues.torn_tail == [0]
    assert peak < 1_500_000, peak  # a few chunks, not the 4 MB behind the claim


def test_tensorboard_record_longer_than_a_chunk_is_passed_over(tmp_path, monkeypatch):
    """A real record larger than a chunk (an image, a graph) inside the file: skipped without
    being held, and the records after it are read."""
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 2**16)
    monkeypatch.setattr(tensorboard, "LONG_RECORD_BYTES", 2**16)
    big = (
        b"\x09"
        + struct.pack("<d", 1.7e9)
        + b"\x10\x05"
        + b"\x22"
        + b"\x80\x80\x80\x02"
        + bytes(2**22)
    )
    big_record = _claim(len(big)) + big + struct.pack("<I", 0)
    before = b"".join(_scalar_event(s, "loss", 1.0 / s) for s in range(1, 51))
    after = b"".join(_scalar_event(s, "loss", 1.0 / s) for s in range(51, 101))
    (tmp_path / "events.out.tfevents.1.host").write_bytes(VERSION + before + big_record + after)
    scalars, peak = peak_bytes(read_tensorboard, tmp_path)
    assert scalars.long_frame()["step"].to_list() == list(range(1, 101))
    assert scalars.issues.torn_tail == []
    assert scalars.issues.malformed == 0
    assert peak < 1_500_000, peak


# -- W&B: streamed by blocks ------------------------------------------------------------------


def _varint(n: int) -> bytes:
    from dflash_diag.read.formats.protobuf import encode_varint

    return encode_varint(n)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _history(step: int) -> bytes:
    row = {"train/loss": 3 - step / 1000, "train/acc": step / 2000, "_step": step}
    items = b"".join(
        _field(1, _field(1, k.encode()) + _field(16, json.dumps(v).encode()))
        for k, v in row.items()
    )
    return _varint(1 << 3) + _varint(step) + _field(2, items)


def _wandb_file(path, middle: bytes) -> None:
    """50 history rows, ``middle`` (whole blocks), 50 more rows."""
    data = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    data += _blocks([_history(s) for s in range(1, 51)], len(data))
    data += b"\x00" * (-len(data) % 32768) + middle
    data += _blocks([_history(s) for s in range(51, 101)], len(data))
    path.write_bytes(bytes(data))


def test_wandb_file_is_streamed_not_held(tmp_path):
    from dflash_diag.read.formats.wandb_offline import read_wandb

    path = tmp_path / "run-x.wandb"
    _wandb_file(path, bytes(64 * 2**20))  # zero-filled blocks
    scalars, peak = peak_bytes(read_wandb, path)
    steps = scalars.frame.filter(pl.col("key") == "train/loss")["step"].to_list()
    assert steps == list(range(1, 101))
    assert scalars.issues.malformed == 0
    assert peak < 20 * 2**20, peak  # one 16 MiB chunk, not the 64 MiB file


def test_wandb_overlong_record_is_dropped_and_counted(tmp_path, monkeypatch):
    from dflash_diag.read.formats import wandb_offline

    monkeypatch.setattr(wandb_offline, "MAX_RECORD_BYTES", 2**20)
    monkeypatch.setattr(wandb_offline, "CHUNK_BLOCKS", 8, raising=False)
    path = tmp_path / "run-x.wandb"
    blob = (
        _varint(1 << 3)
        + _varint(7)
        + _field(2, _field(1, _field(1, b"x") + _field(16, bytes(4 * 2**20))))
    )
    _wandb_file(path, _blocks([blob], 0) + b"\x00" * (-len(_blocks([blob], 0)) % 32768))
    scalars, peak = peak_bytes(wandb_offline.read_wandb, path)
    steps = scalars.frame.filter(pl.col("key") == "train/loss")["step"].to_list()
    assert steps == list(range(1, 101))  # the rows after the dropped record are read
    assert scalars.issues.malformed == 1
    assert peak < 3 * 2**20, peak  # the 4 MiB record was never joined


# -- MLflow: metric files streamed, parsed by polars ------------------------------------------


def _mlflow_run(root, lines: str):
    run = root / "mlruns" / "0" / "r1"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("start_time: 5\nlifecycle_stage: active\n")
    (run / "metrics" / "loss").write_text(lines)
    return root / "mlruns"


def test_mlflow_metric_file_is_streamed(tmp_path, monkeypatch):
    """No Python object per line: 200k lines read in 64 KiB chunks stay far below the
    file's Python cost (the old reader's lists of ints, floats and line strings)."""
    from dflash_diag.read.formats import mlflow_store

    monkeypatch.setattr(mlflow_store, "CHUNK_BYTES", 2**16, raising=False)
    text = "".join(f"{1700000000000 + s} {3 - s * 1e-6:.6f} {s}\n" for s in range(200_000))
    scalars, peak = peak_bytes(mlflow_store.read_file_store, _mlflow_run(tmp_path, text))
    frame = scalars.long_frame()
    assert frame.height == 200_000
    assert scalars.issues.lines == 200_000
    assert frame["step"].to_list()[-3:] == [199_997, 199_998, 199_999]
    assert peak < 2 * 2**20, peak


def test_mlflow_metric_lines_lenient_and_strict_parses_agree(tmp_path):
    """Tabs, several spaces, CRLF, a missing step, junk: the chunk goes to the lenient parse,
    which reads what the old line-by-line reader read."""
    from dflash_diag.read.formats.mlflow_store import read_file_store

    text = (
        "1000 0.5 1\n1001\t0.25\t2\n\n1002  0.125   3\r\n1003 0.0625\n"
        "garbage\n1004 abc 5\n1005 0.5 x\n1006 nan 7\n"
    )
    scalars = read_file_store(_mlflow_run(tmp_path, text))
    frame = scalars.frame
    assert frame["step"].to_list() == [1, 2, 3, 0, 7]  # 1003 has no step: 0
    assert scalars.issues.lines == 8
    assert scalars.issues.malformed == 3


# -- Lightning CSV: a very wide header ----------------------------------------------------------


def test_csv_wide_and_narrow_readers_agree(tmp_path, monkeypatch):
    """The row reader of a wide file gives what polars' reader gives on the same file."""
    from dflash_diag.read.formats import csv_metrics

    text = (
        "\ufeffstep,loss,acc,val_loss,note\n1,3.0,0.1,,x\n2, 2.5 ,nan,,\n\n3,,,2.9,\n"
        "x,1.0,0.5,,\n4,inf,0.2,2.8,y,extra\n5,2.0\n"
    )
    path = tmp_path / "metrics.csv"
    path.write_text(text)
    narrow = csv_metrics.read_metrics_csv(path)
    monkeypatch.setattr(csv_metrics, "WIDE_COLUMNS", 2)
    wide = csv_metrics.read_metrics_csv(path)
    assert wide.frame.sort("row", "key").equals(narrow.frame.sort("row", "key"), null_equal=True)
    assert wide.issues.lines == narrow.issues.lines


def test_csv_with_100k_columns_reads_in_bounded_memory(tmp_path):
    """A 5.8 MB metrics.csv naming 100k columns cost over 1 GB in polars' reader (a buffer per
    column) and 12 s; the row reader holds a row. Peak RSS of a fresh process."""
    import subprocess
    import sys

    names = ["step", "loss", "acc"] + [f"m{i:06d}" for i in range(100_000)]
    rows = [f"{s},{3 - s / 100},{s / 200}" + "," * 100_000 for s in range(1, 51)]
    path = tmp_path / "metrics.csv"
    path.write_text(",".join(names) + "\n" + "\n".join(rows) + "\n")
    # VmHWM, not ru_maxrss: the latter keeps the forking pytest process's peak across exec
    code = (
        "import sys\n"
        "from dflash_diag.read.formats.csv_metrics import read_metrics_csv\n"
        "s = read_metrics_csv(sys.argv[1])\n"
        "assert s.frame.height == 100, s.frame\n"
        "hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "print(int(hwm.split()[1]) // 1024)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) < 250, out.stdout  # MiB; about 60 now, over 1,000 before


# -- acc_pos lists of a million elements --------------------------------------------------------


def test_list_fields_are_cut_to_the_bound(tmp_path):
    """A list of 10^6 elements is kept as its first MAX_LIST_ELEMENTS (a 5 MB log with one
    such list cost 523 MiB), by polars' parse and by the line-by-line one (a bad line in the
    same piece sends it there); the other records are untouched."""
    from dflash_diag.read.jsonl import load_log
    from dflash_diag.read.records import MAX_LIST_ELEMENTS

    huge = "[" + ",".join(["0.5"] * 1_000_000) + "]"
    lines = [json.dumps({"step": s, "loss": 1.0, "acc_pos": [0.9, 0.8]}) for s in range(1, 6)]
    lines.append(f'{{"step": 6, "loss": 1.0, "acc_pos": {huge}, "walk_hist": {huge}}}')
    for bad in ("", "{not json\n"):
        path = tmp_path / "train.jsonl"
        path.write_text("\n".join(lines) + "\n" + bad)
        log = load_log(path, lists=True)
        lengths = log.metrics["acc_pos"].list.len().to_list()
        assert lengths == [2] * 5 + [MAX_LIST_ELEMENTS], bad
        if "walk_hist" in log.metrics.columns:
            assert log.metrics["walk_hist"].list.len().max() <= MAX_LIST_ELEMENTS


def test_numbered_position_keys_are_cut_to_the_bound():
    from dflash_diag.read.formats.canonical import RowCollector, Scalars, to_parsed_log
    from dflash_diag.read.presets import get_preset
    from dflash_diag.read.records import MAX_LIST_ELEMENTS

    collector = RowCollector()
    for step in range(1, 4):
        row = {"train/loss": 1.0, "train/lr": 1e-4}
        row.update({f"train/acc_{k}": 0.5 for k in range(MAX_LIST_ELEMENTS + 50)})
        collector.add(row, step=step)
    log = to_parsed_log(
        Scalars(frame=collector.frame(), format="test"), preset=get_preset("specforge-eagle3")
    ).log
    assert log.metrics["acc_pos"].list.len().to_list() == [MAX_LIST_ELEMENTS] * 3


# -- trainer_state.json: log_history entry by entry -----------------------------------------------


def test_trainer_state_is_read_entry_by_entry(tmp_path, monkeypatch):
    """A large state's log_history is decoded one entry at a time and its values packed into
    polars pieces (json.load held every entry as a dict, and the collector every value as
    Python objects: a 300 MB state cost 1.2-3 GB). Small chunks and pieces, so that the bound
    is far below the file's objects."""
    from dflash_diag.read.formats import trainer_state
    from dflash_diag.read.formats.canonical import RowCollector

    if hasattr(trainer_state, "_Scanner"):
        monkeypatch.setattr(trainer_state._Scanner, "CHUNK", 2**16)
    monkeypatch.setattr(RowCollector, "PIECE_VALUES", 4096, raising=False)
    entry = '{{"step": {s}, "loss": {l:.6f}, "learning_rate": 0.0001, "grad_norm": 1.25}}'
    history = ",".join(entry.format(s=s, l=3 - s * 1e-6) for s in range(1, 20_001))
    path = tmp_path / "trainer_state.json"
    path.write_text(
        '{"best_metric": null, "global_step": 20000, "log_history": ['
        + history
        + '], "max_steps": 20000, "train_batch_size": 8}'
    )
    scalars, peak = peak_bytes(trainer_state.read_trainer_state, path)
    frame = scalars.long_frame()
    assert frame.height == 60_000
    assert scalars.issues.lines == 20_000
    assert scalars.meta["max_steps"] == 20_000  # a key after log_history
    assert frame["step"].to_list()[-1] == 20_000
    assert peak < 4 * 2**20, peak  # the file is 1.4 MB; its objects were over 12 MB


@pytest.mark.parametrize(
    "text",
    [
        '{"log_history": [{"step": 1, "loss": 2}], "global_step": 1} x',
        '{"log_history": [{"step": 1, "loss": 2},]}',
        '{"log_history": [{"step": 1, "loss": 2}',
        '{"log_history": {"step": 1}}',
        '[{"step": 1}]',
        '{"log_history": [' + "[" * 100_000 + "]}",
    ],
)
def test_trainer_state_scanner_refuses_what_json_load_refuses(tmp_path, text):
    from dflash_diag.errors import DiagError
    from dflash_diag.read.formats.trainer_state import read_trainer_state

    path = tmp_path / "trainer_state.json"
    path.write_text(text)
    with pytest.raises(DiagError) as exc:
        read_trainer_state(path)
    assert "\n" not in str(exc.value)


def test_trainer_state_scanner_values_across_chunks(tmp_path, monkeypatch):
    """Numbers, strings and entries cut by the scanner's chunk end are read whole."""
    from dflash_diag.read.formats import trainer_state

    monkeypatch.setattr(trainer_state._Scanner, "CHUNK", 7, raising=False)
    history = [{"step": s, "loss": 1.0 / s, "note": "é" * s} for s in range(1, 40)]
    path = tmp_path / "trainer_state.json"
    path.write_text(
        json.dumps(
            {"global_step": 39, "log_history": history, "max_steps": 1234567}, ensure_ascii=False
        )
    )
    scalars = trainer_state.read_trainer_state(path)
    assert scalars.frame.filter(pl.col("key") == "loss")["value"].to_list() == [
        1.0 / s for s in range(1, 40)
    ]
    assert scalars.meta["max_steps"] == 1234567


def test_tensorboard_oversize_record_past_the_first_chunk_and_one_torn_at_the_end(
    tmp_path, monkeypatch
):
    """The skip seeks to the oversize record's end in the FILE (the offset of a record after
    the first chunk, not within its chunk), and a record whose framing (16 bytes) would end past
    the file is a torn tail, not a record passed over (audit survivors 1 and 2)."""
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 2**16)
    monkeypatch.setattr(tensorboard, "LONG_RECORD_BYTES", 2**16)
    big = b"\x09" + struct.pack("<d", 1.7e9) + b"\x22" + b"\x80\x80\x04" + bytes(2**16)
    before = b"".join(_scalar_event(s, "loss", 1.0 / s) for s in range(1, 4001))  # ~3 chunks
    after = b"".join(_scalar_event(s, "loss", 1.0 / s) for s in range(4001, 4101))
    head = VERSION + before + _claim(len(big)) + big + struct.pack("<I", 0) + after
    (tmp_path / "events.out.tfevents.1.host").write_bytes(head)
    scalars = read_tensorboard(tmp_path)
    assert scalars.long_frame()["step"].to_list() == list(range(1, 4101))
    assert scalars.issues.torn_tail == []
    # a claim that the file's bytes cover but its data CRC (4) and header (12) do not
    rest = 2**17
    torn = head + _claim(rest + 2) + bytes(rest)
    (tmp_path / "events.out.tfevents.1.host").write_bytes(torn)
    scalars = read_tensorboard(tmp_path)
    assert scalars.long_frame()["step"].to_list() == list(range(1, 4101))
    assert scalars.issues.torn_tail == [0]


def test_trainer_state_scanner_refuses_a_stray_byte_after_the_document(tmp_path):
    """Bytes after the closing brace, even a lone UTF-8 lead byte, are refused as json.load
    refuses them (the scanner's decoder is told where the input ends)."""
    from dflash_diag.errors import DiagError
    from dflash_diag.read.formats.trainer_state import read_trainer_state

    path = tmp_path / "trainer_state.json"
    path.write_bytes(b'{"global_step": 1, "log_history": [{"step": 1, "loss": 2}]}\xc3')
    with pytest.raises(DiagError, match="not valid JSON"):
        read_trainer_state(path)
