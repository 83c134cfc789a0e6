"""The polars schema of the fields the reader parses, and ``--field`` maps.

The field names are the log schema v1's, defined once in :mod:`dflash_diag.logschema` (shared with
the writer; docs/design.md, "The log schema"). Only the metric numbers and lists are parsed into
the frame; any other field of a metric line is ignored, which keeps the parse fast and the memory
small (event lines are rare and decoded whole). Other trainers' logs name their fields differently:
a field map (``--field acc=train/acc``) renames a log field to the canonical name before anything
else sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.logschema import EVENT_FIELDS, METRIC_LISTS, METRIC_NUMBERS, WALK_LISTS

__all__ = [
    "CANONICAL_FIELDS",
    "EVENT_FIELDS",
    "METRIC_LISTS",
    "METRIC_NUMBERS",
    "check_field_map",
    "parse_field_map",
    "read_schema",
]

#: Every canonical field that a map may rename.
CANONICAL_FIELDS: frozenset[str] = frozenset(
    METRIC_NUMBERS + METRIC_LISTS + WALK_LISTS + EVENT_FIELDS
)


def read_schema(
    fields: Mapping[str, str] | None = None,
    extra: Mapping[str, pl.DataType] | None = None,
    lists: bool = True,
) -> tuple[dict[str, pl.DataType], dict[str, str]]:
    """The polars schema of metric records, in the log's names, and the renaming to canonical ones.

    Args:
        fields: canonical name -> name in the log (see :func:`parse_field_map`). A mapped field
            replaces the canonical one: with ``acc=accuracy`` a log's own ``acc`` is not read.
        extra: additional fields to read, by canonical name, with their dtype (e.g. a watch view
            reading ``stage_busy`` as ``pl.String`` to decode its JSON).
        lists: include the per-position lists (:data:`METRIC_LISTS`). They are most of the parse
            time and memory of a pipeline log, and a report needs them for one window only.

    Returns:
        ``(schema, rename)``: ``schema`` maps log field names to dtypes; ``rename`` maps log names
        to canonical names where they differ.
    """
    fields = dict(fields or {})
    check_field_map(fields)
    canonical: dict[str, pl.DataType] = {name: pl.Float64() for name in METRIC_NUMBERS}
    # The walk's histogram first: it is read in every pass, so a frame read without the
    # per-position lists keeps the same column order once they are fetched.
    for name in WALK_LISTS + (METRIC_LISTS if lists else ()):
        canonical[name] = pl.List(pl.Float64())
    canonical["event"] = pl.String()  # to tell metric records from events
    canonical.update(extra or {})
    mapped_log_names = set(fields.values())
    schema: dict[str, pl.DataType] = {}
    rename: dict[str, str] = {}
    for name, dtype in canonical.items():
        log_name = fields.get(name, name)
        if name not in fields and log_name in mapped_log_names:
            continue  # the log's field of this name was mapped onto another canonical field
        schema[log_name] = dtype
        if log_name != name:
            rename[log_name] = name
    return schema, rename


def parse_field_map(specs: Iterable[str]) -> dict[str, str]:
    """Parse ``NEW=OLD`` specs (canonical name = name in the log) into a dict.

    Raises:
        DiagError: a spec without ``=``, an unknown canonical name, or a name mapped twice.
    """
    mapping: dict[str, str] = {}
    for spec in specs:
        new, sep, old = spec.partition("=")
        new, old = new.strip(), old.strip()
        if not sep or not new or not old:
            raise DiagError(f"field map {spec!r} is not NEW=OLD (e.g. acc=train/acc)")
        if new not in CANONICAL_FIELDS:
            known = ", ".join(sorted(CANONICAL_FIELDS))
            raise DiagError(f"field map {spec!r}: unknown field {new!r} (known: {known})")
        if new in mapping:
            raise DiagError(f"field {new!r} is mapped twice")
        mapping[new] = old
    check_field_map(mapping)
    return mapping


#: Column names the reader adds to a parsed chunk: a log field of that name cannot be mapped.
RESERVED_LOG_NAMES = frozenset({"_line"})


def check_field_map(mapping: Mapping[str, str]) -> None:
    """Refuse a field map that would lose or clash with a field instead of reading it.

    Each log field feeds at most one canonical field: two names mapped onto one log field
    (``acc=lr, loss=lr``), or a canonical field's own log field taken by another one while it is
    not mapped elsewhere (``acc=step`` drops the step; ``acc=lr`` drops lr), would silently lose a
    field, so they are errors. Swaps are fine (``acc=loss, loss=acc``).

    Raises:
        DiagError: such a map, or a log name the reader reserves for itself.
    """
    owners: dict[str, str] = {}
    for new, old in mapping.items():
        if old in RESERVED_LOG_NAMES:
            raise DiagError(f"--field {new}={old}: {old!r} is a name the reader uses internally")
        if old in owners:
            raise DiagError(
                f"--field {owners[old]}={old} and --field {new}={old} read the same "
                f"log field: map each field once"
            )
        owners[old] = new
    for new, old in mapping.items():
        if old in CANONICAL_FIELDS and old != new and old not in mapping:
            raise DiagError(
                f"--field {new}={old} takes the log's own {old!r} field, which would "
                f"then not be read as {old}: map it too (--field {old}=NAME)"
            )
