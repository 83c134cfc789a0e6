"""Labels of step spans: ``401-410`` for a window or regime, ``5`` for a span of one step.

Every table and sentence that names a span of steps uses these, so a one-step window reads ``5``
everywhere (never ``5-5``) and a window the log has not filled yet ends at the data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dflash_diag.analysis.windows import Window


def step_span(start: int, end: int) -> str:
    """``start-end``, or ``start`` alone when the span is one step."""
    return str(start) if end == start else f"{start}-{end}"


def window_label(window: Window, last_step: int | None) -> str:
    """The window's span with the end at the data: a window the log has not filled yet ends at
    the last step logged, not at its nominal end."""
    end = window.end if last_step is None else min(window.end, max(last_step, window.start))
    return step_span(window.start, end)
