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

import numpy as np

from dflash_diag.analysis import defaults
from dflash_diag.analysis.windows import Window, WindowTable

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


def _arrows(
    table: WindowTable, value: str, se: str, config: TrendConfig, higher_is_better: bool
) -> tuple[list[float | None], list[str | None]]:
    """The deltas and arrows of ``value`` between consecutive windows, as :func:`classify`
    decides them one by one (the same float operations, on arrays: the same bits)."""
    values, given = table.array(value), table.given(value)
    if len(values) < 2:
        return [None] * len(values), [None] * len(values)
    pair = given[1:] & given[:-1]
    with np.errstate(all="ignore"):  # inf - inf is NaN here as in Python, without a warning
        delta = values[1:] - values[:-1]
        if value == "acc":
            tolerance = np.full(len(delta), config.acc_threshold)
        else:
            tolerance = config.loss_threshold * np.abs(values[:-1])
        if config.noise_aware:
            errors, known = table.array(se), table.given(se)
            a, b = errors[1:], errors[:-1]
            tolerance = np.where(known[1:] & known[:-1], np.sqrt(a * a + b * b), tolerance)
        flat = np.abs(delta) <= tolerance + _EPS
    improved = delta > 0 if higher_is_better else delta < 0
    arrow = np.where(flat, FLAT, np.where(improved, UP, DOWN)).astype(object)
    deltas = delta.astype(object)  # Python floats, as the loop's subtraction gives
    deltas[~pair] = arrow[~pair] = None
    return [None, *deltas.tolist()], [None, *arrow.tolist()]


@dataclass(frozen=True)
class TrendColumns:
    """The :class:`Trend` of every window as four columns (aligned with the windows): the
    renderers read them a column at a time, and a :class:`Trend` is built only for a window
    read alone (:meth:`trend`)."""

    acc_delta: list[float | None]
    acc_trend: list[str | None]
    loss_delta: list[float | None]
    loss_trend: list[str | None]

    def __len__(self) -> int:
        return len(self.acc_delta)

    def trend(self, i: int) -> Trend:
        """The trend of window ``i`` (negative: from the newest)."""
        return Trend(self.acc_delta[i], self.acc_trend[i], self.loss_delta[i], self.loss_trend[i])

    def trends(self) -> list[Trend]:
        """Every window's :class:`Trend`, in window order."""
        return [
            Trend(*values)
            for values in zip(
                self.acc_delta, self.acc_trend, self.loss_delta, self.loss_trend, strict=True
            )
        ]

    def slice(self, start: int, stop: int) -> TrendColumns:
        """The trends of windows ``start`` to ``stop`` (a list slice's positions)."""
        return TrendColumns(
            self.acc_delta[start:stop],
            self.acc_trend[start:stop],
            self.loss_delta[start:stop],
            self.loss_trend[start:stop],
        )


def trend_columns(
    windows: Sequence[Window] | WindowTable, config: TrendConfig | None = None
) -> TrendColumns:
    """:func:`compute_trends` as columns: the arrows are array operations on the windows'
    columns (the per-window loop cost most of this at 20,000 windows)."""
    config = config or TrendConfig()
    table = windows if isinstance(windows, WindowTable) else WindowTable.from_windows(windows)
    acc_delta, acc_trend = _arrows(table, "acc", "acc_se", config, higher_is_better=True)
    loss_delta, loss_trend = _arrows(table, "loss", "loss_se", config, higher_is_better=False)
    return TrendColumns(acc_delta, acc_trend, loss_delta, loss_trend)


def compute_trends(
    windows: Sequence[Window] | WindowTable, config: TrendConfig | None = None
) -> list[Trend]:
    """One :class:`Trend` per window, each against the window before it.

    ``windows`` may be a :class:`~dflash_diag.analysis.windows.WindowTable`
    (:func:`trend_columns` keeps the columns).
    """
    return trend_columns(windows, config).trends()
