"""Sparklines: scaling, gaps, non-finite values, width."""

from __future__ import annotations

import math

import pytest

from dflash_diag.sparkline import BLOCKS, sparkline


def test_linear_ramp_uses_every_level_in_order():
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == BLOCKS


def test_min_and_max_map_to_the_lowest_and_highest_blocks():
    line = sparkline([3.11, 3.0, 2.9, 2.7])
    assert line[0] == "█" and line[-1] == "▁"
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
