"""The per-rank skew's summary lines, shared by every text format (rich, plain, markdown)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dflash_diag.render.number_format import format_percent
from dflash_diag.text import visible

if TYPE_CHECKING:
    from dflash_diag.analysis.rank_skew import RankSkew


def skew_lines(skew: RankSkew) -> list[tuple[str, str]]:
    """``(label, text)`` summary lines shared by every text format."""

    def rate(v: float | None) -> str:
        return "-" if v is None else f"{v:,.0f} tok/s"

    span = (
        f"steps {skew.first_step}-{skew.last_step}"
        + ("" if skew.common_steps else " (no step common to all ranks: each rank's own)")
        if skew.first_step is not None
        else "no steps"
    )
    head = f"{len(skew.ranks)} rank logs · {span}"
    if skew.slowest is not None:
        slow = next(s for s in skew.ranks if s.rank == skew.slowest)
        head += (
            f" · slowest rank {skew.slowest} ({rate(slow.tok_per_sec)}) sets the pace"
            f" · fastest/slowest {skew.skew:.2f}x · median/slowest {skew.slowest_vs_median:.2f}x"
        )
    lines = [("ranks", head)]
    for s in skew.ranks:
        wait = (
            f" · waits {format_percent(s.wait_fraction)} of its steps"
            if s.wait_fraction is not None
            else ""
        )
        step = f" · step {s.step_time:.3g} s" if s.step_time is not None else ""
        text = f"  rank {s.rank}: {rate(s.tok_per_sec)}{step}{wait} ({s.steps} steps, {visible(s.path)})"
        lines.append(("", text))
    return lines
