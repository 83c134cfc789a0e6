"""Reading the logs given: :func:`load_log`, and the per-input plans it follows (which reader,
which preset and field map for each log).

The JSONL reader stays the fast path for this project's own logs (and for flat JSONL whose
names a ``--field`` map renames). Anything else goes through a format reader and
:func:`~dflash_diag.read.formats.canonical.to_parsed_log`: other formats always, and JSONL
written by another trainer (nested objects, a known trainer's names, a preset asked for, or a
numbered ``acc_pos`` family to assemble).

Presets and field maps may differ per input, so ``compare`` can put two trainers side by side:
``--preset`` given once applies to every input, given once per input applies in order; a
``--field N:NEW=OLD`` applies to the N-th input only (1-based), a plain ``NEW=OLD`` to all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.files import can_reread, check_log_path, open_input
from dflash_diag.read.formats.detect import (
    FORMATS,
    HEAD_BYTES,
    check_format,
    detect_format,
    folder_formats,
    read_scalars,
)
from dflash_diag.read.formats.foreign_jsonl import has_foreign_events, sample_keys
from dflash_diag.read.jsonl import parse_records, parse_stream
from dflash_diag.read.presets import PRESETS, Preset, detect_preset, get_preset
from dflash_diag.read.records import LogEvent, ParsedLog, ParseIssues
from dflash_diag.text import visible

if TYPE_CHECKING:
    from dflash_diag.read.formats.canonical import Scalars

#: ``--preset`` value meaning "detect from the field names" (the default).
AUTO = "auto"
_PER_FILE = re.compile(r"^(\d+):(.*)$")


@dataclass
class InputPlan:
    """How one input is read.

    Attributes:
        path: the input as given.
        format: its ``--input-format`` value (given or detected).
        native: read by the fast JSONL reader (this project's schema, flat names).
        preset: the preset asked for (None: detect one).
        fields: the field map for this input.
        alternatives: the other formats a folder holds (each is read too; the richest wins).
    """

    path: str
    format: str
    native: bool
    preset: Preset | None = None
    fields: dict[str, str] = field(default_factory=dict)
    alternatives: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """``read as TensorBoard`` (for the native path: JSONL, the log schema)."""
        return f"read as {FORMATS[self.format].display}"


def split_per_input(
    n_inputs: int,
    presets: Sequence[str] | None,
    fields: Sequence[str] | None,
) -> tuple[list[str | None], list[list[str]]]:
    """Per-input presets and field specs from the CLI's repeatable options.

    Raises:
        DiagError: a preset count that is neither 1 nor the number of inputs, an unknown preset,
            or a ``N:`` prefix beyond the inputs.
    """
    presets = list(presets or [])
    for name in presets:
        if name != AUTO and name not in PRESETS:
            raise DiagError(f"unknown preset {name!r} (known: {', '.join(PRESETS)}, {AUTO})")
    if not presets:
        per_preset: list[str | None] = [None] * n_inputs
    elif len(presets) == 1:
        per_preset = [None if presets[0] == AUTO else presets[0]] * n_inputs
    elif len(presets) == n_inputs:
        per_preset = [None if p == AUTO else p for p in presets]
    else:
        raise DiagError(
            f"{len(presets)} --preset values for {n_inputs} inputs: give one for all "
            "or one per input, in order ('auto' detects)"
        )
    per_fields: list[list[str]] = [[] for _ in range(n_inputs)]
    for spec in fields or []:
        match = _PER_FILE.match(spec)
        if match:
            index = int(match.group(1))
            if not 1 <= index <= n_inputs:
                raise DiagError(f"--field {spec}: input {index} of {n_inputs}")
            per_fields[index - 1].append(match.group(2))
        else:
            for specs in per_fields:
                specs.append(spec)
    return per_preset, per_fields


def plan_input(
    path: str,
    *,
    input_format: str | None = None,
    preset: str | None = None,
    fields: Mapping[str, str] | None = None,
) -> InputPlan:
    """Decide how to read ``path`` (``-`` is standard input: always JSONL).

    Raises:
        DiagError: a missing path, an unknown or undetectable format.
    """
    fields = dict(fields or {})
    chosen = get_preset(preset) if preset else None
    if path == "-":
        fmt = check_format(input_format) if input_format else "jsonl"
        if fmt != "jsonl":
            raise DiagError(f"standard input is read as JSONL only, not {fmt}")
        return InputPlan(path, fmt, native=chosen is None, preset=chosen, fields=fields)
    if not os.path.isdir(path):
        check_log_path(path)  # a missing file, a symlink loop, no permission: one precise line
        if not os.path.isfile(path):
            # a named pipe or a device: opening it to look would block or consume it; the JSONL
            # reader knows how to wait for a pipe's writer
            fmt = check_format(input_format) if input_format else "jsonl"
            if fmt != "jsonl":
                raise DiagError(f"{path}: a pipe is read as JSONL only, not {fmt}")
            return InputPlan(path, fmt, native=chosen is None, preset=chosen, fields=fields)
    alternatives: tuple[str, ...] = ()
    if input_format:
        fmt = check_format(input_format)
    elif os.path.isdir(path) and len(found := folder_formats(Path(path))) > 1:
        fmt, alternatives = found[0], tuple(found[1:])
    else:
        fmt = detect_format(path)
    native = fmt == "jsonl" and chosen is None and not _foreign_jsonl(Path(path), fields)
    return InputPlan(
        path, fmt, native=native, preset=chosen, fields=fields, alternatives=alternatives
    )


def _foreign_jsonl(path: Path, fields: Mapping[str, str]) -> bool:
    """Whether a JSONL file needs the record-by-record reader (see the module docstring)."""
    if path.is_dir():
        return True
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return False  # the JSONL reader reports it
    if head[:2] == b"\x1f\x8b":
        return False  # compressed: this project's own logs
    if len(head) < HEAD_BYTES and not head.endswith(b"\n"):
        head += b"\n"  # the whole file: its last line (a one-line file's only one) is complete
    if head.startswith((b"\x00", b"\xef\xbb\xbf")) or has_foreign_events(head):
        return True  # a zero-filled or BOM start, another trainer's "event" records
    keys, nested = sample_keys(head)
    if nested or detect_preset(keys) is not None:
        return True
    if keys and not _native_names(keys):
        return True  # another trainer's names (train_loss, current_steps...): the alias table
    # acc_pos mapped to a family of numbered scalar keys (not to a list field): assembled here
    list_map = fields.get("acc_pos")
    return list_map is not None and keys.get(list_map) is not list


def _native_names(keys: Mapping[str, type]) -> bool:
    """Whether sampled keys are this project's schema: a ``step``, a metric name of its own,
    and no other trainer's alias of one (``train_loss``, ``val_loss``: the alias table)."""
    from dflash_diag.logschema import METRIC_LISTS, METRIC_MAPS, METRIC_NUMBERS
    from dflash_diag.read.aliases import is_alias

    own = {*METRIC_NUMBERS, *METRIC_LISTS, *METRIC_MAPS}
    return (
        "step" in keys
        and any(k in keys for k in METRIC_NUMBERS if k not in ("step", "time", "epoch"))
        and not any(is_alias(k) for k in keys if k not in own)
    )


def read_planned(
    plan: InputPlan, source: int, *, strict: bool = False, cache: bool = False
) -> ParsedLog:
    """Read a non-native input into a canonical :class:`ParsedLog` (``source`` stamped).

    A folder holding several sources (:attr:`InputPlan.alternatives`) is read as each; the one
    with the most records (train and eval) wins, ties to the first, and a note says what was
    read and what else the folder held. When none reads, the error says what each one gave.

    Raises:
        DiagError: the reader's one-line error.
    """
    if not plan.alternatives:
        return _read_as(plan, plan.format, source, strict, cache)
    tried: list[tuple[str, ParsedLog | None, str]] = []
    for fmt in (plan.format, *plan.alternatives):
        try:
            tried.append((fmt, _read_as(plan, fmt, source, strict), ""))
        except DiagError as exc:
            tried.append((fmt, None, str(exc)))
    read = [(fmt, log) for fmt, log, _ in tried if log is not None]
    if not read:
        raise DiagError(
            f"{plan.path}: a folder holding {len(tried)} sources, none readable: "
            + " | ".join(f"{FORMATS[fmt].display}: {message}" for fmt, _, message in tried)
        )
    fmt, best = max(read, key=lambda fl: _richness(fl[1]))  # max keeps the first of equals
    others = ", ".join(
        f"{FORMATS[f].display} ({_richness(log)[0]} records)"
        if log is not None
        else f"{FORMATS[f].display} (unreadable)"
        for f, log, _ in tried
        if f != fmt
    )
    best.notes.insert(
        1,
        f"{plan.path}: the folder holds {FORMATS[fmt].display} and {others}: read "
        f"{FORMATS[fmt].display} ({_richness(best)[0]} records; give --input-format "
        "or a path inside to read another)",
    )
    return best


def _richness(log: ParsedLog) -> tuple[int, int]:
    """Metric records, then eval events: which of a folder's sources holds more."""
    return log.metrics.height, sum(1 for e in log.events if e.kind == "eval")


#: Canonical columns that say whether a run learns (one of them must hold a value).
_PROGRESS = ("loss", "acc", "acc_pos", "tau_train", "walk_tokens")


def _has_progress(log: ParsedLog) -> bool:
    metrics = log.metrics
    return metrics.height > 0 and any(
        name in metrics.columns and metrics[name].null_count() < metrics.height
        for name in _PROGRESS
    )


def _foreign_jsonl_scalars(plan: InputPlan, *, strict: bool) -> Scalars:
    """A foreign JSONL file's scalars: polars' scan where it gives the line reader's records
    exactly, else the line reader's."""
    from dflash_diag.read.formats.foreign_jsonl import FORMAT, STEP_KEYS, read_foreign_jsonl
    from dflash_diag.read.formats.foreign_jsonl_scan import read_foreign_jsonl_scan

    # a wide piece's own "step" column is no key, so a map naming that key takes the lines
    fast = (
        None
        if plan.fields.get("step") == "step"
        else read_foreign_jsonl_scan(plan.path, FORMAT, STEP_KEYS)
    )
    return fast or read_foreign_jsonl(plan.path, strict=strict)


def _cached_foreign_jsonl(plan: InputPlan) -> Scalars:
    """:func:`_foreign_jsonl_scalars` through the scalars cache (a grown log: its new lines)."""
    import json

    from dflash_diag.read.formats.foreign_jsonl import (
        FORMAT,
        STEP_KEYS,
        _is_epoch_summary,
        is_own_event,
        read_foreign_jsonl,
    )
    from dflash_diag.read.formats.foreign_jsonl_scan import read_foreign_jsonl_scan
    from dflash_diag.read.scalars_cache import cached_scalars

    def parse_tail(path: Path, wide: bool) -> Scalars | None:
        if wide:
            return read_foreign_jsonl_scan(path, FORMAT, STEP_KEYS)
        return read_foreign_jsonl(path)

    def may_continue(data: bytes) -> bool:
        # the line reader's one state: the step of the record before, read when a record
        # repeats it and may be an epoch summary; the first new record must not need it
        for raw in data.split(b"\n"):
            raw = raw.lstrip(b"\x00")
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(record, dict) and not is_own_event(record):
                return not _is_epoch_summary(record)
        return True

    return cached_scalars(
        plan.path,
        options={"fields": sorted(plan.fields.items())},
        parse_whole=lambda: _foreign_jsonl_scalars(plan, strict=False),
        parse_tail=parse_tail,
        may_continue=may_continue,
    )


def _read_as(
    plan: InputPlan, fmt: str, source: int, strict: bool, cache: bool = False
) -> ParsedLog:
    import polars as pl

    from dflash_diag.read.formats.canonical import to_parsed_log

    def read() -> Scalars:
        if fmt != "jsonl":
            return read_scalars(plan.path, fmt)
        try:
            if cache and not strict:
                return _cached_foreign_jsonl(plan)
            return _foreign_jsonl_scalars(plan, strict=strict)
        except DiagError:
            raise
        except (OSError, ValueError) as exc:
            raise DiagError(f"{plan.path}: {exc}") from None

    scalars = read()
    try:
        # released: the reader's wide pieces are freed as the records are built from them
        canonical = to_parsed_log(
            scalars, source=source, preset=plan.preset, fields=plan.fields, release=True
        )
    except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001
        # the same rule as the readers': one line naming the input, never a traceback
        raise DiagError(
            f"{plan.path}: cannot assemble its records "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})"
        ) from None
    log = canonical.log
    if scalars.issues.lines and not _has_progress(log):
        # records of lr, epoch or throughput only: nothing says whether the run learns (the
        # line names the series read: read again, the canonical build released them)
        raise DiagError(nothing_maps_message(plan.path, canonical, read()))
    if not scalars.issues.lines and fmt != "jsonl":
        what = (
            "no progress line (a step or an epoch with name: number pairs)"
            if fmt == "console"
            else "no records"
        )
        raise DiagError(f"{plan.path}: {canonical.description}: {what} in it")
    log.sources = [plan.path]
    log.notes = [f"{plan.path}: {canonical.description}"] + [
        f"{plan.path}: {note}" for note in canonical.notes
    ]
    return log


#: Numeric series named in the "nothing maps" line (the rest are counted).
_SHOWN_SERIES = 8


def nothing_maps_message(path: str, canonical, scalars) -> str:
    """The one line for a log read whole in which no series maps to a training metric: what was
    read (and what else was tried), the numeric series found, and the ``--field`` line that
    would map them."""
    import polars as pl

    from dflash_diag.read.aliases import STEP, is_validation

    frame = scalars.long_frame() if scalars.wide else scalars.frame
    counts = (
        frame.group_by("key").agg(pl.len().alias("n")).sort("n", "key", descending=[True, False])
        if frame.height
        else None
    )
    metric_like = counts is not None and any(
        "loss" in k.lower() or "acc" in k.lower() for k in counts["key"].to_list()
    )
    # without a loss or accuracy there is nothing a step would help to read: the general line
    if (
        metric_like
        and canonical.log.issues.without_step
        and not frame.filter(pl.col("step").is_not_null()).height
    ):
        found = ", ".join(counts["key"].to_list()[:_SHOWN_SERIES]) if counts is not None else ""
        return f"no record has a 'step' field in {path} (map one with --field step=NAME" + (
            f"; numeric series found: {found})" if found else ")"
        )
    head = f"{path}: {canonical.description}: no series maps to loss or acc"
    # records left out for their step (out of range) explain an empty log better than the series
    notes = [
        *canonical.log.issues.reader_notes(),
        *(n for n in canonical.notes if not n.startswith("never in the log")),
    ]
    if notes:
        head += f" ({'; '.join(notes)})"
    if counts is None or counts.height == 0:
        return head + "; the log holds no numeric series"
    keys = [k for k in counts["key"].to_list() if k not in STEP]
    if not keys:
        return (
            head
            + f"; its only numeric series: {', '.join(counts['key'].to_list()[:_SHOWN_SERIES])}"
        )
    shown = ", ".join(
        f"{k} ({n})"
        for k, n in counts.filter(pl.col("key").is_in(keys)).head(_SHOWN_SERIES).iter_rows()
    )
    more = f" and {len(keys) - _SHOWN_SERIES} more" if len(keys) > _SHOWN_SERIES else ""
    validation = [k for k in keys if is_validation(k)]
    if validation and len(validation) == len([k for k in keys if "loss" in k or "acc" in k]):
        return (
            f"{head}; only validation series: {', '.join(validation[:_SHOWN_SERIES])} "
            "(no training loss or accuracy; they are read as evals)"
        )
    # a run's closing summary (HF's train_loss over the whole run) is no curve to map
    curves = [k for k in keys if not k.startswith(("summary/", "epoch_summary/"))]
    loss_like = next((k for k in curves if "loss" in k.lower()), None)
    acc_like = next((k for k in curves if "acc" in k.lower()), None)
    if loss_like is None and acc_like is None:
        return (
            f"{head}; numeric series found: {shown}{more} (none looks like a loss or an "
            "accuracy); map one with --field loss=NAME"
        )
    suggestion = " ".join(
        f"--field {c}={k}" for c, k in (("loss", loss_like), ("acc", acc_like)) if k is not None
    )
    return f"{head}; numeric series found: {shown}{more}; map them: {suggestion}"


def missing_mapped_fields(log: ParsedLog, fields: Mapping[str, str]) -> list[str]:
    """``--field`` maps of a natively read log whose field never holds a value."""
    missing = []
    from dflash_diag.logschema import METRIC_LISTS

    for canonical, name in fields.items():
        if (
            canonical in log.metrics.columns
            and canonical not in ("step", *METRIC_LISTS)
            and log.metrics.height
            and log.metrics[canonical].null_count() == log.metrics.height
        ):
            missing.append(f"{canonical}={name}")
    return missing


class LoadKwargs(TypedDict):
    """The reading options of :func:`load_log`, from :meth:`ReadOptions.load_kwargs`."""

    input_format: str | None
    presets: list[str | None]
    per_input_fields: list[dict[str, str]]
    fields: dict[str, str]
    cache: bool


@dataclass(frozen=True)
class ReadOptions:
    """The shared reading options of every command: format, presets and field maps per input.

    Attributes:
        input_format: ``--input-format`` (None: detect per input).
        presets: ``--preset`` values as given (one for all inputs, or one per input).
        field_specs: ``--field`` specs as given (``NEW=OLD`` for all, ``N:NEW=OLD`` for input N).
        cache: read plain JSONL files through the parsed-log cache (``--no-cache``: False).
    """

    input_format: str | None = None
    presets: tuple[str, ...] = ()
    field_specs: tuple[str, ...] = ()
    cache: bool = False

    def load_kwargs(self, n_inputs: int, only: int | None = None) -> LoadKwargs:
        """Keyword arguments of :func:`load_log` for ``n_inputs`` inputs (or for input ``only``
        of them, loaded alone).

        Raises:
            DiagError: see :func:`split_per_input`, or a bad ``NEW=OLD`` spec.
        """
        from dflash_diag.read.schema import parse_field_map

        if self.input_format is not None:
            check_format(self.input_format)
        presets, specs = split_per_input(n_inputs, self.presets, self.field_specs)
        maps = [parse_field_map(s) for s in specs]
        if only is not None:
            presets, maps = [presets[only]], [maps[only]]
        return {
            "input_format": self.input_format,
            "presets": presets,
            "per_input_fields": maps,
            "fields": maps[0] if maps else {},
            "cache": self.cache,
        }


#: Share of records repeating the step of the record before them above which a log is taken to
#: be written by two processes (each step twice), not to hold that many restarts.
DUPLICATE_WRITERS_SHARE = 0.25


def drop_duplicate_writers(log: ParsedLog, name: str) -> ParsedLog:
    """A log in which (nearly) every step was written twice, by two processes that both log:
    one record per step (the later of each repeat), and one note saying so, instead of a restart
    per step. A few repeats are left to the restart rule (a resume at the step it crashed)."""
    metrics = log.metrics
    if metrics.height < 8:
        return log
    repeat = (pl.col("step") == pl.col("step").shift(1)).fill_null(False)
    repeats = int(metrics.select(repeat.sum()).item())
    if repeats < DUPLICATE_WRITERS_SHARE * metrics.height:
        return log
    later_repeat = (pl.col("step") == pl.col("step").shift(-1)).fill_null(False)
    log.metrics = metrics.filter(~later_repeat)
    log.notes.append(
        f"{name}: {repeats} records repeat the step of the record before them (two "
        "processes writing one log?): read as one record per step, the later kept"
    )
    return log


def _read_native(
    name: str,
    index: int,
    *,
    strict: bool,
    fields: Mapping[str, str],
    lists: bool,
    cache: bool,
) -> ParsedLog:
    """One input by the JSONL reader (through the cache when asked; --strict never is, as a
    cached parse has no malformed line left to raise on)."""

    def parse_whole() -> ParsedLog:
        with open_input(name) as handle:
            try:
                return parse_stream(handle, source=index, strict=strict, fields=fields, lists=lists)
            except DiagError as exc:
                message = str(exc)  # named already when the file itself could not be read
                raise DiagError(
                    message if visible(name) in message else f"{visible(name)}: {message}"
                ) from None

    if not cache or name == "-":
        return parse_whole()
    from dflash_diag.read.cache import cached_parse

    return cached_parse(
        name,
        source=index,
        fields=fields,
        extra=None,  # part of the cache's key: no extra fields are read
        lists=lists,
        parse_whole=parse_whole,
        parse_tail=lambda data, line_no: parse_records(
            data, first_line_no=line_no, source=index, fields=fields, lists=lists
        ),
    )


def load_log(
    paths: str | Path | Sequence[str | Path],
    *,
    strict: bool = False,
    fields: Mapping[str, str] | None = None,
    lists: bool = False,
    input_format: str | None = None,
    presets: Sequence[str | None] | None = None,
    per_input_fields: Sequence[Mapping[str, str]] | None = None,
    cache: bool = False,
) -> ParsedLog:
    """Read one or more logs (paths, ``.gz``, ``-`` for stdin) into one :class:`ParsedLog`.

    Every input may be of another format (TensorBoard, HF ``trainer_state.json``, MLflow, W&B,
    CSV, console text: :mod:`dflash_diag.read.formats`), told by its content unless
    ``input_format`` forces one; those are read by their readers and a preset (given per input
    in ``presets``, else detected from the field names), and come out in the same canonical
    form. ``per_input_fields`` replaces ``fields`` input by input. How each input was read, and
    any mapped field that never occurs, is in :attr:`ParsedLog.notes`.

    The per-position lists (``acc_pos``, ``accept_pos``) are most of a pipeline log's parse time
    and memory and a report needs them for its last window only, so by default (``lists=False``)
    those of files are left unread (null, the sources named in :attr:`ParsedLog.lists_pending`):
    :func:`~dflash_diag.read.jsonl.fetch_lists` reads them for the rows that need them, and
    :func:`~dflash_diag.analysis.diagnosis.diagnose` does so by itself. ``lists=True`` reads
    them all. Standard input, FIFOs and pipes are always read whole (they cannot be read twice).

    With ``cache=True`` plain JSONL files are read through :mod:`dflash_diag.read.cache`, and
    another trainer's JSONL through :mod:`dflash_diag.read.scalars_cache`: a log that only grew
    since the last cached read costs its new bytes (the CLI's default; the library's is False,
    so that it writes nothing unasked).

    Files are parsed separately (``source`` = position in ``paths``) and concatenated; restarts are
    resolved per source and the records merged in step order by
    :func:`dflash_diag.analysis.restarts.resolve_restarts`.

    Raises:
        DiagError: a missing or unreadable file, a log with no records at all, or records none of
            which has a ``step`` (suggesting ``--field step=NAME``).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    names = [str(p) for p in paths]
    if not names:
        raise DiagError("no log given")
    if names.count("-") > 1:
        raise DiagError("standard input ('-') can be read only once")
    parts = []
    notes: list[str] = []
    for index, name in enumerate(names):
        own_fields = per_input_fields[index] if per_input_fields is not None else fields
        plan = plan_input(
            name,
            input_format=input_format,
            preset=presets[index] if presets else None,
            fields=own_fields,
        )
        if not plan.native:
            part = read_planned(plan, index, strict=strict, cache=cache)
            notes += part.notes
            parts.append(part)
            continue
        part = _read_native(
            name,
            index,
            strict=strict,
            fields=plan.fields,
            lists=lists or not can_reread(name),
            cache=cache and not strict,
        )
        part = drop_duplicate_writers(part, visible(name))
        notes += part.notes
        missing = missing_mapped_fields(part, plan.fields)
        if missing:
            notes.append(f"{visible(name)}: never in the log: {'; '.join(missing)}")
        parts.append(part)
    issues = ParseIssues()
    events: list[LogEvent] = []
    frames = []
    for part in parts:
        # Header indices become global: offset by the headers of the files before.
        offset = sum(1 for e in events if e.kind == "run_start")
        metrics = part.metrics
        if offset:
            metrics = metrics.with_columns(
                pl.when(pl.col("run") >= 0)
                .then(pl.col("run") + offset)
                .otherwise(-1)
                .cast(pl.Int32)
                .alias("run")
            )
        frames.append(metrics)
        events.extend(part.events)
        issues.merge(part.issues)
    metrics = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)
    log = ParsedLog(
        metrics=metrics,
        events=events,
        issues=issues,
        consumed_bytes=sum(p.consumed_bytes for p in parts),
        sources=names,
        lists_pending=sorted({s for p in parts for s in p.lists_pending}),
        fields=dict(fields or {}),
        chunk_starts={k: v for p in parts for k, v in p.chunk_starts.items()},
        notes=notes,
        foreign=any(p.foreign for p in parts),
        presets=sorted({name for p in parts for name in p.presets}),
    )
    shown = ", ".join(visible(n) for n in names)
    if issues.lines == 0:
        raise DiagError(f"empty log: {shown}")
    if metrics.height == 0:
        if issues.without_step:
            raise DiagError(
                f"no record has a 'step' field in {shown} (map one with --field step=NAME)"
            )
        if issues.bad_step:
            raise DiagError(
                f"every record's step is out of range (NaN/Inf or beyond ±2^53) in {shown}"
            )
        raise DiagError(f"no metric records in {shown}")
    return log
