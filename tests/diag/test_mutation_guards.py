"""Guards against plausible one-line bugs that no other test noticed (issue 13, items 14-16).

Each test goes through the real command (``dflash-diag converge`` via CliRunner) on a small log
written for it, and fails on the bug named in its docstring (each was applied by hand and seen to
fail).
"""

from __future__ import annotations

import csv
import io
import json

import polars as pl
import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

runner = CliRunner()


def converge(path, *args):
    result = runner.invoke(app, ["converge", str(path), *map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def write_records(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def csv_rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_noise_aware_loss_arrow_uses_the_loss_standard_error(tmp_path):
    """Bug guarded: --noise-aware judging the loss arrow by the ACCURACY's standard error.

    Accuracy alternates 0.1/0.9 (a huge standard error, about 0.13 per window) while the loss is
    quiet (standard error about 0.0003) and falls by 0.02 between the two windows: by the loss's
    own noise that is a clear improvement; by the accuracy's it would be flat.
    """
    records = []
    for step in range(1, 21):
        base = 2.0 if step <= 10 else 1.98
        records.append(
            {
                "step": step,
                "loss": base + (0.001 if step % 2 else -0.001),
                "acc": 0.1 if step % 2 else 0.9,
            }
        )
    log = write_records(tmp_path / "noisy_acc.jsonl", records)
    rows = csv_rows(converge(log, "--window", 10, "--noise-aware", "-f", "csv"))
    assert [r["loss_trend"] for r in rows] == ["", "up"]
    assert rows[1]["trend"] == "flat"  # the accuracy's mean did not move: 0.5 both windows
    # and without --noise-aware the 1% relative loss threshold (0.02 of 2.0) keeps it flat
    rows = csv_rows(converge(log, "--window", 10, "-f", "csv"))
    assert rows[1]["loss_trend"] == "flat"


def test_loss_threshold_is_relative_to_the_previous_loss(tmp_path):
    """Bug guarded: --loss-threshold applied as an absolute change.

    10.00 -> 10.05 is a 0.5% change: flat under the default 1% (an absolute 0.01 would call it
    worse); 1.00 -> 1.05 is 5%: worse.
    """

    def trend(first, second):
        records = [
            {"step": s, "loss": first if s <= 10 else second, "acc": 0.2} for s in range(1, 21)
        ]
        log = write_records(tmp_path / f"loss_{first}_{second}.jsonl", records)
        return csv_rows(converge(log, "--window", 10, "-f", "csv"))[1]["loss_trend"]

    assert trend(10.0, 10.05) == "flat"
    assert trend(1.0, 1.05) == "down"
    assert trend(10.0, 9.8) == "up"  # 2% better


def test_eval_rerun_at_the_same_step_keeps_the_later_record(tmp_path):
    """Bug guarded: of two eval records at one step (a restart re-ran the eval), the earlier one
    is kept."""
    records = [{"step": s, "loss": 2.0, "acc": 0.2} for s in range(1, 101)]
    records.insert(50, {"event": "eval", "step": 50, "tau": 2.0})
    records.append({"event": "eval", "step": 50, "tau": 3.0})  # the re-run, later in the file
    log = write_records(tmp_path / "evals.jsonl", records)
    acceptance = json.loads(converge(log, "-f", "json"))["acceptance"]
    assert acceptance["estimator"] == "measured"
    assert acceptance["tau"] == 3.0


def test_the_step_at_warmup_steps_is_not_warmup(tmp_path):
    """Bug guarded: the step exactly at ``warmup_steps`` labelled warmup (warmup is
    ``step < warmup_steps``: the lr peaks there and decays after)."""
    header = {
        "event": "run_start",
        "schema": 1,
        "script": "sync",
        "schedule": {"kind": "cosine", "peak_lr": 1e-3, "warmup_steps": 100, "total_steps": 1000},
    }

    def phase(last_step):
        records = [header] + [
            {"step": s, "loss": 2.0, "acc": 0.2, "lr": 1e-3 * min(1, s / 100)}
            for s in range(1, last_step + 1)
        ]
        log = write_records(tmp_path / f"warmup_{last_step}.jsonl", records)
        return json.loads(converge(log, "-f", "json"))["lr"]["phase"]

    assert phase(99) == "warmup"
    assert phase(100) == "decay"


def test_two_run_window_loss_leaves_nan_records_out_of_the_weights():
    """A NaN loss is left out of the window mean, its weight too (audit survivor: the weights
    of the NaN records stayed in the denominator, pulling the mean down)."""
    from dflash_diag.compare.report import align_runs

    steps = list(range(1, 11))
    a = pl.DataFrame(
        {"step": steps, "loss": [2.0] * 4 + [float("nan")] * 2 + [2.0] * 4, "acc": [0.5] * 10}
    )
    b = pl.DataFrame({"step": steps, "loss": [3.0] * 10, "acc": [0.5] * 10})

    (window,) = align_runs(a, b, window=10).windows
    assert window.loss_a == pytest.approx(2.0)
    assert window.loss_b == pytest.approx(3.0)


def test_level_shift_and_noise_are_no_loss_spikes():
    """A loss that jumps and stays (each high window has an equal neighbour) is no spike, and
    a bump inside the curve's own noise is none either: the floor is a floor, not a ceiling on
    the robust scale (audit survivors)."""
    from dflash_diag.analysis.alerts import loss_spikes

    assert loss_spikes([1.0, 1.0, 1.0, 5.0, 5.0]) == []
    assert loss_spikes([1.0, 1.3, 0.9, 1.5, 0.95, 1.3, 1.0]) == []
    assert loss_spikes([1.0, 1.01, 0.99, 3.0, 1.0, 1.01, 0.99]) == [3]  # a real one still is


def test_window_label_never_ends_before_the_window_starts():
    from types import SimpleNamespace

    from dflash_diag.analysis.spans import window_label

    window = SimpleNamespace(start=101, end=150)
    assert window_label(window, 90) == "101"  # data behind the window: its start alone
    assert window_label(window, 120) == "101-120"
    assert window_label(window, None) == "101-150"


# -- issue 19's fresh audit (audit 4): each test below fails on the mutation its docstring names --


def test_an_hf_output_folder_whose_sources_tie_reads_its_trainer_state(tmp_path):
    """Bug guarded: the formats' order changed (TensorBoard tried before trainer_state.json).

    An HF output folder holds ``checkpoint-N/trainer_state.json`` and a ``runs/`` TensorBoard
    tree of the same logging calls: with as many records in each, the tie goes to the format
    tried first, which must be the trainer_state.json (the one that carries HF's step and
    evals), and the note says what was read.
    """
    from dflash_diag.read.formats.load import load_log
    from tests.diag.test_formats_readers import VERSION, _scalar_event

    steps = range(10, 110, 10)
    history = [{"step": s, "loss": 2.0 - s / 100, "epoch": s / 100} for s in steps]
    (tmp_path / "checkpoint-100").mkdir()
    (tmp_path / "checkpoint-100" / "trainer_state.json").write_text(
        json.dumps({"global_step": 100, "log_history": history}, indent=2)
    )
    run = tmp_path / "runs" / "Dec01_10-00-00_host"
    run.mkdir(parents=True)
    events = b"".join(_scalar_event(s, "train/loss", 2.0 - s / 100) for s in steps)
    (run / "events.out.tfevents.1.host").write_bytes(VERSION + events)
    log = load_log(tmp_path)
    note = next(n for n in log.notes if "the folder holds" in n)
    assert "read HF trainer_state.json (10 records" in note
    assert log.metrics["step"].to_list() == list(steps)


def test_a_trainer_state_json_on_one_line_with_its_newline_is_a_trainer_state(tmp_path):
    """Bug guarded: a one-line JSON document ending in a newline taken as a log of JSON lines.

    ``json.dump`` without ``indent`` and a final newline (as many scripts write it) makes the
    whole trainer_state.json one line: one record of JSON lines would hold no metric; it is the
    HF state, read as one.
    """
    from dflash_diag.read.formats.detect import detect_format
    from dflash_diag.read.formats.load import load_log

    history = [{"step": s, "loss": 2.0 - s / 100, "epoch": s / 100} for s in range(10, 60, 10)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"global_step": 50, "log_history": history}) + "\n")
    assert detect_format(path) == "hf-trainer-state"
    assert load_log(path).metrics["step"].to_list() == [10, 20, 30, 40, 50]


def test_a_keras_history_on_one_line_with_its_newline_is_a_json_history(tmp_path):
    """Bug guarded: a one-line JSON history told by "no newline in the file" (its final newline
    then makes it a log of JSON lines, whose one record has no step)."""
    from dflash_diag.read.formats.detect import detect_format
    from dflash_diag.read.formats.load import load_log

    path = tmp_path / "history.json"
    path.write_text(json.dumps({"loss": [2.0, 1.5, 1.2, 1.0], "accuracy": [0.1, 0.2, 0.3, 0.4]}))
    path.write_text(path.read_text() + "\n")
    assert detect_format(path) == "json-history"
    assert load_log(path).metrics["step"].to_list() == [0, 1, 2, 3]


def test_a_console_log_with_a_bom_and_a_long_start_up_is_read(tmp_path):
    """Bug guarded: the console sniff looks past the first 64 KiB only when the head it was
    given is a full 64 KiB, forgetting the byte-order mark taken off it (3 bytes short).

    A training script's start-up output (config dumps, warnings) can fill the first 64 KiB
    before the first progress line; a Windows editor or PowerShell's ``Out-File`` puts a BOM
    in front.
    """
    from dflash_diag.read.formats.detect import detect_format
    from dflash_diag.read.formats.load import load_log

    start_up = "".join(f"config.option_{i} = value {i}\n" for i in range(4000))
    progress = "".join(
        f"step={s} loss={2.0 - s / 100:.3f} acc={s / 200:.3f}\n" for s in range(1, 41)
    )
    assert len(start_up) > 70_000
    path = tmp_path / "train.log"
    path.write_bytes(b"\xef\xbb\xbf" + (start_up + progress).encode())
    assert detect_format(path) == "console"
    assert load_log(path).metrics["step"].to_list() == list(range(1, 41))


def test_a_loss_target_already_met_by_the_latest_window_is_reached(tmp_path):
    """Bug guarded: the loss target's current value taken from the first window with a loss,
    not the latest (a loss that fell from 3.0 to 1.0 past a 2.5 target is then "not there
    yet", and its ETA is forecast instead of "reached")."""
    records = [{"step": s, "loss": 3.0 - s / 100, "acc": s / 400} for s in range(1, 201)]
    log = write_records(tmp_path / "falling.jsonl", records)
    report = json.loads(converge(log, "--target-loss", 2.5, "-f", "json"))
    target = report["forecast"]["target"]
    assert target["metric"] == "loss"
    assert (target["eta_step"], target["eta_hours"]) == (200, 0.0)


def test_a_log_written_twice_per_step_keeps_the_later_record_of_each(tmp_path):
    """Bug guarded: of a log in which two processes wrote every step, the earlier record of
    each repeat kept instead of the later (the rule restarts follow too)."""
    records = []
    for step in range(1, 21):
        records.append({"step": step, "loss": 9.0, "acc": 0.1})
        records.append({"step": step, "loss": 1.0, "acc": 0.5})
    from dflash_diag.read.formats.load import load_log

    log = load_log(write_records(tmp_path / "twice.jsonl", records))
    assert log.metrics["step"].to_list() == list(range(1, 21))
    assert set(log.metrics["loss"].to_list()) == {1.0}
    assert any("two processes writing one log" in n for n in log.notes)


def test_records_of_a_later_input_point_at_their_own_header(tmp_path):
    """Bug guarded: the header index of a later input's records not offset by the headers of
    the inputs before it, so the second log's records are judged by the first log's header
    (a resume with another block size read with the old one)."""
    from dflash_diag.read.formats.load import load_log

    def log(name, block_size, steps):
        header = {"event": "run_start", "block_size": block_size, "script": "sync"}
        rows = [{"step": s, "loss": 3.0 - s / 100, "acc": 0.2 + s / 1000} for s in steps]
        return write_records(tmp_path / name, [header, *rows])

    a, b = log("a.jsonl", 8, range(1, 101)), log("b.jsonl", 16, range(101, 201))
    parsed = load_log([a, b])
    headers = [e for e in parsed.events if e.kind == "run_start"]
    for run, first_step in parsed.metrics.group_by("run").agg(pl.col("step").min()).rows():
        assert headers[run].fields["block_size"] == (8 if first_step < 101 else 16)
    assert json.loads(converge(a, b, "-f", "json"))["acceptance"]["block_size"] == 16
