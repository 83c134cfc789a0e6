"""Schedule restarts at a resume: from the header's resume_schedule, or the lr jump in older logs."""

from __future__ import annotations

import math

import pytest

from dflash_diag.analysis.schedule_events import (
    HEADER,
    LR_JUMP,
    ScheduleEvent,
    detect_schedule_events,
    event_at,
    scheduled_lr,
)
from dflash_diag.render.json import schedule_event_json

SYNC = {"kind": "cosine", "peak_lr": 6e-4, "warmup_steps": 6, "total_steps": 150, "min_lr": 6e-5}


def header(schedule, resumed=None, mode=None):
    h = {
        "script": "pipeline" if resumed else "sync",
        "schedule": schedule,
        "resumed_from": {"path": "ck", "step": resumed} if resumed is not None else None,
    }
    if mode is not None:
        h["resume_schedule"] = mode
    return h


def series(*schedules_until):
    """Steps 1..N and the lrs each (schedule, last step) pair gives its steps."""
    steps, lrs, first = [], [], 1
    for sched, last in schedules_until:
        for k in range(first, last + 1):
            steps.append(k)
            lrs.append(scheduled_lr(sched, k))
        first = last + 1
    return steps, lrs


def test_scheduled_lr_mirrors_the_trainer():
    assert scheduled_lr(SYNC, 3) == pytest.approx(3e-4)
    assert scheduled_lr(SYNC, 150) == pytest.approx(6e-5)
    assert scheduled_lr(SYNC, 400) == 6e-5
    restarted = {**SYNC, "warmup_steps": 10, "total_steps": 300, "start_step": 150}
    assert scheduled_lr(restarted, 151) == pytest.approx(6e-5)
    assert scheduled_lr(restarted, 160) == pytest.approx(6e-4)
    assert scheduled_lr({**SYNC, "kind": "constant"}, 100) == 6e-4
    assert scheduled_lr({**SYNC, "kind": "warmup_stable_decay"}, 10) is None
    assert scheduled_lr({"peak_lr": 1e-3}, 10) is None


def test_a_restart_header_is_an_event_with_the_logged_rates():
    new = {**SYNC, "warmup_steps": 10, "total_steps": 410, "start_step": 150}
    steps, lrs = series((SYNC, 150), (new, 200))
    events = detect_schedule_events([header(SYNC), header(new, 150, "restart")], steps, lrs)
    assert events == [
        ScheduleEvent(
            step=151,
            lr_before=pytest.approx(6e-5),
            lr_after=pytest.approx(6e-5),
            warmup_steps=10,
            source=HEADER,
        )
    ]
    assert (
        events[0].text() == "lr schedule restarted at step 151: 6.0e-05 -> 6.0e-05, warmup 10 steps"
    )
    j = schedule_event_json(events[0])
    assert j["step"] == 151
    assert j["source"] == "header"
    assert j["text"].startswith("lr schedule")


def test_continue_is_no_event_even_past_the_old_end():
    steps, lrs = series((SYNC, 200))
    assert detect_schedule_events([header(SYNC), header(SYNC, 150, "continue")], steps, lrs) == []


def test_an_older_log_is_judged_by_the_lr_against_the_previous_schedule():
    # The sample log's story: the pipeline's header (no resume_schedule) has its own absolute
    # 410-step schedule, so step 151 came back at 4.6e-4 instead of the sync floor 6e-5.
    new = {**SYNC, "warmup_steps": 17, "total_steps": 410}
    steps, lrs = series((SYNC, 150), (new, 300))
    events = detect_schedule_events([header(SYNC), header(new, 150), header(new, 275)], steps, lrs)
    assert len(events) == 1  # the resume at 275 continued the same schedule: no event
    e = events[0]
    assert (e.step, e.source, e.warmup_steps) == (151, LR_JUMP, 0)
    assert e.lr_before == pytest.approx(6e-5)
    assert e.lr_after == pytest.approx(scheduled_lr(new, 151))
    assert e.text() == (
        "lr schedule restarted at step 151: 6.0e-05 -> 4.6e-04, no warmup "
        "(seen in the lr; the header does not say)"
    )


def test_without_schedules_only_a_big_jump_counts():
    steps = [1, 2, 3, 4]
    hs = [{"resumed_from": None}, {"resumed_from": {"path": "c", "step": 2}}]
    assert detect_schedule_events(hs, steps, [1e-4, 1e-4, 3e-4, 3e-4])[0].step == 3
    assert detect_schedule_events(hs, steps, [1e-4, 1e-4, 1.2e-4, 1.2e-4]) == []
    assert detect_schedule_events(hs, steps, [1e-4, 1e-4, math.nan, None]) == []


def test_restart_header_without_logged_rates_uses_the_schedules():
    new = {**SYNC, "warmup_steps": 4, "total_steps": 300, "start_step": 150}
    events = detect_schedule_events([header(SYNC), header(new, 150, "restart")], [], [])
    assert events[0].lr_before == pytest.approx(6e-5)
    assert events[0].lr_after == pytest.approx(1.5e-4)
    assert events[0].warmup_steps == 4


def test_event_at_a_boundary():
    e = ScheduleEvent(step=151, lr_before=None, lr_after=1e-4, warmup_steps=None, source=HEADER)
    assert event_at([e], 150) is e
    assert event_at([e], 151) is e
    assert event_at([e], 149) is None
    assert e.text() == "lr schedule restarted at step 151: 1.0e-04"
