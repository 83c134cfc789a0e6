"""Training regimes inside one log, the jump at each boundary, and two runs side by side.

A log often holds two regimes: the old lock-step script up to some step, then the new pipeline
resumed from its checkpoint. Their logged losses need not be comparable: in the original analysis
the loss went from about 1.57 to 3.11 at the switch while accuracy barely moved, because one script
divided the loss by the data-parallel size and the other did not. This module finds the regimes,
measures each boundary (loss ratio, acc delta over the last/first K steps) and says when the ratio
matches a normalisation factor present in the configs, so the jump is not mistaken for the model
getting worse.

Input is the metrics frame after restart resolution (one row per step, step order) with the columns
of schema v1 (``step``, ``loss``, ``acc`` and, where logged, ``n_tokens``, ``n_pred``,
``tok_per_sec``), plus ``run``: the index into ``headers`` of the ``run_start`` header in force
for the record (-1 or null before any header), as `dflash_diag.reader.ParsedLog.metrics` has it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from dflash_diag.robust_trend import theil_sen_slope
from dflash_diag.windows import compute_windows

# Header/config keys that name the same setting in different trainers.
_WORLD_SIZE_KEYS = ("world_size", "dp", "data_parallel", "dp_size", "num_gpus")
_GRAD_ACCUM_KEYS = ("grad_accum", "grad_accumulation", "gradient_accumulation_steps", "accum")
_TOKEN_BUDGET_KEYS = ("token_budget", "max_tokens", "tokens_per_batch", "batch_tokens")

# trend(rows, column) -> robust slope per 1k steps, or None when the rows are too few.
TrendFn = Callable[[pl.DataFrame, str], "float | None"]


@dataclass(frozen=True)
class CompareConfig:
    """Settings of the regime comparison.

    Attributes:
        k: steps on each side of a boundary whose means are compared (``--k``).
        factor_tolerance: relative distance within which a loss ratio "matches" a normalisation
            factor (0.05: x1.98 matches 2, x1.85 does not).
        acc_tolerance: an absolute acc change below which accuracy "barely moved" across a
            boundary, the tell-tale that a loss jump is a normalisation artefact.
        window: steps per window for each regime's robust trend (and two-run alignment).
    """

    k: int = 50
    factor_tolerance: float = 0.05
    acc_tolerance: float = 0.02
    window: int = 50

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"--k must be at least 1, got {self.k}")
        if self.window < 1:
            raise ValueError(f"--window must be at least 1, got {self.window}")
        if not 0 < self.factor_tolerance < 1:
            raise ValueError(f"factor tolerance must be in (0, 1), got {self.factor_tolerance}")
        if self.acc_tolerance < 0:
            raise ValueError(f"acc tolerance must be >= 0, got {self.acc_tolerance}")


@dataclass(frozen=True)
class RunConfig:
    """The settings of one ``run_start`` header that change how a loss is normalised."""

    script: str | None = None
    world_size: int | None = None
    grad_accum: int | None = None
    token_budget: int | None = None

    @classmethod
    def from_header(cls, header: Mapping[str, Any]) -> RunConfig:
        """Read the settings from a header, looking at its top level and its ``config``."""
        config = header.get("config")
        scopes = [header] + ([config] if isinstance(config, Mapping) else [])

        def first_int(keys: Sequence[str]) -> int | None:
            for scope in scopes:
                for key in keys:
                    value = scope.get(key)
                    # bool is an int subclass; a flag is not a size
                    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
                    if is_number and math.isfinite(value) and value > 0:
                        return int(value)
            return None

        script = header.get("script")
        return cls(
            script=script if isinstance(script, str) else None,
            world_size=first_int(_WORLD_SIZE_KEYS),
            grad_accum=first_int(_GRAD_ACCUM_KEYS),
            token_budget=first_int(_TOKEN_BUDGET_KEYS),
        )

    def normalisation_key(self) -> tuple[int | None, int | None, int | None]:
        """The settings whose change makes a new regime when no script name tells them apart."""
        return (self.world_size, self.grad_accum, self.token_budget)

    def label(self) -> str:
        """A short description such as ``dp=2 accum=1 budget=8192`` (unknown settings left out)."""
        parts = []
        if self.world_size is not None:
            parts.append(f"dp={self.world_size}")
        if self.grad_accum is not None:
            parts.append(f"accum={self.grad_accum}")
        if self.token_budget is not None:
            parts.append(f"budget={self.token_budget}")
        return " ".join(parts) or "no config"


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Boundary:
    """The jump between two adjacent regimes, measured over K steps on each side."""

    step: int
    loss_ratio: float | None
    acc_delta: float | None
    explanation: str
    matched: str | None = None
    loss_before: float | None = None
    loss_after: float | None = None
    acc_before: float | None = None
    acc_after: float | None = None
    n_before: int = 0
    n_after: int = 0
    per_token_loss_ratio: float | None = None


@dataclass(frozen=True)
class RegimeComparison:
    """Regimes of one log and the boundaries between them.

    ``split_on`` says which rule found the regimes: "script", "fields" (records with and without
    ``tok_per_sec``), "config" (a normalisation setting changed between headers) or None (one
    regime, no boundary).
    """

    regimes: list[Regime]
    boundaries: list[Boundary]
    split_on: str | None
    k: int = 50
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``regimes`` and ``boundaries`` with their documented keys first."""
        regimes = []
        for r in self.regimes:
            d = asdict(r)
            d["config"] = asdict(r.config) if r.config is not None else None
            regimes.append(d)
        return {
            "regimes": regimes,
            "boundaries": [asdict(b) for b in self.boundaries],
            "split_on": self.split_on,
            "k": self.k,
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------
# means that respect the schema: NaN/Inf left out (and counted by the reader), acc per token


def _finite(frame: pl.DataFrame, column: str) -> pl.DataFrame:
    if column not in frame.columns:
        return frame.clear()
    values = pl.col(column).cast(pl.Float64, strict=False)
    return frame.filter(values.is_not_null() & values.is_finite())


def mean_loss(frame: pl.DataFrame) -> float | None:
    """Plain mean of the finite losses, None when there are none."""
    rows = _finite(frame, "loss")
    if rows.is_empty():
        return None
    return float(rows["loss"].cast(pl.Float64).mean())


def mean_acc(frame: pl.DataFrame, *, weighted: bool = True) -> float | None:
    """Mean accuracy, weighted by ``n_pred`` where every finite row has it (an exact per-token mean
    across batches of different size), else a plain mean; None when there is no finite acc."""
    rows = _finite(frame, "acc")
    if rows.is_empty():
        return None
    acc = rows["acc"].cast(pl.Float64)
    if weighted and "n_pred" in rows.columns:
        w = rows["n_pred"].cast(pl.Float64, strict=False)
        if w.null_count() == 0 and bool((w > 0).all()):
            return float((acc * w).sum() / w.sum())
    return float(acc.mean())


def _weighted_loss(frame: pl.DataFrame) -> float | None:
    """Loss weighted by ``n_pred``: the per-token loss when each row's loss is a per-token mean."""
    rows = _finite(frame, "loss")
    if rows.is_empty() or "n_pred" not in rows.columns:
        return None
    w = rows["n_pred"].cast(pl.Float64, strict=False)
    if w.null_count() or not bool((w > 0).all()):
        return None
    return float((rows["loss"].cast(pl.Float64) * w).sum() / w.sum())


# --------------------------------------------------------------------------------------------
# regimes


def _has(frame: pl.DataFrame, column: str) -> pl.Expr:
    if column not in frame.columns:
        return pl.lit(False)
    return pl.col(column).is_not_null()


def _regime_labels(
    frame: pl.DataFrame, configs: Sequence[RunConfig]
) -> tuple[list[str], str | None]:
    """A label per row and the rule that produced them, trying the rules in the issue's order:
    the header's script, then the field signature, then the normalisation settings."""
    header_idx = frame["run"].to_list() if "run" in frame.columns else [None] * frame.height

    def cfg(i: int | None) -> RunConfig | None:  # -1/None: before any header
        return configs[i] if i is not None and 0 <= i < len(configs) else None

    scripts = [c.script if (c := cfg(i)) is not None else None for i in header_idx]
    if len({s for s in scripts if s is not None}) >= 2:
        # Records before any header inherit the first script seen (a header-less start).
        first = next(s for s in scripts if s is not None)
        return [s if s is not None else first for s in scripts], "script"

    signature = frame.select(_has(frame, "tok_per_sec").alias("sig"))["sig"].to_list()
    if len(set(signature)) >= 2:
        return ["pipeline" if s else "legacy" for s in signature], "fields"

    keys = [c.normalisation_key() if (c := cfg(i)) is not None else None for i in header_idx]
    if len({k for k in keys if k is not None}) >= 2:
        labels = []
        for i, key in zip(header_idx, keys):
            c = cfg(i)
            labels.append(c.label() if c is not None else "no header")
        return labels, "config"

    only = next((s for s in scripts if s is not None), None) or (
        "pipeline" if signature and signature[0] else "run"
    )
    return [only] * frame.height, None


def _runs(labels: Sequence[str]) -> list[tuple[int, int, str]]:
    """Contiguous (start, stop, label) runs of equal labels."""
    out: list[tuple[int, int, str]] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((start, i, labels[start]))
            start = i
    return out


def _tokens_per_step(
    rows: pl.DataFrame, config: RunConfig | None
) -> tuple[float | None, str | None]:
    if "n_tokens" in rows.columns:
        n = rows["n_tokens"].cast(pl.Float64, strict=False).drop_nulls()
        n = n.filter(n.is_finite())
        if n.len():
            return float(n.mean()), "n_tokens"
    if config is not None and config.token_budget is not None:
        tokens = config.token_budget * (config.world_size or 1) * (config.grad_accum or 1)
        return float(tokens), "token_budget x world_size x grad_accum"
    return None, None


def _mean_of(rows: pl.DataFrame, column: str) -> float | None:
    sub = _finite(rows, column)
    return None if sub.is_empty() else float(sub[column].cast(pl.Float64).mean())


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


def regime_trend(rows: pl.DataFrame, column: str, window: int = 50) -> float | None:
    """Robust slope of ``column`` per 1k steps over a regime: Theil-Sen on its window means (the
    converge command's windows), None with fewer than 3 windows holding a finite value."""
    points = [
        ((w.first_step + w.last_step) / 2, value)
        for w in compute_windows(rows, window)
        if (value := getattr(w, column)) is not None and math.isfinite(value)
    ]
    if len(points) < 3:
        return None
    return 1000.0 * theil_sen_slope([p[0] for p in points], [p[1] for p in points])


def find_regimes(
    frame: pl.DataFrame,
    headers: Sequence[Mapping[str, Any]] = (),
    *,
    trend: TrendFn | None = None,
) -> tuple[list[tuple[Regime, pl.DataFrame]], str | None]:
    """Split a step-ordered metrics frame into regimes.

    Args:
        frame: one row per step (restarts resolved), step order; see the module docstring.
        headers: the log's ``run_start`` headers (their fields), indexed by the ``run`` column.
        trend: ``trend(rows, column) -> slope per 1k steps | None``; None leaves trends out.

    Returns:
        The regimes with their rows, and the rule that split them (None for a single regime).
    """
    if frame.is_empty():
        return [], None
    configs = [RunConfig.from_header(h) for h in headers]
    labels, split_on = _regime_labels(frame, configs)
    runs = _runs(labels)
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
                    tok_per_sec=_mean_of(rows, "tok_per_sec"),
                    loss=mean_loss(rows),
                    acc=mean_acc(rows),
                    loss_trend=trend(rows, "loss") if trend is not None else None,
                    acc_trend=trend(rows, "acc") if trend is not None else None,
                    config=config,
                ),
                rows,
            )
        )
    return out, split_on


# --------------------------------------------------------------------------------------------
# boundaries


def normalisation_factors(
    before: RunConfig | None,
    after: RunConfig | None,
    tokens_before: float | None = None,
    tokens_after: float | None = None,
) -> list[tuple[str, float]]:
    """Candidate loss-normalisation factors between two regimes, simplest first.

    A loss averaged over data-parallel ranks or accumulation micro-batches in one script and summed
    (or divided twice) in the other differs by that factor; a per-step sum versus a per-token mean
    differs by the tokens-per-step ratio.

    Returns:
        ``(label, factor)`` pairs with factor > 1, e.g. ``("dp=2", 2.0)``.
    """
    out: list[tuple[str, float]] = []
    if before is not None and after is not None:
        for name, a, b in (
            ("dp", before.world_size, after.world_size),
            ("grad_accum", before.grad_accum, after.grad_accum),
        ):
            a, b = a or 1, b or 1  # a header without the setting does not use it
            if a != b:
                label = f"{name}={max(a, b)}" if min(a, b) == 1 else f"{name} {a}->{b}"
                out.append((label, max(a, b) / min(a, b)))
        if before.token_budget and after.token_budget and before.token_budget != after.token_budget:
            a, b = before.token_budget, after.token_budget
            out.append((f"token budget {a}->{b}", max(a, b) / min(a, b)))
    if tokens_before and tokens_after:
        r = max(tokens_before, tokens_after) / min(tokens_before, tokens_after)
        if r > 1.05 and not any(abs(f - r) / r < 1e-9 for _, f in out):
            out.append((f"tokens per step x{r:.3g}", r))
    singles = list(out)
    for i in range(len(singles)):  # products of two settings (dp and accumulation together)
        for j in range(i + 1, len(singles)):
            (la, fa), (lb, fb) = singles[i], singles[j]
            if not any(abs(f - fa * fb) / (fa * fb) < 1e-9 for _, f in out):
                out.append((f"{la} x {lb}", fa * fb))
    return out


def _match(ratio: float, factors: Sequence[tuple[str, float]], tol: float) -> str | None:
    """The first factor the ratio (or its inverse) lies within ``tol`` of, relatively."""
    for label, f in factors:
        for r in (ratio, 1 / ratio):
            if abs(r - f) / f <= tol:
                return label
    return None


def _near_whole(ratio: float, tol: float) -> int | None:
    """The whole number 2..16 that ``ratio`` (or its inverse) lies within ``tol`` of, if any."""
    r = max(ratio, 1 / ratio)
    n = round(r)
    return n if 2 <= n <= 16 and abs(r - n) / n <= tol else None


def explain_boundary(
    step: int,
    loss_ratio: float | None,
    acc_delta: float | None,
    factors: Sequence[tuple[str, float]],
    config: CompareConfig,
    headerless: str | None = None,
) -> tuple[str, str | None]:
    """The sentence describing a boundary jump, and the matched factor's label if any.

    ``headerless`` names a regime without a ``run_start`` header: its settings are unknown, so a
    ratio close to a small whole number is reported as a likely, unconfirmed normalisation.
    """
    if loss_ratio is None:
        acc_part = f"; acc {acc_delta:+.4f}" if acc_delta is not None else ""
        return f"not enough finite loss around step {step} to measure the jump{acc_part}", None
    acc_small = acc_delta is None or abs(acc_delta) < config.acc_tolerance
    acc_text = "n/a" if acc_delta is None else f"{acc_delta:+.4f}"
    if not (math.isfinite(loss_ratio) and loss_ratio > 0):
        # a zero, negative or overflowing mean loss: no normalisation factor can explain it
        return f"loss ratio {loss_ratio:g} at step {step} (acc {acc_text}): not comparable", None
    if abs(loss_ratio - 1) <= config.factor_tolerance:
        return f"no loss jump at step {step} (x{loss_ratio:.2f}, acc {acc_text})", None
    matched = _match(loss_ratio, factors, config.factor_tolerance)
    head = f"loss x{loss_ratio:.2f} at step {step}"
    if matched is not None and acc_small:
        return (
            f"{head} matches {matched}: the two scripts normalise the loss differently; "
            "not a change in the model"
        ), matched
    if matched is not None:
        return (
            f"{head} matches {matched} (a loss-normalisation difference), but acc also moved "
            f"{acc_text}: the model changed as well"
        ), matched
    tried = ", ".join(f"{label} (x{f:.3g})" for label, f in factors) or "none known from headers"
    whole = _near_whole(loss_ratio, config.factor_tolerance)
    if headerless is not None and whole is not None and acc_small:
        return (
            f"{head} is close to x{whole}, a typical loss-normalisation factor (data-parallel size "
            f"or gradient accumulation), but the {headerless} regime has no run_start header to "
            f"confirm it; acc barely moved ({acc_text}), so most likely the two scripts normalise "
            "the loss differently, not a change in the model"
        ), None
    if acc_small:
        return (
            f"{head} matches no normalisation factor in the configs ({tried}); acc barely moved "
            f"({acc_text}), so a normalisation the headers do not record is likely"
        ), None
    return (
        f"{head} matches no normalisation factor in the configs ({tried}); with acc {acc_text} "
        "this looks like a real change in training"
    ), None


def measure_boundary(
    before: pl.DataFrame,
    after: pl.DataFrame,
    regime_before: Regime,
    regime_after: Regime,
    config: CompareConfig,
) -> Boundary:
    """Loss ratio and acc delta between the last K steps of ``before`` and the first K of
    ``after`` (K in steps, so a log written every 10 steps compares K/10 entries)."""
    step = regime_after.start_step
    last = int(before["step"][-1])
    first = int(after["step"][0])
    tail = before.filter(pl.col("step") > last - config.k)
    head = after.filter(pl.col("step") < first + config.k)
    lb, la = mean_loss(tail), mean_loss(head)
    ab, aa = mean_acc(tail), mean_acc(head)
    ratio = la / lb if lb is not None and la is not None and lb != 0 else None
    delta = aa - ab if aa is not None and ab is not None else None
    wb, wa = _weighted_loss(tail), _weighted_loss(head)
    per_token = wa / wb if wb and wa is not None else None
    factors = normalisation_factors(
        regime_before.config,
        regime_after.config,
        regime_before.tokens_per_step,
        regime_after.tokens_per_step,
    )
    headerless = next((r.name for r in (regime_before, regime_after) if r.config is None), None)
    text, matched = explain_boundary(step, ratio, delta, factors, config, headerless)
    return Boundary(
        step=step,
        loss_ratio=ratio,
        acc_delta=delta,
        explanation=text,
        matched=matched,
        loss_before=lb,
        loss_after=la,
        acc_before=ab,
        acc_after=aa,
        n_before=tail.height,
        n_after=head.height,
        per_token_loss_ratio=per_token,
    )


def compare_regimes(
    frame: pl.DataFrame,
    headers: Sequence[Mapping[str, Any]] = (),
    config: CompareConfig | None = None,
    *,
    trend: TrendFn | None = None,
) -> RegimeComparison:
    """Find the regimes of one log and measure every boundary between them.

    Args:
        frame: metrics after restart resolution, step order (see the module docstring).
        headers: the ``run_start`` headers' fields, which the frame's ``run`` column indexes.
        config: K and tolerances; defaults to `CompareConfig()`.
        trend: ``trend(rows, column) -> slope per 1k steps`` for each regime; by default
            `regime_trend` over ``config.window``-step windows.

    Returns:
        A `RegimeComparison`; ``boundaries`` is empty when the log holds one regime.
    """
    config = config or CompareConfig()
    if trend is None:

        def trend(rows: pl.DataFrame, column: str) -> float | None:
            return regime_trend(rows, column, config.window)

    found, split_on = find_regimes(frame, headers, trend=trend)
    boundaries = [
        measure_boundary(rows_a, rows_b, reg_a, reg_b, config)
        for (reg_a, rows_a), (reg_b, rows_b) in itertools.pairwise(found)
    ]
    return RegimeComparison(
        regimes=[r for r, _ in found], boundaries=boundaries, split_on=split_on, k=config.k
    )


# --------------------------------------------------------------------------------------------
# two runs, aligned on steps or on tokens seen


@dataclass(frozen=True)
class AlignedWindow:
    """One x window of two runs side by side; ``*_diff`` is run B minus run A."""

    start: float
    end: float
    n_a: int
    n_b: int
    loss_a: float | None
    loss_b: float | None
    loss_diff: float | None
    acc_a: float | None
    acc_b: float | None
    acc_diff: float | None


@dataclass(frozen=True)
class RunAlignment:
    """Two runs binned on a shared x axis (``step`` or ``tokens`` seen)."""

    x: str
    width: float
    names: tuple[str, str]
    windows: list[AlignedWindow]
    tokens_source: tuple[str | None, str | None] = (None, None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "x": self.x,
            "width": self.width,
            "runs": list(self.names),
            "tokens_source": list(self.tokens_source),
            "windows": [asdict(w) for w in self.windows],
        }


def tokens_seen(frame: pl.DataFrame, tokens_per_step: float | None = None) -> tuple[pl.Series, str]:
    """Tokens trained on before each row's step, counted from the run's first step (so the first
    row is at 0 and a window of N steps holds N rows, as on the step axis).

    Uses ``n_tokens`` times the step gap since the previous row (a log written every 10 steps
    stands for 10 steps of tokens; a missing value takes the run's mean), else ``tokens_per_step``
    times the steps elapsed.

    Raises:
        ValueError: when neither ``n_tokens`` nor ``tokens_per_step`` is available.
    """
    steps = frame["step"].cast(pl.Float64)
    gaps = steps.diff().fill_null(1.0)
    if "n_tokens" in frame.columns:
        n = frame["n_tokens"].cast(pl.Float64, strict=False)
        n = n.set(~n.is_finite().fill_null(False), None) if n.len() else n
        if n.drop_nulls().len():
            n = n.fill_null(n.drop_nulls().mean())
            return ((n * gaps).cum_sum() - n).alias("tokens"), "n_tokens"
    if tokens_per_step:
        return ((steps - steps[0]) * tokens_per_step).alias("tokens"), "tokens_per_step"
    raise ValueError(
        "cannot align on tokens: the log has no n_tokens and no token budget in a run_start header"
    )


def _bin_means(frame: pl.DataFrame, x: pl.Series, origin: float, width: float) -> pl.DataFrame:
    weighted = "n_pred" in frame.columns and frame["n_pred"].null_count() == 0
    w = frame["n_pred"].cast(pl.Float64) if weighted else pl.Series([1.0] * frame.height)
    loss = frame["loss"].cast(pl.Float64, strict=False) if "loss" in frame.columns else None
    acc = frame["acc"].cast(pl.Float64, strict=False) if "acc" in frame.columns else None
    data = pl.DataFrame(
        {
            "bin": ((x - origin) / width).floor().cast(pl.Int64),
            "loss": loss
            if loss is not None
            else pl.Series([None] * frame.height, dtype=pl.Float64),
            "acc": acc if acc is not None else pl.Series([None] * frame.height, dtype=pl.Float64),
            "w": w,
        }
    )
    finite_loss = pl.col("loss").is_finite().fill_null(False)
    finite_acc = pl.col("acc").is_finite().fill_null(False)
    return data.group_by("bin").agg(
        pl.len().alias("n"),
        pl.col("loss").filter(finite_loss).mean().alias("loss"),
        (
            (pl.col("acc") * pl.col("w")).filter(finite_acc).sum()
            / pl.col("w").filter(finite_acc).sum()
        ).alias("acc"),
    )


def align_runs(
    run_a: pl.DataFrame,
    run_b: pl.DataFrame,
    *,
    x: str = "step",
    window: int = 50,
    names: tuple[str, str] = ("A", "B"),
    tokens_per_step: tuple[float | None, float | None] = (None, None),
) -> RunAlignment:
    """Bin two runs on a shared axis and put their windows side by side.

    Args:
        run_a, run_b: metrics after restart resolution, step order.
        x: "step" (windows of ``window`` steps aligned to the earlier first step) or "tokens"
            (tokens seen since each run's start; windows of ``window`` times run A's mean tokens
            per step, so a window spans about as much training as ``window`` steps of run A).
        window: window width in steps of run A.
        names: labels of the two runs.
        tokens_per_step: per-run fallback when a log has no ``n_tokens`` (from its header).

    Returns:
        A `RunAlignment` with one row per window holding data from either run.

    Raises:
        ValueError: for an unknown ``x``, a bad window, empty runs, or tokens that cannot be counted.
    """
    if x not in ("step", "tokens"):
        raise ValueError(f"--x must be 'step' or 'tokens', got {x!r}")
    if window < 1:
        raise ValueError(f"--window must be at least 1, got {window}")
    if run_a.is_empty() or run_b.is_empty():
        raise ValueError("both runs need at least one metrics record to be compared")
    sources: tuple[str | None, str | None] = (None, None)
    if x == "step":
        xa, xb = run_a["step"].cast(pl.Float64), run_b["step"].cast(pl.Float64)
        origin = float(min(xa[0], xb[0]))
        width = float(window)
    else:
        (xa, sa), (xb, sb) = (
            tokens_seen(run_a, tokens_per_step[0]),
            tokens_seen(run_b, tokens_per_step[1]),
        )
        sources = (sa, sb)
        span = float(run_a["step"][-1] - run_a["step"][0])
        per_step_a = float(xa[-1]) / span if span > 0 else float(tokens_per_step[0] or 1.0)
        origin, width = 0.0, window * per_step_a
    bins_a = _bin_means(run_a, xa, origin, width)
    bins_b = _bin_means(run_b, xb, origin, width)
    joined = bins_a.join(bins_b, on="bin", how="full", coalesce=True, suffix="_b").sort("bin")
    out = []
    for row in joined.iter_rows(named=True):
        la, lb, aa, ab = row["loss"], row["loss_b"], row["acc"], row["acc_b"]
        out.append(
            AlignedWindow(
                start=origin + row["bin"] * width,
                end=origin + (row["bin"] + 1) * width,
                n_a=row["n"] or 0,
                n_b=row["n_b"] or 0,
                loss_a=la,
                loss_b=lb,
                loss_diff=lb - la if la is not None and lb is not None else None,
                acc_a=aa,
                acc_b=ab,
                acc_diff=ab - aa if aa is not None and ab is not None else None,
            )
        )
    return RunAlignment(x=x, width=width, names=names, windows=out, tokens_source=sources)
