"""Per-input reading plans: which reader, which preset and field map for each log given.

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

from dflash_diag.errors import DiagError
from dflash_diag.read.files import check_log_path
from dflash_diag.read.formats.detect import (
    FORMATS,
    HEAD_BYTES,
    check_format,
    detect_format,
    read_scalars,
)
from dflash_diag.read.formats.jsonl_rows import sample_keys
from dflash_diag.read.presets import PRESETS, Preset, detect_preset, get_preset
from dflash_diag.read.records import ParsedLog

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
    """

    path: str
    format: str
    native: bool
    preset: Preset | None = None
    fields: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``read as TensorBoard`` (for the native path: JSONL, the log schema)."""
        return f"read as {FORMATS[self.format]}"


def split_per_input(
    n_inputs: int, presets: Sequence[str] | None, fields: Sequence[str] | None,
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
        raise DiagError(f"{len(presets)} --preset values for {n_inputs} inputs: give one for all "
                        "or one per input, in order ('auto' detects)")
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
    path: str, *, input_format: str | None = None, preset: str | None = None,
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
    fmt = check_format(input_format) if input_format else detect_format(path)
    native = fmt == "jsonl" and chosen is None and not _foreign_jsonl(Path(path), fields)
    return InputPlan(path, fmt, native=native, preset=chosen, fields=fields)


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
    keys, nested = sample_keys(head)
    if nested or detect_preset(keys) is not None:
        return True
    # acc_pos mapped to a family of numbered scalar keys (not to a list field): assembled here
    list_map = fields.get("acc_pos")
    return list_map is not None and keys.get(list_map) is not list


def read_planned(plan: InputPlan, source: int, *, strict: bool = False) -> ParsedLog:
    """Read a non-native input into a canonical :class:`ParsedLog` (``source`` stamped).

    Raises:
        DiagError: the reader's one-line error.
    """
    import polars as pl

    from dflash_diag.read.formats.canonical import to_parsed_log
    from dflash_diag.read.formats.jsonl_rows import read_jsonl_rows

    if plan.format == "jsonl":
        from dflash_diag.read.formats.jsonl_rows import FORMAT, STEP_KEYS
        from dflash_diag.read.formats.jsonl_wide import read_jsonl_wide

        # polars' scan where it gives the line reader's records exactly (None: it does not); a
        # wide piece's own "step" column is no key, so a map naming that key takes the lines
        fast = (None if plan.fields.get("step") == "step"
                else read_jsonl_wide(plan.path, FORMAT, STEP_KEYS))
        try:
            scalars = fast or read_jsonl_rows(plan.path, strict=strict)
        except DiagError:
            raise
        except (OSError, ValueError) as exc:
            raise DiagError(f"{plan.path}: {exc}") from None
    else:
        scalars = read_scalars(plan.path, plan.format)
    try:
        canonical = to_parsed_log(scalars, source=source, preset=plan.preset, fields=plan.fields)
    except (Exception, pl.exceptions.PanicException) as exc:  # noqa: BLE001
        # the same rule as the readers': one line naming the input, never a traceback
        raise DiagError(f"{plan.path}: cannot assemble its records "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())[:160]})") from None
    log = canonical.log
    log.sources = [plan.path]
    log.notes = [f"{plan.path}: {canonical.description}"] + [
        f"{plan.path}: {note}" for note in canonical.notes]
    return log


def missing_mapped_fields(log: ParsedLog, fields: Mapping[str, str]) -> list[str]:
    """``--field`` maps of a natively read log whose field never holds a value."""
    missing = []
    from dflash_diag.logschema import METRIC_LISTS

    for canonical, name in fields.items():
        if (canonical in log.metrics.columns and canonical not in ("step", *METRIC_LISTS)
                and log.metrics.height
                and log.metrics[canonical].null_count() == log.metrics.height):
            missing.append(f"{canonical}={name}")
    return missing


def with_extra_columns(log: ParsedLog, extra: Mapping[str, object] | None) -> ParsedLog:
    """``log`` with a null column for each ``extra`` field it lacks (other formats have none)."""
    import polars as pl

    missing = [name for name in (extra or {}) if name not in log.metrics.columns]
    if missing:
        log.metrics = log.metrics.with_columns(
            pl.lit(None, extra[name]).alias(name) for name in missing)  # type: ignore[index]
    return log


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

    def load_kwargs(self, n_inputs: int, only: int | None = None) -> dict[str, object]:
        """Keyword arguments of :func:`~dflash_diag.read.jsonl.load_log` for ``n_inputs``
        inputs (or for input ``only`` of them, loaded alone).

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
        return {"input_format": self.input_format, "presets": presets,
                "per_input_fields": maps, "fields": maps[0] if maps else {}, "cache": self.cache}
