"""Every reader counts what the JSONL reader counts (issue 18, reader side; issue 19, item 5).

The same 40 records, with NaN, +Inf and -Inf losses and steps outside the integer range, are
written in each format; ``converge -f json`` must give the JSONL figures: ``nonfinite`` 3 and
the NaN/Inf line in the text report, the bad steps left out (the good steps all kept, in one
segment) and counted in a note, never a TypeError.
"""

from __future__ import annotations

import json
import math
import sqlite3
import struct

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.read.formats.mlflow_store import read_sqlite_store

from .test_formats_readers import VERSION, _scalar_event
from .test_reader_bounds import _blocks, _field, _varint

runner = CliRunner()

STEPS = range(1, 41)
BAD_LOSS = {10: math.nan, 20: math.inf, 30: -math.inf}


def loss(step: int) -> float:
    return BAD_LOSS.get(step, 3 - step / 100)


def converge(path, *more):
    result = runner.invoke(app, ["converge", str(path), "-f", "json", *more])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def text_report(path):
    result = runner.invoke(app, ["converge", str(path)])
    assert result.exit_code in (0, 1), result.output
    return result.stdout


# -- writers: the 40 records, and bad steps where given --------------------------------------


def write_jsonl(folder, extra_steps=()):
    path = folder / "train.jsonl"
    lines = [json.dumps({"step": s, "loss": loss(s), "acc": s / 100}) for s in STEPS]
    lines += [json.dumps({"step": s, "loss": 1.0, "acc": 0.5}) for s in extra_steps]
    path.write_text("\n".join(lines) + "\n")
    return path


def write_tensorboard(folder, extra_steps=()):
    data = VERSION
    for s in STEPS:
        data += _scalar_event(s, "train/loss", loss(s)) + _scalar_event(s, "train/acc", s / 100)
        if s == 20:
            for bad in extra_steps:  # in the middle: a wrapped step must not purge steps 1-20
                data += _scalar_event(bad, "train/loss", 1.0)
    (folder / "events.out.tfevents.1.host").write_bytes(data)
    return folder


def _wandb_row(row: dict) -> bytes:
    items = b"".join(
        _field(1, _field(1, k.encode()) + _field(16, json.dumps(v).encode()))
        for k, v in row.items()
    )
    return _field(2, items)


def write_wandb(folder, extra_steps=()):
    rows = [{"train/loss": loss(s), "train/acc": s / 100, "_step": s} for s in STEPS]
    rows[20:20] = [{"train/loss": 1.0, "train/acc": 0.5, "_step": bad} for bad in extra_steps]
    header = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
    # json.dumps writes NaN/Infinity tokens, as W&B's own writer does for such values
    path = folder / "run-x.wandb"
    path.write_bytes(header + _blocks([_wandb_row(r) for r in rows], len(header)))
    return path


def write_mlflow_files(folder, extra_steps=()):
    run = folder / "mlruns" / "0" / "r1"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("start_time: 5\nlifecycle_stage: active\n")
    lines = [f"{1000 * s} {loss(s)} {s}" for s in STEPS]
    lines += [f"{1000 * 41 + i} 1.0 {bad}" for i, bad in enumerate(extra_steps)]
    (run / "metrics" / "loss").write_text("\n".join(lines) + "\n")
    (run / "metrics" / "acc").write_text("".join(f"{1000 * s} {s / 100} {s}\n" for s in STEPS))
    return folder / "mlruns"


def write_mlflow_sqlite(folder, extra_steps=(), value_rows=()):
    path = folder / "mlflow.db"
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE runs (run_uuid TEXT, name TEXT, start_time INT, lifecycle_stage TEXT);"
        "CREATE TABLE metrics (key TEXT, value DOUBLE, timestamp BIGINT, step BIGINT,"
        " is_nan BOOLEAN, run_uuid TEXT);"
        "INSERT INTO runs VALUES ('r1', 'run', 1, 'active');"
    )
    for s in STEPS:
        value = loss(s)
        # MLflow stores NaN as 0 with is_nan set, infinities as they are
        connection.execute(
            "INSERT INTO metrics VALUES ('loss', ?, ?, ?, ?, 'r1')",
            (0.0 if math.isnan(value) else value, 1000 * s, s, math.isnan(value)),
        )
        connection.execute(
            "INSERT INTO metrics VALUES ('acc', ?, ?, ?, 0, 'r1')", (s / 100, 1000 * s, s)
        )
    for i, bad in enumerate(extra_steps):
        connection.execute(
            "INSERT INTO metrics VALUES ('loss', 1.0, ?, ?, 0, 'r1')", (41_000 + i, bad)
        )
    for value in value_rows:
        connection.execute("INSERT INTO metrics VALUES ('loss', ?, 5500, 5, 0, 'r1')", (value,))
    connection.commit()
    connection.close()
    return path


def write_trainer_state(folder, extra_steps=()):
    history = [{"step": s, "loss": loss(s), "mean_token_accuracy": s / 100} for s in STEPS]
    history += [{"step": bad, "loss": 1.0} for bad in extra_steps]
    path = folder / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 40, "log_history": history}))
    return path


def write_csv(folder, extra_steps=()):
    lines = ["step,loss,acc"] + [f"{s},{loss(s)},{s / 100}" for s in STEPS]
    lines += [f"{bad},1.0,0.5" for bad in extra_steps]
    path = folder / "metrics.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


WRITERS = {
    "jsonl": write_jsonl,
    "tensorboard": write_tensorboard,
    "wandb": write_wandb,
    "mlflow": write_mlflow_files,
    "mlflow-sqlite": write_mlflow_sqlite,
    "hf-trainer-state": write_trainer_state,
    "csv": write_csv,
}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_nonfinite_values_counted_by_every_reader(tmp_path, fmt):
    path = WRITERS[fmt](tmp_path)
    report = converge(path)
    assert report["nonfinite"] == 3, fmt
    assert "3 NaN/Inf values" in text_report(path), fmt


def test_mlflow_is_nan_reads_back_as_nan(tmp_path):
    scalars = read_sqlite_store(write_mlflow_sqlite(tmp_path))
    loss_values = scalars.frame.filter(scalars.frame["key"] == "loss")
    at_10 = loss_values.filter(loss_values["step"] == 10)["value"].to_list()
    assert len(at_10) == 1
    assert math.isnan(at_10[0])


def test_mlflow_sqlite_text_value_is_left_out_and_counted(tmp_path):
    path = write_mlflow_sqlite(tmp_path, value_rows=("abc", b"\x00\x01"))
    report = converge(path)
    assert report["skipped_lines"] == 2


# steps: 2^63 (wraps to -2^63 in a TensorBoard varint), 2^62 (int64, beyond 2^53), 10^30
# (beyond int64: a JSON integer in W&B, text in an MLflow file, a REAL in SQLite)
BAD_STEPS = {
    "jsonl": (2**63, 2**62, 10**30),
    "tensorboard": (2**63, 2**62),
    "wandb": (2**63, 2**62, 10**30),
    "mlflow": (2**63, 2**62, 10**30),
    "mlflow-sqlite": (2**62, 1e30),
    "hf-trainer-state": (2**63, 2**62, 10**30),
    "csv": (2**63, 2**62, 10**30),
}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_out_of_range_steps_left_out_and_counted(tmp_path, fmt):
    bad = BAD_STEPS[fmt]
    path = WRITERS[fmt](tmp_path, extra_steps=bad)
    report = converge(path)
    assert report["windows"][0]["start"] == 1, fmt
    assert sum(w["n"] for w in report["windows"]) == 40, fmt  # every good step, once
    assert report["restarts"] == [], fmt  # 2^63 as -2^63 is no restart
    text = " ".join(text_report(path).split())
    assert f"{len(bad)} record(s) with a step out of range" in text, (fmt, text)


def test_tensorboard_step_of_2_63_alone_is_refused_with_one_line(tmp_path):
    data = VERSION + b"".join(_scalar_event(2**63 + s, "train/loss", 1.0) for s in range(3))
    (tmp_path / "events.out.tfevents.1.host").write_bytes(data)
    result = runner.invoke(app, ["converge", str(tmp_path)])
    assert result.exit_code == 2
    assert "out of range" in result.stderr.strip().splitlines()[-1]


def test_step_keys_of_a_preset_out_of_range(tmp_path):
    """A step taken from a preset's key (W&B's global_step here) is checked the same way."""
    rows = [
        {"train/loss": 3 - s / 100, "train/full_acc": s / 100, "global_step": s, "_step": s}
        for s in STEPS
    ]
    rows.append({"train/loss": 1.0, "train/full_acc": 0.5, "global_step": 1e300, "_step": 41})
    header = struct.pack("<4sHB", b":W&B", 0xBEE1, 0)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(header + _blocks([_wandb_row(r) for r in rows], len(header)))
    report = converge(path, "--preset", "speculators")
    assert sum(w["n"] for w in report["windows"]) == 40
    assert "1 record(s) with a step out of range" in " ".join(text_report(path).split())


_ = _varint  # the W&B framing helpers come from test_reader_bounds


def test_a_step_of_exactly_2_53_is_out_of_range_in_every_reader(tmp_path):
    """The bound is inclusive, as the JSONL reader's (``at least 2^53``)."""
    for fmt in ("jsonl", "wandb", "mlflow", "hf-trainer-state", "csv"):
        folder = tmp_path / fmt
        folder.mkdir()
        path = WRITERS[fmt](folder, extra_steps=(2**53,))
        text = " ".join(text_report(path).split())
        assert "1 record(s) with a step out of range" in text, fmt


def test_tensorboard_events_without_wall_time_have_no_nonfinite_values(tmp_path):
    """TF2's tensor scalars carry no wall time (the reader's time is NaN then): the format's own
    missing time is not a NaN metric value."""
    from .test_formats_readers import _tensor_event

    data = VERSION + b"".join(
        _tensor_event(s, "train/loss", 3 - s / 100) + _tensor_event(s, "train/acc", s / 100)
        for s in STEPS
    )
    (tmp_path / "events.out.tfevents.1.host").write_bytes(data)
    assert converge(tmp_path)["nonfinite"] == 0


def test_inf_in_a_numbered_position_key_is_counted(tmp_path):
    """acc_pos assembled from train/acc_0.. (SpecForge EAGLE-3): an Inf element is counted as
    the JSONL reader counts list elements."""
    data = VERSION
    for s in STEPS:
        data += _scalar_event(s, "train/lr", 1e-4) + _scalar_event(s, "train/ploss_0", 2.0)
        data += _scalar_event(s, "train/acc_0", math.inf if s == 7 else 0.5)
        data += _scalar_event(s, "train/acc_1", math.nan if s == 8 else 0.4)
    (tmp_path / "events.out.tfevents.1.host").write_bytes(data)
    from dflash_diag.read.formats.canonical import to_parsed_log
    from dflash_diag.read.formats.tensorboard import read_tensorboard
    from dflash_diag.read.presets import get_preset

    log = to_parsed_log(read_tensorboard(tmp_path), preset=get_preset("specforge-eagle3")).log
    assert log.issues.nonfinite["acc_pos"] == 2  # the Inf and the NaN element
    assert log.issues.nonfinite["acc"] == 2  # the mean accuracy built from them
