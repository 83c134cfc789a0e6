"""W&B offline runs: ``wandb/offline-run-<time>-<id>/run-<id>.wandb``.

The file (W&B's "datastore") is a LevelDB-style log:

* a 7-byte file header: ``:W&B``, magic ``0xBEE1`` (uint16 LE), version (uint8);
* 32 KiB blocks of records, each with a 7-byte header: CRC-32 (zlib's, of the type byte and
  the data), length (uint16), type (1 full, 2 first, 3 middle, 4 last: a record longer than
  the rest of a block is cut into pieces); fewer than 7 bytes left in a block are padding;
* each record is a protobuf ``Record``: ``history`` (field 2) holds ``item`` (1, repeated:
  ``key`` 1 or ``nested_key`` 2, and ``value_json`` 16) and ``step`` (2: ``num`` 1);
  ``config`` (5) holds ``update`` items of the same shape.

Metric values are JSON numbers; ``_step`` (also in the items) is the step, ``_timestamp`` the
wall time. Given a ``wandb/`` folder, the newest offline (or synced) run is read. The CRC is
checked (zlib's CRC-32 is in the standard library); a record failing it ends the read, as the
rest of the file cannot be trusted (a run killed mid-write leaves such a tail).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path
from typing import BinaryIO

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars
from dflash_diag.read.formats.protobuf import WireError, fields
from dflash_diag.read.records import ParseIssues

FORMAT = "W&B offline run"
MAGIC = b":W&B"
_FILE_HEADER = struct.Struct("<4sHB")
_RECORD_HEADER = struct.Struct("<IHB")
BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_TYPE_CRC = {t: zlib.crc32(bytes((t,))) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}
#: Config keys that carry run facts the diagnostics use.
_META_KEYS = ("block_size", "ttt_length", "max_steps")


def frame_records(records: list[bytes], start: int = 0) -> bytes:
    """``records`` framed as W&B's datastore writes them: 32 KiB blocks, a record longer than
    its block's rest cut into first/middle/last pieces, the block's tail under a header's 7
    bytes zero-padded. ``start`` is the file offset the bytes go to (after the file header).
    The inverse of :func:`records`, for fixtures and benchmarks."""
    data = bytearray()
    for record in records:
        rest, first = record, True
        while True:
            room = BLOCK - (start + len(data)) % BLOCK
            if room < _RECORD_HEADER.size:
                data += b"\x00" * room
                continue
            piece, rest = rest[: room - _RECORD_HEADER.size], rest[room - _RECORD_HEADER.size :]
            kind = (_FULL if first else _LAST) if not rest else (_FIRST if first else _MIDDLE)
            data += (
                _RECORD_HEADER.pack(zlib.crc32(piece, _TYPE_CRC[kind]), len(piece), kind) + piece
            )
            first = False
            if not rest:
                break
    return bytes(data)


def looks_like_wandb(head: bytes) -> bool:
    """Whether a file starts with the W&B datastore header."""
    return head.startswith(MAGIC)


def find_run_file(folder: Path) -> Path | None:
    """The ``.wandb`` file of a run folder, or of the newest run below a ``wandb/`` folder."""
    files = sorted(folder.glob("*.wandb"))
    if files:
        return files[-1]
    # a run folder is named [offline-]run-<start time>-<id>: newest last by the time, whether
    # synced or offline (the "offline-" prefix would sort every offline run first)
    runs = sorted(
        (p for p in folder.glob("*run-*") if p.is_dir()),
        key=lambda p: (p.name.split("run-", 1)[-1], p.name),
    )
    for run in reversed(runs):
        files = sorted(run.glob("*.wandb"))
        if files:
            return files[-1]
    return None


#: Bytes read at once: whole 32 KiB blocks (a physical record never crosses a block), so the
#: file is streamed and memory does not grow with it.
CHUNK_BLOCKS = 512
#: Longest logical record kept (its pieces joined): a history row is KBs; a longer one (a
#: media blob, a hostile chain of MIDDLE pieces) is dropped and counted, never held whole.
MAX_RECORD_BYTES = 64 * 2**20


def records(stream: BinaryIO, issues: ParseIssues):
    """The protobuf payloads of a datastore read from ``stream``, pieces joined.

    Streams ``CHUNK_BLOCKS`` blocks at a time: memory is one chunk plus the record being
    joined (at most :data:`MAX_RECORD_BYTES`), whatever the file's size.
    """
    data = stream.read(BLOCK)
    if len(data) < _FILE_HEADER.size:
        return
    ident, magic, _version = _FILE_HEADER.unpack_from(data, 0)
    if ident != MAGIC or magic != 0xBEE1:
        raise DiagError("not a W&B datastore (bad header)")
    pos = _FILE_HEADER.size
    pieces: list[bytes] = []
    joined = 0  # bytes in ``pieces``; -1: an overlong record is being skipped to its end
    while True:
        if pos >= len(data):
            data = b""  # not held while the next chunk is read
            data = stream.read(BLOCK * CHUNK_BLOCKS)
            pos = 0
            if not data:
                return
        room = BLOCK - pos % BLOCK
        if room < _RECORD_HEADER.size:
            pos += room  # block padding
            continue
        if pos + _RECORD_HEADER.size > len(data):
            issues.torn_tail.append(0)
            return
        checksum, length, kind = _RECORD_HEADER.unpack_from(data, pos)
        start = pos + _RECORD_HEADER.size
        if kind == 0 and length == 0:
            pos += room  # zero-filled rest of a block
            continue
        if start + length > len(data):
            issues.torn_tail.append(0)
            return
        payload = data[start : start + length]
        if kind not in _TYPE_CRC or zlib.crc32(payload, _TYPE_CRC[kind]) != checksum:
            issues.malformed += 1
            return
        pos = start + length
        if kind == _FULL:
            yield payload
        elif kind == _FIRST:
            pieces, joined = [payload], len(payload)
        elif joined >= 0:
            pieces.append(payload)
            joined += len(payload)
            if joined > MAX_RECORD_BYTES:
                issues.malformed += 1
                pieces, joined = [], -1
            elif kind == _LAST:
                yield b"".join(pieces)
                pieces, joined = [], 0
        elif kind == _LAST:
            joined = 0  # the end of the overlong record


def _items(buf: bytes, start: int, end: int, item_field: int):
    """``(key, value)`` of the items (``key``/``nested_key`` and ``value_json``) of a message."""
    for number, wire, value in fields(buf, start, end):
        if number != item_field or wire != 2:
            continue
        key_parts: list[str] = []
        key = None
        raw = None
        i_start, i_end = value  # type: ignore[misc]
        for inner, inner_wire, inner_value in fields(buf, i_start, i_end):
            if inner_wire != 2:
                continue
            a, b = inner_value  # type: ignore[misc]
            if inner == 1:
                key = buf[a:b].decode("utf-8", "replace")
            elif inner == 2:
                key_parts.append(buf[a:b].decode("utf-8", "replace"))
            elif inner == 16:
                raw = buf[a:b]
        name = key if key is not None else "/".join(key_parts)
        if name and raw is not None:
            try:
                yield name, json.loads(raw)
            except (ValueError, RecursionError):
                continue


def read_wandb(path: str | Path) -> Scalars:
    """Read a ``.wandb`` file (or the newest run's below a folder) into scalars.

    Raises:
        DiagError: no run file, or a file that is not a W&B datastore.
    """
    path = Path(path)
    notes = []
    if path.is_dir():
        found = find_run_file(path)
        if found is None:
            raise DiagError(f"{path}: no W&B run file (*.wandb) in it")
        notes.append(f"read {found}")
        path = found
    collector = RowCollector()
    issues = ParseIssues()
    meta: dict[str, object] = {}
    try:
        with path.open("rb") as stream:
            for payload in records(stream, issues):
                issues.lines += 1
                try:
                    _record(payload, collector, meta)
                except WireError:
                    issues.malformed += 1
    except OSError as exc:
        raise DiagError(f"cannot read {path}: {exc}") from None
    except DiagError as exc:
        raise DiagError(f"{path}: {exc}") from None
    return Scalars(frame=collector.frame(), format=FORMAT, issues=issues, meta=meta, notes=notes)


def _record(payload: bytes, collector: RowCollector, meta: dict[str, object]) -> None:
    for number, wire, value in fields(payload):
        if wire != 2:
            continue
        start, end = value  # type: ignore[misc]
        if number == 2:  # history
            step = None
            for inner, inner_wire, inner_value in fields(payload, start, end):
                if inner == 2 and inner_wire == 2:
                    a, b = inner_value  # type: ignore[misc]
                    for f, w, v in fields(payload, a, b):
                        if f == 1 and w == 0:
                            step = v
            row = dict(_items(payload, start, end, 1))
            if step is None:
                step = row.get("_step")
            collector.add(row, step=step, time=row.get("_timestamp"))
        elif number == 5:  # config
            for key, item in _items(payload, start, end, 1):
                if isinstance(item, dict) and "value" in item:
                    item = item["value"]
                if key in _META_KEYS:
                    meta[key] = item
