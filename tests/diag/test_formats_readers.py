"""Each format reader on its fixture (written by the real writer where it installs) and on
malformed input (one-line DiagError, never a traceback)."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib
from pathlib import Path

import polars as pl
import pytest

from dflash_diag.errors import DiagError
from dflash_diag.read.formats import detect, tensorboard
from dflash_diag.read.formats.console import read_console
from dflash_diag.read.formats.csv_metrics import read_metrics_csv
from dflash_diag.read.formats.foreign_jsonl import read_foreign_jsonl
from dflash_diag.read.formats.mlflow_store import read_file_store, read_sqlite_store
from dflash_diag.read.formats.tensorboard import masked_crc32c, read_tensorboard
from dflash_diag.read.formats.trainer_state import read_trainer_state
from dflash_diag.read.formats.wandb_offline import read_wandb

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------------
# TensorBoard


def _varint(n: int) -> bytes:
    from dflash_diag.read.formats.protobuf import encode_varint

    return encode_varint(n)


def _framed(event: bytes) -> bytes:
    header = struct.pack("<Q", len(event))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + event
        + struct.pack("<I", masked_crc32c(event))
    )


def _scalar_event(step: int, tag: str, value: float, wall: float = 1.7e9) -> bytes:
    """An Event as SummaryWriter.add_scalar writes it (simple_value)."""
    raw = tag.encode()
    item = b"\x0a" + _varint(len(raw)) + raw + b"\x15" + struct.pack("<f", value)
    summary = b"\x0a" + _varint(len(item)) + item
    return _framed(
        b"\x09"
        + struct.pack("<d", wall + step)
        + b"\x10"
        + _varint(step)
        + b"\x2a"
        + _varint(len(summary))
        + summary
    )


def _tensor_event(step: int, tag: str, value: float) -> bytes:
    """An Event as TF2 / tensorboard's own writers write a scalar (a DT_FLOAT TensorProto)."""
    raw = tag.encode()
    tensor = b"\x08\x01" + b"\x12\x00" + b"\x2a\x04" + struct.pack("<f", value)
    item = b"\x0a" + _varint(len(raw)) + raw + b"\x42" + _varint(len(tensor)) + tensor
    summary = b"\x0a" + _varint(len(item)) + item
    return _framed(b"\x10" + _varint(step) + b"\x2a" + _varint(len(summary)) + summary)


VERSION = _framed(b"\x09" + struct.pack("<d", 1.7e9) + b"\x1a\x0dbrain.Event:2")


def test_tensorboard_fixture_written_by_summarywriter():
    frame = read_tensorboard(FIXTURES / "specforge_dflash" / "runs").long_frame()
    keys = set(frame["key"].unique())
    assert {"train/loss", "train/accuracy", "train/lr", "eval/loss", "eval/accuracy"} <= keys
    loss = frame.filter(pl.col("key") == "train/loss")
    assert loss["step"].to_list() == list(range(4, 321, 4))


def test_tensorboard_against_tensorboards_own_reader(tmp_path):
    """When tensorboard installs, a run written by SummaryWriter reads the same as its reader."""
    pytest.importorskip("tensorboard")
    torch_tb = pytest.importorskip("torch.utils.tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    writer = torch_tb.SummaryWriter(log_dir=str(tmp_path))
    for step in range(300):
        writer.add_scalar("train/loss", 1.0 / (step + 1), step)
        writer.add_scalar("train/accuracy", step / 300, step)
        if step % 50 == 0:
            writer.add_scalar("eval/accuracy", 0.5, step)
    writer.close()
    ours = read_tensorboard(tmp_path).long_frame()
    accumulator = EventAccumulator(str(tmp_path))
    accumulator.Reload()
    for tag in accumulator.Tags()["scalars"]:
        theirs = [(e.step, e.value) for e in accumulator.Scalars(tag)]
        mine = ours.filter(pl.col("key") == tag).select("step", "value").rows()
        assert [s for s, _ in mine] == [s for s, _ in theirs]
        assert [v for _, v in mine] == pytest.approx([v for _, v in theirs])


def test_tensorboard_fast_path_equals_record_by_record(tmp_path, monkeypatch):
    events = [VERSION]
    for step in range(1, 400):  # varint length changes at 128: two fast runs and a break
        events += [
            _scalar_event(step, "train/loss", 1.0 / step),
            _scalar_event(step, "train/acc_0", step / 400),
            _scalar_event(step, "train/acc_1", step / 800),
        ]
        if step % 37 == 0:
            events.append(_scalar_event(step, "eval/accuracy", 0.25))
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"".join(events))
    from dflash_diag.read.formats.canonical import to_parsed_log

    fast = read_tensorboard(tmp_path)
    assert fast.wide  # the fast path did decode runs
    fast_log = to_parsed_log(fast).log
    monkeypatch.setattr(tensorboard, "_fast_run", lambda *args, **kwargs: (-1, 1, False))
    slow = read_tensorboard(tmp_path)
    assert fast.long_frame().drop("time").equals(slow.long_frame().drop("time"))
    assert fast_log.metrics.equals(to_parsed_log(slow).log.metrics)
    assert fast.long_frame().height == 399 * 3 + 10


def test_tensorboard_tensor_scalars_and_torn_tail(tmp_path):
    data = VERSION + _tensor_event(5, "loss", 0.5) + _tensor_event(6, "loss", 0.25)
    torn = _scalar_event(7, "loss", 0.125)
    (tmp_path / "events.out.tfevents.2.host").write_bytes(data + torn[:-6])
    scalars = read_tensorboard(tmp_path)
    assert scalars.long_frame().select("step", "value").rows() == [(5, 0.5), (6, 0.25)]
    assert scalars.issues.torn_tail == [0]


def test_tensorboard_corrupt_length_stops_and_counts(tmp_path):
    good = _scalar_event(1, "loss", 1.0)
    bad = bytearray(_scalar_event(2, "loss", 2.0))
    bad[0] ^= 0x40  # the length no longer matches its CRC
    (tmp_path / "events.out.tfevents.3.host").write_bytes(VERSION + good + bytes(bad) + good)
    scalars = read_tensorboard(tmp_path)
    assert scalars.long_frame()["value"].to_list() == [1.0]
    assert scalars.issues.malformed == 1


def test_tensorboard_not_an_event_file(tmp_path):
    path = tmp_path / "events.out.tfevents.4.host"
    path.write_bytes(b"hello, this is not a TFRecord file at all\n")
    with pytest.raises(DiagError) as exc:
        read_tensorboard(path)
    assert "not a TensorBoard event file" in one_line(exc)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DiagError) as exc:
        read_tensorboard(tmp_path / "empty")
    assert "no TensorBoard event files" in one_line(exc)


# --------------------------------------------------------------------------------------------
# HF trainer_state.json


def test_trainer_state_latest_checkpoint_wins():
    scalars = read_trainer_state(FIXTURES / "hf_trainer")
    assert any("checkpoint-260" in note for note in scalars.notes)
    frame = scalars.long_frame()
    assert frame["step"].max() == 260
    keys = set(frame["key"].unique())
    assert {"loss", "learning_rate", "grad_norm", "mean_token_accuracy", "eval_loss"} <= keys


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b'{"global_step": 3}', "no log_history"),
    ],
)
def test_trainer_state_malformed(tmp_path, content, message):
    path = tmp_path / "trainer_state.json"
    path.write_bytes(content)
    with pytest.raises(DiagError) as exc:
        read_trainer_state(path)
    assert message in one_line(exc)


# --------------------------------------------------------------------------------------------
# CSV, MLflow, W&B, console, JSONL rows


def test_lightning_csv_newest_version_and_sparse_lines():
    scalars = read_metrics_csv(FIXTURES / "lightning")
    assert "version_1" in scalars.notes[0]
    val = scalars.frame.filter(pl.col("key") == "val_loss")
    assert val["step"].to_list() == [80, 160, 240, 320]


def test_csv_without_step_column(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DiagError) as exc:
        read_metrics_csv(path)
    assert "no step column" in one_line(exc)


def test_mlflow_file_store_reads_latest_run_with_nested_keys(tmp_path):
    scalars = read_file_store(FIXTURES / "specforge_eagle3" / "mlruns")
    assert "train/acc_6" in set(scalars.long_frame()["key"].unique())
    assert scalars.meta["ttt_length"] == "7"
    # a malformed line is counted, not fatal
    run = tmp_path / "0" / "r1"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("start_time: 5\nlifecycle_stage: active\n")
    (run / "metrics" / "loss").write_text("1000 0.5 1\ngarbage\n2000 0.25 2\n")
    scalars = read_file_store(tmp_path)
    assert scalars.long_frame()["value"].to_list() == [0.5, 0.25]
    assert scalars.issues.malformed == 1


def test_mlflow_sqlite_latest_active_run_and_nan(tmp_path):
    scalars = read_sqlite_store(FIXTURES / "specforge_dflash_mlflow" / "mlflow.db")
    assert "dflash-1" in scalars.notes[0]
    assert scalars.frame["step"].min() == 4  # the older run's step 1 is not mixed in
    assert scalars.meta["block_size"] == "16"
    other = tmp_path / "other.db"
    sqlite3.connect(other).executescript("CREATE TABLE t (x INT);").close()
    with pytest.raises(DiagError) as exc:
        read_sqlite_store(other)
    assert "not an MLflow store" in one_line(exc)


def test_wandb_offline_records_across_blocks():
    scalars = read_wandb(FIXTURES / "speculators" / "wandb")
    frame = scalars.frame
    assert frame["row"].n_unique() == 80
    assert scalars.meta["block_size"] == 8
    assert frame.filter(pl.col("key") == "train/full_acc")["step"].to_list() == list(
        range(0, 320, 4)
    )
    # the fixture is larger than one 32 KiB block: records were cut and joined again
    size = next((FIXTURES / "speculators" / "wandb").rglob("*.wandb")).stat().st_size
    assert size > 32768
    assert scalars.issues.malformed == 0


def test_wandb_bad_checksum_stops_the_read(tmp_path):
    data = bytearray(next((FIXTURES / "speculators" / "wandb").rglob("*.wandb")).read_bytes())
    data[7 + 7 + 40] ^= 0xFF  # inside the first record's payload
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))
    scalars = read_wandb(path)
    assert scalars.issues.malformed == 1
    assert scalars.frame.height == 0
    path.write_bytes(b":W&Bxx" + bytes(20))
    with pytest.raises(DiagError) as exc:
        read_wandb(path)
    assert "not a W&B datastore" in one_line(exc)


def test_console_lines(tmp_path):
    path = tmp_path / "train.log"
    path.write_text(
        "loading...\n"
        "Train - Step 10 [10/100?], Loss: 2.5000, Acc: 0.1000\n"
        "\x1b[32mEval - Step 10 [10/100?], Loss: 2.6, Acc: 0.09\x1b[0m\n"
        "step 20: {'train/loss': 2.0, 'train/accuracy': 0.2, 'note': 'x'}\n"
        "epoch 1 step=30 loss=1.5 acc=0.3\r"
        "step=40 loss=nan\n"
        "[2026] Step 50 something without numbers\n"
    )
    rows = read_console(path).frame.group_by("step").agg(pl.col("key").sort()).sort("step").rows()
    assert rows == [
        (10, ["eval/acc", "eval/loss", "train/acc", "train/loss"]),
        (20, ["train/accuracy", "train/loss"]),
        (30, ["acc", "loss"]),
        (40, ["loss"]),
    ]


def test_foreign_jsonl_flatten_nested_and_count_bad_lines(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"step": 1, "train": {"full_acc": 0.5, "pos": {"k": 1}}}\n'
        "not json\n"
        '{"step": 2, "train.full_acc": 0.6}\n'
        '{"step": 3, "tra'
    )
    scalars = read_foreign_jsonl(path)
    assert scalars.frame.select("step", "key").rows() == [
        (1, "step"),
        (1, "train/full_acc"),
        (1, "train/pos/k"),
        (2, "step"),
        (2, "train.full_acc"),
    ]
    assert scalars.issues.malformed == 1
    assert scalars.issues.torn_tail == [0]
    with pytest.raises(DiagError) as exc:
        read_foreign_jsonl(path, strict=True)
    assert "malformed line 2" in one_line(exc)


# --------------------------------------------------------------------------------------------
# detection


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("specforge_dflash/runs", "tensorboard"),
        ("specforge_dflash", "tensorboard"),
        ("hf_trainer", "hf-trainer-state"),
        ("hf_trainer/checkpoint-260/trainer_state.json", "hf-trainer-state"),
        ("specforge_eagle3/mlruns", "mlflow"),
        ("specforge_dflash_mlflow/mlflow.db", "mlflow-sqlite"),
        ("specforge_dflash_mlflow", "mlflow-sqlite"),
        ("speculators/wandb", "wandb"),
        ("lightning", "csv"),
        ("specforge_console/train.log", "console"),
        ("speculators_jsonl/metrics.jsonl", "jsonl"),
    ],
)
def test_detect_by_content(path, expected):
    assert detect.detect_format(FIXTURES / path) == expected


def test_detection_ignores_the_extension(tmp_path):
    copy = tmp_path / "metrics.txt"
    copy.write_bytes(next((FIXTURES / "torchspec").rglob("events*")).read_bytes())
    assert detect.detect_format(copy) == "tensorboard"
    state = tmp_path / "state.log"
    state.write_text(json.dumps({"log_history": [{"step": 1, "loss": 2.0}], "global_step": 1}))
    assert detect.detect_format(state) == "hf-trainer-state"


def test_unknown_content_and_format(tmp_path):
    path = tmp_path / "blob.bin"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(DiagError) as exc:
        detect.detect_format(path)
    assert "supported: jsonl, tensorboard" in one_line(exc)
    assert "--input-format" in str(exc.value)
    with pytest.raises(DiagError) as exc:
        detect.check_format("parquet")
    assert "unknown input format 'parquet'" in one_line(exc)


def test_reader_errors_stay_one_line(tmp_path):
    """Garbage read as each format is a DiagError or an empty read, never another exception."""
    path = tmp_path / "garbage"
    path.write_bytes(zlib.compress(b"x" * 1000) * 3)
    for name in detect.FORMATS:
        try:
            detect.read_scalars(path, name)
        except DiagError as exc:
            message = str(exc)
        else:
            continue
        assert "\n" not in message


@pytest.mark.parametrize("name", sorted(detect.FORMATS))
def test_random_bytes_never_escape_as_another_exception(tmp_path, name):
    """Seeded garbage of many shapes, read as each format: a result or a one-line DiagError."""
    import random

    rng = random.Random(sum(map(ord, name)))
    fixture_bytes = [
        p.read_bytes()
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.suffix != ".py" and p.stat().st_size < 200_000
    ]
    for trial in range(40):
        if trial % 2 and fixture_bytes:
            data = bytearray(rng.choice(fixture_bytes))  # a real file, damaged
            for _ in range(rng.randint(1, 20)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data[: rng.randint(0, len(data))])
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000)))
        path = tmp_path / f"input{trial}"
        path.write_bytes(data)
        try:
            detect.read_scalars(path, name)
        except DiagError as exc:
            message = str(exc)
        else:
            continue
        assert "\n" not in message


def test_tensorboard_resumed_run_in_a_second_file_is_a_restart(tmp_path):
    """A resumed run writes a new event file whose steps go back: one restart, orphans purged."""
    from dflash_diag.analysis.restarts import resolve_restarts
    from dflash_diag.read.formats.canonical import to_parsed_log

    def run(steps) -> bytes:
        return VERSION + b"".join(
            _scalar_event(s, "train/loss", 1.0 / s) + _scalar_event(s, "train/accuracy", s / 1000)
            for s in steps
        )

    (tmp_path / "events.out.tfevents.100.host").write_bytes(run(range(1, 301)))
    (tmp_path / "events.out.tfevents.200.host").write_bytes(run(range(201, 401)))
    scalars = read_tensorboard(tmp_path)
    assert scalars.notes == ["2 event files read in order"]
    log = to_parsed_log(scalars).log
    frame, restarts = resolve_restarts(log.metrics)
    assert [(r.step, r.previous_step) for r in restarts] == [(201, 300)]
    assert frame["step"].to_list() == list(range(1, 401))


def test_varint_encoding_round_trips_and_matches_the_wire_format():
    from dflash_diag.read.formats.protobuf import encode_varint, read_varint

    assert encode_varint(0) == b"\x00"
    assert encode_varint(1) == b"\x01"
    assert encode_varint(300) == b"\xac\x02"  # the protobuf documentation's example
    for n in (127, 128, 2**31, 2**63 - 1):
        raw = encode_varint(n)
        assert read_varint(raw, 0, len(raw)) == (n, len(raw))


_EDGE_HISTORIES = {
    "plain": [{"step": s, "loss": 3 - s / 10, "grad_norm": s} for s in range(1, 6)]
    + [{"step": 5, "eval_loss": 2.5, "epoch": 1}, {"step": 5, "loss": 2.4}],
    "summary": [{"step": 1, "loss": 3.0}, {"step": 2, "train_runtime": 9.5, "train_loss": 2.9}],
    "float steps": [{"step": 1.5, "loss": 3.0}, {"step": -1.7, "loss": 2.0}, {"step": 2.0}],
    "huge steps": [{"step": 2**53, "loss": 1.0}, {"step": 2**53 - 1, "loss": 2.0}],
    "no numbers": [{"step": 1, "loss": 3.0}, {"step": 2}, {"note": None}, {"step": 3, "loss": 1}],
    "not dicts": [{"step": 1, "loss": 3.0}, 7, "x", [1], {"step": 2, "loss": 2.0}],
    "null steps": [{"step": None, "loss": 3.0}, {"loss": 2.0}, {"step": 3, "loss": 1.0}],
    "bools": [{"step": 1, "loss": 3.0, "flag": True}, {"step": True, "loss": 2.0}],
    "bool among numbers": [{"step": 1, "loss": 3.0}, {"step": 2, "loss": False}, {"step": 3}],
    # a bool in a later piece, under keys declared Float64 (polars would read it as 1.0)
    "true among numbers": [{"step": 1, "loss": 3.0}, {"step": 2, "loss": True}, {"step": 3}],
    "strings": [{"step": 1, "loss": "3.5"}, {"step": "2", "loss": 2.0, "name": "x"}],
    "nested": [{"step": 1, "loss": 3.0, "train": {"acc": 0.5}}, {"step": 2, "loss": [1, 2]}],
    "dotted": [{"step": 1, "train.acc": 0.1, "train/acc": 0.2, "loss": 1.0}],
    "fixed names": [{"step": 1, "loss": 3.0, "time": 5.0, "row": 1}],
    "rewind": [{"step": s % 4, "loss": 1.0 / (s + 1)} for s in range(10)],
    # the collector's entries between polars' pieces, and a restart after them: rows in order
    "rewind past dicts": [
        {"step": 1, "loss": 3.0},
        {"step": 2, "loss": 2.0},
        {"step": 3, "train_runtime": 9.5, "train_loss": 2.5},
        {"step": 1, "loss": 1.5},
        {"step": 2, "loss": 1.0},
        {"step": 3, "loss": 0.5},
    ],
    "big int": [{"step": 1, "loss": 10**400}, {"step": 2, "loss": 2**70}],
    "no step": [{"epoch": 1.0, "loss": 3.0}, {"epoch": 2.0, "loss": 2.0}],
    # polars' JSON reader reads plain pieces with the keys of the pieces before declared
    "later keys": [{"step": 1, "loss": 3.0}, {"step": 2, "eval_loss": 2.5}, {"step": 3}],
    "null key": [{"step": 1, "loss": 3.0, "grad_norm": None}, {"step": 2, "grad_norm": None}],
    "long ints": [{"step": 1, "loss": 2**64}, {"step": 2, "loss": 10**18, "flos": 10**22}],
    "float step": [{"step": 1.5, "loss": 3.0}, {"step": 2, "loss": 2.0}],
    # names holding the bytes the fast path counts, and the words it once searched for
    "odd names": [
        {"step": 1, "a:b": 1.0, "c,d": 2.0, "e{": 3.0, "true": 1.0, "null": 2.0, "nul": 4.0},
        {"step": 2, "train_runtime_s": 1.5, "false": 0.5, "loss": None},
    ],
    "empty entries": [{"step": 1, "loss": 3.0}, {}, {"step": 2, "loss": 2.0}],
    "non-finite": [
        {"step": 1, "loss": float("nan")},
        {"step": 2, "loss": float("inf")},
        {"step": 3, "loss": -float("inf")},
    ],
}


@pytest.mark.parametrize(("chunk", "batch"), [(64, 3), (64, 2**15), (2**16, 2**15)])
@pytest.mark.parametrize("case", sorted(_EDGE_HISTORIES))
def test_trainer_state_pieces_read_as_the_collector_does(tmp_path, monkeypatch, case, chunk, batch):
    """The history decoded in pieces and built by polars gives the canonical log the entry by
    entry collector gives, on every kind of entry (or leaves those to the collector)."""
    import json

    from dflash_diag.read.formats import trainer_state
    from dflash_diag.read.formats.canonical import to_parsed_log

    path = tmp_path / "trainer_state.json"
    state = {"global_step": 5, "log_history": _EDGE_HISTORIES[case], "max_steps": 10}
    path.write_text(json.dumps(state, indent=2))
    # 64 characters: every entry alone; 64 KiB: the history in one piece; polars' pieces made
    # wide 3 entries at a time (batches cut between pieces and at the collector's) or at once
    monkeypatch.setattr(trainer_state._Scanner, "CHUNK", chunk)
    monkeypatch.setattr(trainer_state, "_WIDE_BATCH_ROWS", batch)

    def parsed():
        scalars = read_trainer_state(path)
        log = to_parsed_log(scalars).log
        return log.metrics, [(e.kind, e.seq, e.step, e.fields) for e in log.events], log.issues

    metrics, events, issues = parsed()

    def collector_only(pieces, issues):
        for _ in pieces:
            pass  # the pass still checks the JSON; the entries are read again one by one

    monkeypatch.setattr(trainer_state, "_wide_history", collector_only)
    want_metrics, want_events, want_issues = parsed()
    assert metrics.equals(want_metrics)
    assert events == want_events
    assert issues == want_issues


def test_trainer_state_plain_pieces_are_read_by_polars_exactly(tmp_path, monkeypatch):
    """A plain history goes through polars' JSON reader (not json.loads), and a piece whose
    text holds more than polars read (a key written twice: json.loads keeps the last value,
    polars the first) is decoded by json.loads instead."""
    from dflash_diag.read.formats import trainer_state

    entries = [f'{{"loss": {1 + 1 / s:.4f}, "step": {s}}}' for s in range(1, 200)]
    entries[150] = '{"loss": 9.0, "loss": 0.25, "step": 151}'
    path = tmp_path / "trainer_state.json"
    path.write_text('{"global_step": 199, "log_history": [\n' + ",\n".join(entries) + "]}")
    monkeypatch.setattr(trainer_state._Scanner, "CHUNK", 512)
    read = []
    fast = trainer_state._PolarsPieces.__call__

    def counted(self, text, start, end):
        frame = fast(self, text, start, end)
        read.append(frame is not None)
        return frame

    monkeypatch.setattr(trainer_state._PolarsPieces, "__call__", counted)
    wide = read_trainer_state(path).wide[0]
    assert wide.height == 199
    assert wide.filter(pl.col("step") == 151)["loss"].item() == 0.25
    assert sum(read) >= len(read) - 1  # every piece but the one with the doubled key
    assert not all(read)


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        (b'[{"step": 1, "loss": 2.5}, {"step": 2, "loss": null}]', (2, 3)),
        (b'[{"step":1,"loss":-2e-5},\n{"step":2}]', (2, 3)),
        (b'[{"step": 1, "loss": true}]', None),
        (b'[{"step": 1, "loss": "2.5"}]', None),
        (b'[{"step": 1, "loss": {"a": 1}}]', None),
        (b'[{"step": 1, "loss": [1]}]', None),
        (b'[{"step": 1, "loss": NaN}]', None),
        (b'[{"step": 1, "loss": nan}]', None),
        (b'[{"step": 1, "loss":  1}]', None),
        (b'[{"step": 1}, 7]', None),
        (b'[{"step": 1}, {}]', None),
        (b'[{"a:b": 1}]', None),
        (b'[{"a,b": 1}]', None),
        (b"[7]", None),
    ],
)
def test_trainer_state_plain_entries_are_objects_of_numbers_only(text, counts):
    """The byte-level check before polars' JSON reader: entries and non-null values of a piece
    of flat objects of numbers, None for anything else the reader might misread."""
    from dflash_diag.read.formats.trainer_state import _plain_entries

    assert _plain_entries(text) == counts


def test_mlflow_rows_skip_the_sort_only_when_in_logging_order():
    """The check that lets a metric file written in order skip the sort says "in order" only
    where the sort by (timestamp, step, key) would change nothing."""
    import random

    from dflash_diag.read.formats.mlflow_store import _in_logging_order

    rng = random.Random(3)
    said_ordered = 0
    for _ in range(400):
        rows = [
            (rng.choice([1, 2, None]), rng.choice([0, 1, None]), rng.choice(["a", "b"]))
            for _ in range(rng.randint(0, 6))
        ]
        frame = pl.DataFrame(
            rows, schema={"timestamp": pl.Int64, "step": pl.Int64, "key": pl.String}, orient="row"
        )
        ordered = frame.sort("timestamp", "step", "key", maintain_order=True)
        if frame.select(_in_logging_order()).item():
            said_ordered += 1
            assert ordered.equals(frame), rows
        elif frame.null_count().sum_horizontal().item() == 0:
            assert not ordered.equals(frame), rows
    assert said_ordered > 50


def test_a_sparse_metrics_csv_reads_as_the_whole_table_unpivoted(tmp_path):
    """The reader builds its long table a column at a time (an unpivot of every cell held 10x
    the values of a sparse Lightning file); the rows and their order are the unpivot's."""
    import random

    import polars as pl
    from polars.testing import assert_frame_equal

    from dflash_diag.read.formats.csv_metrics import read_metrics_csv

    rng = random.Random(11)
    names = ["epoch", "step", "train_loss_step", "val_loss", "lr-Adam", "odd"]
    lines = [",".join(names)]
    for step in range(0, 600, 3):
        cells = [str(step // 100), str(step)]
        for _ in names[2:]:
            pick = rng.random()
            cells.append("" if pick < 0.6 else "nan" if pick < 0.65 else f"{rng.random():.6f}")
        lines.append(",".join(cells))
    path = tmp_path / "metrics.csv"
    path.write_text("\n".join(lines) + "\n")
    table = pl.read_csv(path, infer_schema=False).with_row_index("row")
    values = [c for c in names if c != "step"]
    expected = (
        table.select(
            pl.col("row").cast(pl.Int64),
            pl.col("step").cast(pl.Float64).cast(pl.Int64),
            *(pl.col(c).cast(pl.Float64, strict=False) for c in values),
        )
        .unpivot(index=["row", "step"], on=values, variable_name="key", value_name="value")
        .filter(pl.col("value").is_not_null())
    )
    got = read_metrics_csv(path).frame.select("row", "step", "key", "value")
    assert got.height == expected.height > 100
    assert_frame_equal(got, expected, check_dtypes=False)
