"""Restart segments with purge-by-later-entries, and the phase/step selection."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag import DiagError, parse_records, resolve_restarts, select_phase

from .logs import dumps


def _frame(steps, source=0):
    return pl.DataFrame(
        {
            "source": [source] * len(steps),
            "seq": list(range(len(steps))),
            "step": steps,
            "acc": [float(i) for i in range(len(steps))],
        }
    )


def test_later_entries_replace_orphaned_ones():
    # Crash after step 6, resume from the step-4 checkpoint: 5 and 6 are logged twice.
    frame, restarts = resolve_restarts(_frame([1, 2, 3, 4, 5, 6, 5, 6, 7]))
    assert frame["step"].to_list() == [1, 2, 3, 4, 5, 6, 7]
    assert frame["acc"].to_list() == [0, 1, 2, 3, 6, 7, 8]  # the second 5 and 6 win
    assert [(r.step, r.previous_step, r.segment) for r in restarts] == [(5, 6, 1)]
    assert frame["segment"].to_list() == [0, 0, 0, 0, 1, 1, 1]


def test_purge_drops_orphans_the_new_segment_does_not_relog():
    # The new segment logs every 2 steps: the crashed attempt's odd steps >= 3 are orphaned too.
    frame, restarts = resolve_restarts(_frame([1, 2, 3, 4, 5, 2, 4, 6]))
    assert frame["step"].to_list() == [1, 2, 4, 6]
    assert frame["acc"].to_list() == [0, 5, 6, 7]
    assert [r.step for r in restarts] == [2]


def test_keep_all_keeps_every_entry_sorted_by_step():
    frame, restarts = resolve_restarts(_frame([1, 2, 3, 2, 3]), keep_all=True)
    assert frame["step"].to_list() == [1, 2, 2, 3, 3]
    assert frame["acc"].to_list() == [0, 1, 3, 2, 4]
    assert len(restarts) == 1


def test_duplicated_step_is_a_restart_and_the_later_entry_wins():
    frame, restarts = resolve_restarts(_frame([1, 2, 2, 3]))
    assert frame["acc"].to_list() == [0, 2, 3]
    assert [(r.step, r.previous_step) for r in restarts] == [(2, 2)]


def test_sources_are_resolved_separately_then_merged():
    both = pl.concat([_frame([1, 3, 5], source=0), _frame([2, 4, 1, 2], source=1)])
    frame, restarts = resolve_restarts(both)
    assert frame["step"].to_list() == [1, 1, 2, 3, 5]
    assert frame["source"].to_list() == [0, 1, 1, 0, 0]
    assert [(r.source, r.step) for r in restarts] == [(1, 1)]


def _mixed():
    return parse_records(
        dumps(
            [{"step": s, "acc": 0.1} for s in range(1, 6)]
            + [{"step": s, "acc": 0.2, "tok_per_sec": 10.0} for s in range(6, 9)]
            + [{"event": "run_start", "script": "pipeline"}]
            + [{"step": s, "acc": 0.3} for s in range(9, 12)]
        )
    ).metrics


def test_auto_phase_picks_pipeline_entries():
    frame, selection = select_phase(_mixed(), "auto")
    assert frame["step"].to_list() == list(range(6, 12))
    assert selection.phase == "pipeline"
    assert selection.pipeline == 6
    assert selection.total == 11


def test_auto_phase_falls_back_to_all_and_step_bounds():
    legacy = _mixed().filter(pl.col("step") <= 5)
    frame, selection = select_phase(legacy, "auto", from_step=2, to_step=4)
    assert selection.phase == "all"
    assert frame["step"].to_list() == [2, 3, 4]
    assert select_phase(_mixed(), "all")[0].height == 11


def test_pipeline_phase_without_pipeline_entries_selects_nothing():
    legacy = _mixed().filter(pl.col("step") <= 5)
    assert select_phase(legacy, "pipeline")[0].height == 0


def test_bad_selection_arguments():
    with pytest.raises(DiagError, match="after"):
        select_phase(_mixed(), "all", from_step=5, to_step=2)
    with pytest.raises(DiagError, match="unknown phase"):
        select_phase(_mixed(), "newest")


def _reference(rows, keep_all):
    """Restart resolution in plain Python: rows are (source, seq, step) in any order."""
    out, restarts = [], []
    for source in sorted({r[0] for r in rows}):
        mine = sorted((r for r in rows if r[0] == source), key=lambda r: r[1])
        segment = 0
        for i, (src, seq, step) in enumerate(mine):
            if i and step <= mine[i - 1][2]:
                segment += 1
                restarts.append((src, step, mine[i - 1][2], segment))
            later = [r[2] for r in mine[i + 1 :]]
            if keep_all or not later or step < min(later):
                out.append((src, seq, step, segment))
    return sorted(out, key=lambda r: (r[2], r[0], r[1])), sorted(restarts)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30)), max_size=25),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_resolve_restarts_matches_a_plain_python_reference(pairs, keep_all, rng):
    rows = [(source, seq, step) for seq, (source, step) in enumerate(pairs)]
    shuffled = rows[:]
    rng.shuffle(shuffled)  # also out of file order
    for given_rows in (rows, shuffled):
        frame = pl.DataFrame(
            given_rows, schema={"source": pl.Int32, "seq": pl.Int64, "step": pl.Int64}, orient="row"
        )
        merged, restarts = resolve_restarts(frame, keep_all=keep_all)
        expected_rows, expected_restarts = _reference(rows, keep_all)
        assert list(merged.select("source", "seq", "step", "segment").iter_rows()) == expected_rows
        assert (
            sorted((r.source, r.step, r.previous_step, r.segment) for r in restarts)
            == expected_restarts
        )
