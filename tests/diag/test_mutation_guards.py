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
