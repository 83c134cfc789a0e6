"""The learning-rate schedule (a pure function)."""

import itertools
import math

import pytest

from pipelines.schedule import Schedule, lr_at


def test_warmup_is_linear_and_1_based():
    s = Schedule(peak_lr=6e-4, warmup_steps=4, total_steps=100, min_lr=0.0)
    assert [lr_at(k, s) for k in (1, 2, 4)] == pytest.approx([1.5e-4, 3e-4, 6e-4])


def test_cosine_hits_midpoint_and_floor():
    s = Schedule(peak_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1)
    assert lr_at(60, s) == pytest.approx(0.55)  # halfway through the decay: mean of peak and floor
    assert lr_at(110, s) == pytest.approx(0.1)
    assert lr_at(500, s) == pytest.approx(0.1)  # beyond the schedule: the floor
    decay = [lr_at(k, s) for k in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(decay))


def test_from_ratio_uses_paper_warmup():
    s = Schedule.from_ratio(1000)
    assert (s.peak_lr, s.warmup_steps, s.total_steps) == (6e-4, 40, 1000)
    assert Schedule.from_ratio(10).warmup_steps == 1  # rounded up: never zero with a ratio > 0
    assert set(s.to_dict()) == {"kind", "peak_lr", "warmup_steps", "total_steps", "min_lr"}


def test_no_warmup_starts_at_peak():
    s = Schedule(peak_lr=2.0, warmup_steps=0, total_steps=3)
    assert lr_at(1, s) == pytest.approx(2.0 * 0.5 * (1 + math.cos(math.pi / 3)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"peak_lr": 0.0}, "peak_lr must be > 0"),
        ({"min_lr": 1.0}, r"min_lr must be in \[0, peak_lr\]"),
        ({"total_steps": 0}, "total_steps must be >= 1"),
        ({"warmup_steps": 20, "total_steps": 10}, r"warmup_steps must be in \[0, 10\]"),
        ({"kind": "step"}, "schedule kind must be one of cosine, linear, constant"),
        ({"start_step": 10}, "total_steps must be >= 11"),
        ({"start_step": 5, "warmup_steps": 6}, r"warmup_steps must be in \[0, 5\]"),
    ],
)
def test_invalid_schedules_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Schedule(**{"peak_lr": 6e-4, "total_steps": 10, **kwargs})


def test_step_zero_is_rejected():
    with pytest.raises(ValueError, match="optimizer steps are 1-based, got 0"):
        lr_at(0, Schedule(total_steps=10))


def test_linear_and_constant_shapes():
    lin = Schedule(peak_lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1, kind="linear")
    assert [lr_at(k, lin) for k in (5, 10, 60, 110, 200)] == pytest.approx(
        [0.5, 1.0, 0.55, 0.1, 0.1]
    )
    const = Schedule(peak_lr=1.0, warmup_steps=4, total_steps=10, min_lr=0.1, kind="constant")
    assert [lr_at(k, const) for k in (2, 4, 10, 50)] == pytest.approx([0.5, 1.0, 1.0, 1.0])


def test_a_restarted_schedule_counts_from_its_start_step():
    s = Schedule.from_ratio(300, peak_lr=6e-4, min_lr=6e-5, start_step=200, warmup_steps=10)
    assert (s.start_step, s.warmup_steps, s.total_steps) == (200, 10, 300)
    assert lr_at(201, s) == pytest.approx(6e-5)  # 1/10 of the peak: warmup again
    assert lr_at(210, s) == pytest.approx(6e-4)
    assert lr_at(255, s) == pytest.approx(3.3e-4)  # halfway through the decay
    assert lr_at(300, s) == pytest.approx(6e-5)
    assert Schedule.from_ratio(300, start_step=200).warmup_steps == 4  # 0.04 of the 100 steps left
    assert s.to_dict()["start_step"] == 200
    assert Schedule.from_dict(s.to_dict()) == s
    assert (
        s.describe()
        == "cosine 6.0e-04 -> 6.0e-05, from step 201, warmup 10 steps, ends at step 300"
    )
