"""Field names and dtypes of the JSONL log schema v1 that the reader declares (DESIGN.md section 4).

Only these fields are read; anything else in a line is ignored, which keeps the parse fast and the
memory small. Other trainers' logs name their fields differently: a field map (``--field acc=train/acc``)
renames a log field to the canonical name before anything else sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from dflash_diag.errors import DiagError

#: Scalar numbers of a metric record. ``step`` is read as a float (some writers emit ``15000.0``)
#: and cast to Int64 afterwards.
METRIC_NUMBERS: tuple[str, ...] = (
    "step", "time", "epoch", "loss", "acc", "lr", "tok_per_sec", "n_tokens", "n_blocks", "n_pred",
    "tau_train", "grad_norm", "walk_tokens", "walk_steps",
)
#: Lists of a pipeline metric record: the per-block-position ones (index 0 is block position 1)
#: and ``walk_hist`` (the walked tau's steps by length, index k = length k + 1; B entries; only on
#: every ``walk_every``-th record, null elsewhere, like ``walk_tokens`` and ``walk_steps``).
METRIC_LISTS: tuple[str, ...] = ("acc_pos", "accept_pos", "walk_hist")
#: Fields of event records (``run_start``, ``eval``, ...). Events are rare, so they are not part of
#: the polars schema (every declared column costs parse time on every line); their lines are found
#: by a byte search and decoded whole with :mod:`json`. These names can still be mapped.
EVENT_FIELDS: tuple[str, ...] = (
    "event", "script", "schema", "tau", "tau_hist", "n_prompts", "new_tokens", "temperature",
    "block_size", "steps_per_epoch", "world_size", "schedule", "resumed_from", "config", "path",
    "reason",
)

#: Every canonical field that a map may rename.
CANONICAL_FIELDS: frozenset[str] = frozenset(METRIC_NUMBERS + METRIC_LISTS + EVENT_FIELDS)


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
    canonical: dict[str, pl.DataType] = {name: pl.Float64() for name in METRIC_NUMBERS}
    for name in METRIC_LISTS if lists else ():
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
    return mapping
