"""Training regimes inside one log: where the script or the loss normalisation changes.

A log often holds two regimes: the old lock-step script up to some step, then the new pipeline
resumed from its checkpoint. `find_regimes` splits a step-ordered metrics frame on the first rule
that tells records apart (the header's script, the field signature, a normalisation setting) and
summarises each regime; `RunConfig` reads the settings that change how a loss is normalised from a
``run_start`` header.

Input is the metrics frame after restart resolution (one row per step, step order) with the columns
of schema v1 (``step``, ``loss``, ``acc`` and, where logged, ``n_tokens``, ``n_pred``,
``tok_per_sec``), plus ``run``: the index into ``headers`` of the ``run_start`` header in force
for the record (-1 or null before any header), as `dflash_diag.read.records.ParsedLog.metrics` has it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import polars as pl

from dflash_diag.analysis import defaults
from dflash_diag.analysis.frame_means import mean_acc, mean_loss, mean_of
from dflash_diag.analysis.numbers import finite_number
from dflash_diag.analysis.robust_trend import bounded_points, theil_sen_slope
from dflash_diag.analysis.windows import compute_windows

# Header/config keys that name the same setting in different trainers.
_WORLD_SIZE_KEYS = ("world_size", "dp", "data_parallel", "dp_size", "num_gpus")
_GRAD_ACCUM_KEYS = ("grad_accum", "grad_accumulation", "gradient_accumulation_steps", "accum")
_TOKEN_BUDGET_KEYS = ("token_budget", "max_tokens", "tokens_per_batch", "batch_tokens")


@dataclass(frozen=True)
class RunConfig:
    """The settings of one ``run_start`` header that change how a loss is normalised."""

    script: str | None = None
    world_size: int | None = None
    grad_accum: int | None = None
    token_budget: int | None = None
    block_size: int | None = None
    """B: an accuracy over B-1 drafted positions is another quantity under another B."""

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> RunConfig:
        """Read the settings from a header, looking at its top level and its ``config``."""
        config = header.get("config")
        scopes = [header] + ([config] if isinstance(config, Mapping) else [])

        def first_int(keys: Sequence[str]) -> int | None:
            for scope in scopes:
                for key in keys:
                    value = finite_number(scope.get(key))
                    if value is not None and value > 0:
                        return int(value)
            return None

        script = header.get("script")
        return cls(
            script=script if isinstance(script, str) else None,
            world_size=first_int(_WORLD_SIZE_KEYS),
            grad_accum=first_int(_GRAD_ACCUM_KEYS),
            token_budget=first_int(_TOKEN_BUDGET_KEYS),
            block_size=first_int(("block_size",)),
        )

    def normalisation_key(self) -> tuple[int | None, ...]:
        """The settings whose change makes a new regime when no script name tells them apart
        (the block size too: it changes what the accuracy averages over)."""
        return (self.world_size, self.grad_accum, self.token_budget, self.block_size)

    def label(self) -> str:
        """A short description such as ``dp=2 accum=1 budget=8192`` (unknown settings left out)."""
        parts = []
        if self.world_size is not None:
            parts.append(f"dp={self.world_size}")
        if self.grad_accum is not None:
            parts.append(f"accum={self.grad_accum}")
        if self.token_budget is not None:
            parts.append(f"budget={self.token_budget}")
        if self.block_size is not None:
            parts.append(f"B={self.block_size}")
        return " ".join(parts) or "no config"


@dataclass(frozen=True, kw_only=True)
class Regime:
    """One training regime: a contiguous step range logged under the same script/settings.

    ``loss``/``acc`` are means over the regime (acc weighted by ``n_pred`` where present);
    ``loss_trend``/``acc_trend`` are robust slopes per 1k steps (None when too short).
    """

    name: str
    start_step: int
    end_step: int
    n: int
    tokens_per_step: float | None
    tokens_per_step_source: str | None
    tok_per_sec: float | None
    loss: float | None
    acc: float | None
    loss_trend: float | None = None
    acc_trend: float | None = None
    config: RunConfig | None = None


def _has(frame: pl.DataFrame, column: str) -> pl.Expr:
    if column not in frame.columns:
        return pl.lit(False)
    return pl.col(column).is_not_null()


def _label_runs(labels: pl.Series) -> list[tuple[int, int, str]]:
    """Contiguous (start, stop, label) runs of equal labels, by run-length encoding (a Python
    loop over a million labels cost about a second)."""
    encoded = labels.rle()
    lengths = encoded.struct.field("len").to_list()
    values = encoded.struct.field("value").to_list()
    out: list[tuple[int, int, str]] = []
    start = 0
    for length, value in zip(lengths, values, strict=True):
        out.append((start, start + length, value))
        start += length
    return out


def _by_header(
    frame: pl.DataFrame, configs: Sequence[RunConfig], label_of: Any
) -> tuple[pl.Series, list[Any]]:
    """Each row's ``label_of(config)`` of the header in force (None before any header or for an
    index no header has), computed once per distinct header index, and those labels in row
    order of their first row (runs of equal header indices, not rows)."""
    if "run" not in frame.columns:
        return pl.repeat(None, frame.height, dtype=pl.String, eager=True), [None]
    index = frame["run"].cast(pl.Int64).fill_null(-1)
    per_index = {
        i: (label_of(configs[i]) if 0 <= i < len(configs) else None)
        for i in index.unique().to_list()
    }
    labels = index.replace_strict(per_index, return_dtype=pl.String)
    in_order = [per_index[i] for i in index.rle().struct.field("value").to_list()]
    return labels, in_order


def _regime_runs(
    frame: pl.DataFrame, configs: Sequence[RunConfig]
) -> tuple[list[tuple[int, int, str]], str | None]:
    """The (start, stop, label) row runs of the regimes and the rule that produced them, trying
    the rules in the issue's order: the header's script, then the field signature, then the
    normalisation settings. Labels are decided per header (a handful), never per row."""
    scripts, script_order = _by_header(frame, configs, lambda c: c.script)
    if len({s for s in script_order if s is not None}) >= 2:
        # Records before any header inherit the first script seen (a header-less start).
        first = next(s for s in script_order if s is not None)
        return _label_runs(scripts.fill_null(first)), "script"

    signature = frame.select(_has(frame, "tok_per_sec").alias("sig"))["sig"]
    if signature.n_unique() >= 2:
        labels = signature.replace_strict(
            {True: "pipeline", False: "legacy"}, return_dtype=pl.String
        )
        return _label_runs(labels), "fields"

    # the keys are tuples: compared per header, labelled by the header's label
    _, key_order = _by_header(frame, configs, lambda c: repr(c.normalisation_key()))
    if len({k for k in key_order if k is not None}) >= 2:
        labels, _ = _by_header(frame, configs, lambda c: c.label())
        return _label_runs(labels.fill_null("no header")), "config"

    only = next((s for s in script_order if s is not None), None) or (
        "pipeline" if signature.len() and signature[0] else "run"
    )
    return [(0, frame.height, only)], None


def _tokens_per_step(
    rows: pl.DataFrame, config: RunConfig | None
) -> tuple[float | None, str | None]:
    if "n_tokens" in rows.columns:
        n = rows["n_tokens"].cast(pl.Float64, strict=False).drop_nulls()
        n = n.filter(n.is_finite())
        if n.len():
            return float(cast(float, n.mean())), "n_tokens"
    if config is not None and config.token_budget is not None:
        tokens = config.token_budget * (config.world_size or 1) * (config.grad_accum or 1)
        return float(tokens), "token_budget x world_size x grad_accum"
    return None, None


def _dominant_config(rows: pl.DataFrame, configs: Sequence[RunConfig]) -> RunConfig | None:
    if "run" not in rows.columns:
        return None
    idx = rows["run"].drop_nulls()
    idx = idx.filter(idx >= 0)
    if idx.is_empty():
        return None
    # The last header in force: a resumed run's settings are the ones that describe its records.
    i = int(idx[-1])
    return configs[i] if i < len(configs) else None


def regime_trend(rows: pl.DataFrame, column: str, window: int = defaults.WINDOW) -> float | None:
    """Robust slope of ``column`` per 1k steps over a regime: Theil-Sen on its window means (the
    converge command's windows, merged into entry-weighted groups past
    :data:`~dflash_diag.analysis.robust_trend.MAX_POINTS` as the verdict merges them, so one
    regime's trend is converge's verdict slope), None with fewer than 3 windows holding a
    finite value."""
    points = [
        ((w.first_step + w.last_step) / 2, value, w.n)
        for w in compute_windows(rows, window)
        if (value := getattr(w, column)) is not None and math.isfinite(value)
    ]
    if len(points) < 3:
        return None
    xs, ys = bounded_points([p[0] for p in points], [p[1] for p in points], [p[2] for p in points])
    return 1000.0 * theil_sen_slope(xs, ys)


def find_regimes(
    frame: pl.DataFrame,
    headers: Sequence[Mapping[str, Any]] = (),
    *,
    window: int | None = None,
) -> tuple[list[tuple[Regime, pl.DataFrame]], str | None]:
    """Split a step-ordered metrics frame into regimes.

    Args:
        frame: one row per step (restarts resolved), step order; see the module docstring.
        headers: the log's ``run_start`` headers (their fields), indexed by the ``run`` column.
        window: steps per window of each regime's trends (:func:`regime_trend`); None leaves
            trends out.

    Returns:
        The regimes with their rows, and the rule that split them (None for a single regime).
    """
    if frame.is_empty():
        return [], None
    configs = [RunConfig.from_header(h) for h in headers]
    runs, split_on = _regime_runs(frame, configs)
    seen: dict[str, int] = {}
    out: list[tuple[Regime, pl.DataFrame]] = []
    for start, stop, label in runs:
        rows = frame.slice(start, stop - start)
        seen[label] = seen.get(label, 0) + 1
        name = label if seen[label] == 1 else f"{label} #{seen[label]}"
        config = _dominant_config(rows, configs)
        tps, tps_source = _tokens_per_step(rows, config)
        steps = rows["step"]
        out.append(
            (
                Regime(
                    name=name,
                    start_step=int(steps[0]),
                    end_step=int(steps[-1]),
                    n=rows.height,
                    tokens_per_step=tps,
                    tokens_per_step_source=tps_source,
                    tok_per_sec=mean_of(rows, "tok_per_sec"),
                    loss=mean_loss(rows),
                    acc=mean_acc(rows),
                    loss_trend=regime_trend(rows, "loss", window) if window is not None else None,
                    acc_trend=regime_trend(rows, "acc", window) if window is not None else None,
                    config=config,
                ),
                rows,
            )
        )
    return out, split_on
