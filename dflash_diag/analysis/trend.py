"""Trend arrows between consecutive windows: up = better, down = worse, flat = within noise.

Accuracy is better when it rises, loss when it falls; both get the same vocabulary so a table reads
the same way in either column. "Within noise" is a fixed threshold by default (0.005 absolute for
accuracy, as in the original analysis; relative for loss), or, in noise-aware mode, the standard
error of the difference of the two window means (sqrt(se1^2 + se2^2)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dflash_diag.analysis import defaults
from dflash_diag.analysis.windows import Window

UP, DOWN, FLAT = "up", "down", "flat"
ARROWS = {UP: "↑", DOWN: "↓", FLAT: "→", None: ""}

# Deltas are differences of rounded-looking means: without a little slack, 0.1766 - 0.1716 would
# land on either side of a 0.005 threshold depending on the last bit.
_EPS = 1e-12


@dataclass(frozen=True)
class TrendConfig:
    """How arrows are decided.

    Attributes:
        acc_threshold: an accuracy change of at most this (absolute) is flat.
        loss_threshold: a loss change of at most this fraction of the previous loss is flat.
        noise_aware: use the standard error of the difference instead of the thresholds (where a
            window has at least two entries; otherwise the thresholds still apply).
    """

    acc_threshold: float = defaults.ACC_THRESHOLD
    loss_threshold: float = defaults.LOSS_THRESHOLD
    noise_aware: bool = False

    def __post_init__(self) -> None:
        if not (self.acc_threshold >= 0 and math.isfinite(self.acc_threshold)):
            raise ValueError(f"accuracy threshold must be >= 0, got {self.acc_threshold}")
        if not (self.loss_threshold >= 0 and math.isfinite(self.loss_threshold)):
            raise ValueError(f"loss threshold must be >= 0, got {self.loss_threshold}")


@dataclass(frozen=True)
class Trend:
    """A window's change against the previous window (None for the first, or without data).

    Attributes:
        acc_delta: accuracy minus the previous window's.
        acc_trend: "up" (higher), "down" or "flat".
        loss_delta: loss minus the previous window's.
        loss_trend: "up" (LOWER loss, i.e. better), "down" or "flat".
    """

    acc_delta: float | None
    acc_trend: str | None
    loss_delta: float | None
    loss_trend: str | None


def classify(delta: float, tolerance: float, higher_is_better: bool = True) -> str:
    """ "flat" when ``|delta| <= tolerance``, else "up" if the change is an improvement."""
    if abs(delta) <= tolerance + _EPS:
        return FLAT
    improved = delta > 0 if higher_is_better else delta < 0
    return UP if improved else DOWN


def _standard_error_of_difference(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return math.sqrt(a * a + b * b)


def compute_trends(windows: Sequence[Window], config: TrendConfig | None = None) -> list[Trend]:
    """One :class:`Trend` per window, each against the window before it."""
    config = config or TrendConfig()
    trends: list[Trend] = []
    previous: Window | None = None
    for window in windows:
        acc_delta = acc_trend = loss_delta = loss_trend = None
        if previous is not None:
            if window.acc is not None and previous.acc is not None:
                acc_delta = window.acc - previous.acc
                tolerance = config.acc_threshold
                if config.noise_aware:
                    se = _standard_error_of_difference(window.acc_se, previous.acc_se)
                    tolerance = se if se is not None else tolerance
                acc_trend = classify(acc_delta, tolerance)
            if window.loss is not None and previous.loss is not None:
                loss_delta = window.loss - previous.loss
                tolerance = config.loss_threshold * abs(previous.loss)
                if config.noise_aware:
                    se = _standard_error_of_difference(window.loss_se, previous.loss_se)
                    tolerance = se if se is not None else tolerance
                loss_trend = classify(loss_delta, tolerance, higher_is_better=False)
        trends.append(Trend(acc_delta, acc_trend, loss_delta, loss_trend))
        previous = window
    return trends
