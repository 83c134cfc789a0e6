"""Learning-rate schedule position: peak source, phase, fractions, epochs."""

from __future__ import annotations

import polars as pl
import pytest

from dflash_diag import ScheduleHeader, schedule_position
from dflash_diag.analysis.schedule import header_phase, infer_phase


def _frame(steps, lrs, epochs=None):
    return pl.DataFrame(
        {"step": steps, "lr": lrs, "epoch": epochs or [None] * len(steps)},
        schema={"step": pl.Int64, "lr": pl.Float64, "epoch": pl.Float64},
    )


HEADER = ScheduleHeader(
    kind="cosine", peak_lr=6e-4, warmup_steps=1000, total_steps=10000, min_lr=6e-5
)


def test_header_gives_peak_phase_and_fractions():
    pos = schedule_position(_frame([400, 500], [2.4e-4, 3e-4]), HEADER, steps_per_epoch=250)
    assert (pos.current, pos.peak, pos.peak_source) == (3e-4, 6e-4, "header")
    assert pos.fraction_of_peak == pytest.approx(0.5)
    assert (pos.phase, pos.phase_source) == ("warmup", "header")
    assert pos.warmup_fraction == pytest.approx(0.5)
    assert pos.run_fraction == pytest.approx(0.05)
    assert (pos.epoch, pos.epoch_source, pos.total_epochs) == (2.0, "steps_per_epoch", 40.0)


def test_total_epochs_of_a_resumed_run_continue_from_the_logged_epoch():
    """A pipeline resumed at step 150 from sync (282 steps per epoch) runs 70.5 steps per epoch:
    at its last step (410 of 410) the run ends at the logged epoch, not at 410 / 70.5 = 5.82."""
    header = ScheduleHeader(
        kind="cosine", peak_lr=6e-4, warmup_steps=17, total_steps=410, min_lr=6e-5, start_step=150
    )
    end = schedule_position(
        _frame([409, 410], [6e-5, 6e-5], [4.2, 4.2163]), header, steps_per_epoch=70.5
    )
    assert (end.epoch, end.epoch_source) == (4.2163, "log")
    assert end.total_epochs == pytest.approx(4.2163)
    mid = schedule_position(_frame([300], [3e-4], [2.0]), header, steps_per_epoch=70.5)
    assert mid.total_epochs == pytest.approx(2.0 + 110 / 70.5)


def test_header_phase_after_warmup():
    assert header_phase(5000, HEADER) == "decay"
    assert header_phase(5000, ScheduleHeader(kind="constant", warmup_steps=100)) == "constant"
    assert header_phase(50, ScheduleHeader(warmup_steps=100)) == "warmup"
    assert header_phase(500, ScheduleHeader(warmup_steps=100)) is None


def test_peak_from_flag_then_max_seen():
    frame = _frame([1, 2, 3], [1e-4, 3e-4, 2e-4])
    flagged = schedule_position(frame, None, peak_lr=4e-4)
    assert (flagged.peak, flagged.peak_source) == (4e-4, "--peak-lr")
    seen = schedule_position(frame, None)
    assert (seen.peak, seen.peak_source, seen.phase, seen.phase_source) == (
        3e-4,
        "max seen",
        "decay",
        "inferred",
    )
    assert seen.fraction_of_peak == pytest.approx(2 / 3)


def test_flag_ignored_when_header_has_peak_is_noted():
    pos = schedule_position(_frame([1], [1e-4]), HEADER, peak_lr=1e-3)
    assert pos.peak == 6e-4
    assert "ignored" in pos.notes[0]


def test_inferred_phase_and_epoch_from_log():
    assert infer_phase([1.0, 2.0, 3.0]) == "warmup"
    assert infer_phase([3.0, 3.0]) == "constant"
    assert infer_phase([3.0]) is None
    pos = schedule_position(_frame([1, 2], [1e-4, 1e-4], [0.5, 0.75]))
    assert (pos.phase, pos.epoch, pos.epoch_source) == ("constant", 0.75, "log")


def test_no_lr_at_all():
    pos = schedule_position(_frame([1, 2], [None, None]))
    assert pos.current is None
    assert pos.peak is None
    assert pos.fraction_of_peak is None
    assert pos.phase is None


def test_header_from_fields_tolerates_junk():
    assert ScheduleHeader.from_fields("cosine") is None
    header = ScheduleHeader.from_fields({"kind": "cosine", "peak_lr": "high", "warmup_steps": 10.0})
    assert header == ScheduleHeader(kind="cosine", peak_lr=None, warmup_steps=10)


def test_a_restarted_schedule_phase_counts_from_its_start_step():
    from dflash_diag.analysis.schedule import WARMUP, ScheduleHeader, header_phase

    h = ScheduleHeader.from_fields(
        {
            "kind": "cosine",
            "peak_lr": 6e-4,
            "warmup_steps": 10,
            "total_steps": 300,
            "min_lr": 6e-5,
            "start_step": 150,
        }
    )
    assert h.start_step == 150
    assert header_phase(155, h) == WARMUP
    assert header_phase(165, h) == "decay"
    assert ScheduleHeader.from_fields({"warmup_steps": 10}).start_step == 0
