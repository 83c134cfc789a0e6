"""The options the ``dflash-diag`` commands share, each declared once.

:data:`OPTIONS` is the table: per option its parameter name, flags, type, default, help text,
typer's own range (``min=``) and the config field it feeds (``diagnosis.verdict.alpha``: the
``alpha`` of :class:`~dflash_diag.analysis.diagnosis.DiagnosisConfig`'s ``verdict``). From it come

* the typer parameters of every command (:func:`command`: a command lists the options it takes,
  in help order, beside its own parameters; a :class:`Group` stands for every option of the
  group it does not place itself, so a new knob in ``TUNING`` reaches all three commands);
* the range check of every number a command takes (:func:`check_numbers`, its own options too);
* the configs (:meth:`Given.diagnosis`, :meth:`Given.read`), built from the ``feeds`` paths.

So a new analysis knob is one :class:`Option` here (with its field in the config it feeds).
Defaults come from :mod:`dflash_diag.analysis.defaults`, as the configs' own do, and the option
ranges (``--alpha`` in (0, 1), ...) stay with the configs that use them. Kept free of polars and of
the analysis modules: ``dflash-diag --help`` imports this.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import typer

from dflash_diag.analysis import defaults
from dflash_diag.cli.common import PhaseChoice, ScheduleChoice, fail, user_errors
from dflash_diag.cli.validate import check_numbers
from dflash_diag.read.formats import registry as formats
from dflash_diag.read.presets import PRESETS

if TYPE_CHECKING:  # imported when a command runs (polars): --help stays fast
    from dflash_diag.analysis.diagnosis import DiagnosisConfig
    from dflash_diag.read.formats.load import ReadOptions


def parse_window(value: str | int | None) -> int | None:
    """``--window``: a positive step count, or None for ``auto``; anything else is a usage
    error (one line, exit 2)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return None
    try:
        size = int(value)
    except ValueError:
        fail(f"--window must be a number of steps or auto, got {value!r}")
    if not 1 <= size < 2**53:
        fail(f"--window must be at least 1 (and below 2^53), got {size}")
    return size


def _value(choice: Any) -> Any:
    """A choice enum's string (None stays None)."""
    return choice.value if choice is not None else None


def _strings(values: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(values or ())


def _negate(flag: bool) -> bool:
    return not flag


@dataclass(frozen=True)
class Option:
    """One shared option.

    Attributes:
        name: the parameter name (what the command and :class:`Given` call it).
        decls: its flags as typer takes them (``"--noise-aware/--no-noise-aware"``, ``"-w"``).
        type: the value's type (``float | None`` where None means "not given").
        default: the value when the flag is not given.
        help: the ``--help`` text.
        group: its group (:data:`SELECTION`, :data:`TUNING`, :data:`READING`): a command takes
            a group whole through a :class:`Group` in its layout, or names the members it takes.
        feeds: where the value goes: ``<config>.<field>[.<field>]`` (``diagnosis.trend.
            acc_threshold``), or None when the command reads it from :class:`Given` itself.
        convert: turns the parsed value into the config field's (an enum into its string).
        metavar: the value's name in ``--help`` (``""`` for a flag: no ``<bool>``).
        min: typer's lower bound (shown in ``--help``).
    """

    name: str
    decls: tuple[str, ...]
    type: Any
    default: Any
    help: str
    group: str
    feeds: str | None = None
    convert: Callable[[Any], Any] | None = None
    metavar: str | None = None
    min: float | None = None

    def parameter(self) -> inspect.Parameter:
        """The typer parameter of this option (keyword-only, ``Annotated`` with its ``Option``)."""
        extra: dict[str, Any] = {}
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        if self.min is not None:
            extra["min"] = self.min
        info = typer.Option(*self.decls, help=self.help, **extra)
        return inspect.Parameter(
            self.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=self.default,
            annotation=Annotated[self.type, info],
        )


#: Groups of :data:`OPTIONS`: which records are analysed (each command places these itself),
#: the analysis knobs, and how the inputs are read.
SELECTION, TUNING, READING = "selection", "tuning", "reading"

OPTIONS: tuple[Option, ...] = (
    # -- which records are analysed
    Option(
        "phase",
        ("--phase",),
        PhaseChoice,
        PhaseChoice.AUTO,
        "auto: the pipeline entries (tok_per_sec, or a run_start with "
        "script pipeline) when there are any, else all.",
        SELECTION,
        feeds="diagnosis.phase",
        convert=_value,
    ),
    Option(
        "from_step",
        ("--from-step",),
        int | None,
        None,
        "First step analysed; windows align to it.",
        SELECTION,
        feeds="diagnosis.from_step",
    ),
    Option(
        "to_step",
        ("--to-step",),
        int | None,
        None,
        "Last step analysed (inclusive).",
        SELECTION,
        feeds="diagnosis.to_step",
    ),
    Option(
        "window",
        ("--window", "-w"),
        str,
        "auto",
        "Steps per window; auto (the default): 5 records of the logging interval, 50 steps for "
        "a log written every step; fewer for a short log (10 windows).",
        SELECTION,
        feeds="diagnosis.window",
        convert=parse_window,
        metavar="STEPS|auto",
    ),
    Option(
        "keep_all",
        ("--keep-all/--no-keep-all",),
        bool,
        False,
        "Keep entries orphaned by restarts (default: later entries replace them).",
        SELECTION,
        feeds="diagnosis.keep_all",
        metavar="",
    ),
    # -- the analysis knobs (every command takes all of them)
    Option(
        "threshold",
        ("--threshold",),
        float,
        defaults.ACC_THRESHOLD,
        "Accuracy change (absolute) within which the arrow is flat.",
        TUNING,
        feeds="diagnosis.trend.acc_threshold",
        min=0.0,
    ),
    Option(
        "loss_threshold",
        ("--loss-threshold",),
        float,
        defaults.LOSS_THRESHOLD,
        "Loss change (fraction of the previous loss) within which the arrow is flat.",
        TUNING,
        feeds="diagnosis.trend.loss_threshold",
        min=0.0,
    ),
    Option(
        "noise_aware",
        ("--noise-aware/--no-noise-aware",),
        bool,
        False,
        "Flat within the standard error of the difference instead of the thresholds.",
        TUNING,
        feeds="diagnosis.trend.noise_aware",
        metavar="",
    ),
    Option(
        "peak_lr",
        ("--peak-lr",),
        float | None,
        None,
        "Peak lr when the run_start header gives none (else the largest lr seen).",
        TUNING,
        feeds="diagnosis.peak_lr",
    ),
    Option(
        "block_size",
        ("--block-size",),
        int | None,
        None,
        f"Block size B (default: the header's, else {defaults.BLOCK_SIZE}).",
        TUNING,
        feeds="diagnosis.acceptance.block_size",
    ),
    Option(
        "target_acc",
        ("--target-acc",),
        float,
        defaults.TARGET_ACC,
        "Target accuracy: progress is acc / target acc.",
        TUNING,
        feeds="diagnosis.acceptance.target_acc",
    ),
    Option(
        "target_tau",
        ("--target-tau",),
        float | None,
        None,
        "Target acceptance length instead: progress is (tau-1)/(target-1) of the primary estimate.",
        TUNING,
        feeds="diagnosis.acceptance.target_tau",
    ),
    Option(
        "baseline_tau",
        ("--baseline-tau",),
        float | None,
        None,
        f"Reference drafter's acceptance length (default {defaults.BASELINE_TAU:g}, the "
        "original analysis').",
        TUNING,
        feeds="diagnosis.acceptance.baseline_tau",
    ),
    Option(
        "target_loss",
        ("--target-loss",),
        float | None,
        None,
        "Target training loss: the ETA is to this loss instead of the acc/tau target.",
        TUNING,
        feeds="diagnosis.forecast.target_loss",
    ),
    Option(
        "end_step",
        ("--end-step",),
        int | None,
        None,
        "Planned last step of the run, for the forecast (default: the header's total "
        "steps or HF's max_steps; without one the forecast looks ahead as far as the log goes).",
        TUNING,
        feeds="diagnosis.forecast.end_step",
    ),
    Option(
        "schedule",
        ("--schedule",),
        ScheduleChoice | None,
        None,
        "lr shape after warmup where the log records none, for the forecast "
        "(default: the header's, else matched to the logged lr).",
        TUNING,
        feeds="diagnosis.forecast.schedule",
        convert=_value,
    ),
    Option(
        "alpha",
        ("--alpha",),
        float,
        defaults.ALPHA,
        "Significance level of the verdict's trend test.",
        TUNING,
        feeds="diagnosis.verdict.alpha",
    ),
    # -- how the inputs are read
    Option(
        "fields",
        ("--field",),
        list[str] | None,
        None,
        "Map a log field onto a canonical one, NEW=OLD (e.g. acc=train/acc; "
        "acc_pos=train/acc_{i} assembles numbered keys). N:NEW=OLD maps it for the N-th "
        "input only. Repeatable. When nothing maps, the error names the series found "
        "and the --field line to give.",
        READING,
        feeds="read.field_specs",
        convert=_strings,
        metavar="NEW=OLD",
    ),
    Option(
        "input_format",
        ("--input-format",),
        str | None,
        None,
        f"Read every input as this format instead of telling it by content: {formats.supported()}.",
        READING,
        feeds="read.input_format",
        metavar="FORMAT",
    ),
    Option(
        "preset",
        ("--preset",),
        list[str] | None,
        None,
        "Another trainer's metric names and conventions: "
        f"{', '.join(PRESETS)}, or auto (detect; the default). Names no preset "
        "covers are looked up in one alias table (loss, train_loss, train_loss_step, "
        "val_loss, lr-Adam...: docs/formats.md). Once for all inputs, or once per "
        "input in order.",
        READING,
        feeds="read.presets",
        convert=_strings,
        metavar="NAME",
    ),
    Option(
        "strict",
        ("--strict/--no-strict",),
        bool,
        False,
        "Malformed lines are an error, not skipped.",
        READING,
        metavar="",
    ),
    Option(
        "no_cache",
        ("--no-cache",),
        bool,
        False,
        "Parse every log whole: the parsed-log cache is neither read nor written.",
        READING,
        feeds="read.cache",
        convert=_negate,
        metavar="",
    ),
)

#: The table by parameter name.
BY_NAME: dict[str, Option] = {option.name: option for option in OPTIONS}


@dataclass(frozen=True)
class Group:
    """In a command's layout: every option of ``name`` the layout does not place itself, in
    table order."""

    name: str


def build_config(cls: type, values: Mapping[str, Any]) -> Any:
    """A config dataclass from ``{"field": value, "sub.field": value}``: a dotted path fills a
    field of the nested config (``trend.acc_threshold``), the other fields keep their defaults.

    Raises:
        ValueError: the configs' own validation.
    """
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[head] = value
    kinds = {f.name: f for f in dataclasses.fields(cls)}
    for head, parts in nested.items():
        factory = kinds[head].default_factory
        assert factory is not dataclasses.MISSING, f"{cls.__name__}.{head} is no nested config"
        flat[head] = build_config(type(factory()), parts)
    return cls(**flat)


@dataclass(frozen=True)
class Given:
    """The shared options one command was given, by parameter name (``given["strict"]``)."""

    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def fed(self, config: str) -> dict[str, Any]:
        """The values that feed ``config`` ("diagnosis", "read"), by field path, converted."""
        out = {}
        for name, value in self.values.items():
            option = BY_NAME[name]
            if option.feeds is None or not option.feeds.startswith(config + "."):
                continue
            converted = option.convert(value) if option.convert is not None else value
            out[option.feeds.removeprefix(config + ".")] = converted
        return out

    def diagnosis(self) -> DiagnosisConfig:
        """The :class:`~dflash_diag.analysis.diagnosis.DiagnosisConfig` of these options; a bad
        value is a usage error (one line, exit 2)."""
        from dflash_diag.analysis.diagnosis import DiagnosisConfig

        fed = self.fed("diagnosis")  # --window is parsed (its own usage error) first
        try:
            return build_config(DiagnosisConfig, fed)
        except ValueError as exc:
            fail(str(exc))

    def read(self) -> ReadOptions:
        """The :class:`~dflash_diag.read.formats.load.ReadOptions` of these options."""
        from dflash_diag.read.formats.load import ReadOptions

        return build_config(ReadOptions, self.fed("read"))


Layout = Sequence["str | Group"]


def _expand(layout: Layout) -> list[str]:
    placed = {item for item in layout if isinstance(item, str)}
    names: list[str] = []
    for item in layout:
        if isinstance(item, Group):
            names += [o.name for o in OPTIONS if o.group == item.name and o.name not in placed]
        else:
            names.append(item)
    return names


def _flag(param: Any) -> str:
    """A click parameter's first long flag (``--window`` of ``--window/-w``)."""
    return next((o for o in param.opts if o.startswith("--")), param.opts[0])


def command(*layout: str | Group) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the shared options of ``layout`` beside its own parameters.

    ``layout`` is the command's ``--help`` order: its own parameter names and shared option
    names, a :class:`Group` standing for the rest of a group. The command takes a keyword
    ``options: Given`` in place of the shared ones. Every number it is given (its own options
    too) is checked by :func:`check_numbers` before it runs.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        # keyword-only, so that the layout may put a parameter without a default after others
        own = {
            name: param.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for name, param in inspect.signature(func, eval_str=True).parameters.items()
            if name != "options"
        }
        names = _expand(layout)
        assert set(own) <= set(names), f"{func.__name__}: layout lacks {set(own) - set(names)}"
        params = [own[n] if n in own else BY_NAME[n].parameter() for n in names]
        shared = [n for n in names if n not in own]

        def run(ctx: typer.Context, **kwargs: Any) -> Any:
            with user_errors():
                check_numbers(
                    {_flag(p): kwargs.get(p.name) for p in ctx.command.params if p.name in kwargs}
                )
            given = Given({n: kwargs.pop(n) for n in shared})
            return func(**kwargs, options=given)

        context = inspect.Parameter(
            "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
        )
        # typer reads this signature (its annotations are objects, not strings to resolve)
        run.__signature__ = inspect.Signature([context, *params])  # type: ignore[attr-defined]
        for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
            setattr(run, attribute, getattr(func, attribute))
        run.__annotations__ = {}
        return run

    return decorate
