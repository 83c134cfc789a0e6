"""Sparklines: scaling, gaps, non-finite values, width."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dflash_diag.render.sparkline import BLOCKS, MISSING, NONFINITE, sparkline


def test_linear_ramp_uses_every_level_in_order():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == BLOCKS


def test_min_and_max_map_to_the_lowest_and_highest_blocks():
    line = sparkline([3.11, 3.0, 2.9, 2.7])
    assert line[0] == "█"
    assert line[-1] == "▁"
    assert len(line) == 4


def test_flat_series_draws_mid_height():
    assert sparkline([0.2, 0.2, 0.2]) == BLOCKS[3] * 3


def test_gaps_and_nonfinite_values_are_visible():
    line = sparkline([0.0, None, math.nan, 1.0, math.inf])
    assert line == "▁·!█!"


def test_all_missing_series():
    assert sparkline([None, math.nan]) == "·!"
    assert sparkline([]) == ""


def test_width_keeps_the_most_recent_values():
    assert sparkline(list(range(20)), width=4) == sparkline([16, 17, 18, 19])
    assert sparkline([1, 2], width=10) == "▁█"
    assert sparkline([1, 2], width=0) == ""


def test_explicit_range_clamps():
    assert sparkline([-5, 0.5, 5], lo=0, hi=1) == "▁" + BLOCKS[round(0.5 * 7)] + "█"


def test_bad_arguments():
    with pytest.raises(ValueError, match="width"):
        sparkline([1], width=-1)
    with pytest.raises(ValueError, match="lo"):
        sparkline([1], lo=2, hi=1)


@settings(deadline=None)  # no per-example time limit: the machine running CI is shared
@given(
    st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=60),
    st.one_of(st.none(), st.integers(min_value=0, max_value=80)),
)
@example([-1.7e308, 1.7e308, 0.0], None)  # a span that overflows to inf
def test_any_series_draws_one_known_character_per_value(values, width):
    line = sparkline(values, width=width)
    kept = values if width is None else values[max(0, len(values) - width) :]
    assert len(line) == len(kept)
    assert set(line) <= set(BLOCKS) | {MISSING, NONFINITE}
    for v, c in zip(kept, line, strict=True):
        if v is None:
            assert c == MISSING
        elif not math.isfinite(v):
            assert c == NONFINITE
        else:
            assert c in BLOCKS
