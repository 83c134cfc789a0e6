"""TensorBoard event files (``events.out.tfevents.*``), read without TensorFlow or tensorboard.

The file format (TFRecord framing of ``Event`` protobuf messages):

* each record is ``uint64 length`` (little-endian), ``uint32`` masked CRC-32C of those 8 bytes,
  ``length`` bytes of data, ``uint32`` masked CRC-32C of the data; the mask is
  ``((crc >> 15) | (crc << 17)) + 0xa282ead8``;
* the data is an ``Event``: ``wall_time`` (field 1, double), ``step`` (2, int64),
  ``file_version`` (3, the first event of a file says ``brain.Event:2``), ``summary`` (5);
* a ``Summary`` holds repeated ``value`` (1): ``tag`` (1), ``simple_value`` (2, float: what
  ``torch.utils.tensorboard.SummaryWriter.add_scalar`` writes), ``metadata`` (9) and ``tensor``
  (8, a ``TensorProto``: what TF2 and tensorboard's own writers use for scalars: ``dtype`` (1),
  ``tensor_content`` (4, raw little-endian), ``float_val`` (5), ``double_val`` (6),
  ``int_val`` (7), ``int64_val`` (10)).

Only scalars are read (a tensor of one number counts as one); images, histograms and text are
skipped. The header CRC of every record is checked (a corrupt length would send the reader
into the middle of the next record); the data CRC is not: the pure-Python CRC would cost more
than the whole parse, and a damaged payload shows up as a malformed message anyway.

A writer still running leaves a partial last record: it is ignored as a torn tail. A run
directory may hold several event files (a resumed run starts a new one): they are read in the
order of the timestamp in their names, and a step that goes back is a restart.

Speed: a 1M-event file must read about as fast as the same values in JSONL, which a Python loop
over records cannot do (it costs several seconds). TensorBoard writers repeat the same record
shapes (the same tags every step, in the same order), so :func:`_fast_run` recognises a run of
records that repeat one cycle of shapes and decodes the whole run with strided byte slices
(C speed): the step varints, the wall times and the float values of all cycles at once. Records
that do not fit (the first ones, an eval record, a change in the step's varint length) go
through the general decoder.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import SCALAR_SCHEMA, Scalars, long_frame
from dflash_diag.read.formats.protobuf import (
    WireError,
    as_double,
    as_float,
    as_signed,
    fields,
    read_varint,
)
from dflash_diag.read.records import ParseIssues

FORMAT = "TensorBoard"

_HEADER = struct.Struct("<QI")
#: Bytes read per chunk: the raw bytes held at once. A MiB: at 16 MiB the chunk, its join with
#: the bytes left from the chunk before and their copies cost about 25 MiB more peak memory and
#: 20% more CPU (1M steps of four tags: the strided copies and compares leave the caches).
CHUNK_BYTES = 2**20
#: A record longer than this is no scalar event (an image, a whole graph): passed over unread.
LONG_RECORD_BYTES = 16 * 2**20
#: Records a file's first record must be like (the version event) to be taken as an event file.
_FILE_VERSION = b"brain.Event:"
_NAME = re.compile(r"tfevents")


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (pure Python: for the 8-byte length headers)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def looks_like_event_file(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) starts with a TFRecord whose header CRC holds."""
    if len(head) < 12:
        return False
    length, crc = _HEADER.unpack_from(head, 0)
    return 0 < length < 2**24 and masked_crc32c(head[:8]) == crc


def event_files(path: Path) -> list[Path]:
    """The event files of a run directory (not its subdirectories), oldest first."""
    found = [p for p in path.iterdir() if p.is_file() and _NAME.search(p.name)]

    def order(p: Path) -> tuple[int, str]:
        stamp = re.search(r"tfevents\.(\d+)", p.name)
        return (int(stamp.group(1)) if stamp else 0, p.name)

    return sorted(found, key=order)


@dataclass
class _WideRaw:
    """Raw bytes of the fast path's runs for one tag set: 32-bit step words (continuation bits
    cleared), wall times (float64) and each tag's values (float32), cycle after cycle."""

    values: list[bytearray]
    runs: list[tuple[int, int, int]] = field(default_factory=list)  # (first row, cycles, slots)
    steps: bytearray = field(default_factory=bytearray)
    times: bytearray = field(default_factory=bytearray)


@dataclass
class _Columns:
    """The long frame being built, as Python lists and already-built polars pieces."""

    rows: list[int]
    steps: list[int]
    keys: list[str]
    values: list[float]
    times: list[float]
    pieces: list[pl.DataFrame]
    next_row: int = 0
    #: the fast path's raw bytes per tag set, decoded by :meth:`wide_frames`
    wide_raw: dict[tuple[str, ...], _WideRaw] = field(default_factory=dict)

    def wide_frames(self) -> list[pl.DataFrame]:
        """The fast path's records, one row per cycle (see :attr:`Scalars.wide`)."""
        frames = []
        for tags, raw in self.wide_raw.items():
            count = sum(good for _, good, _ in raw.runs)
            rows = pl.concat(
                [
                    pl.int_range(first, first + good * n, n, dtype=pl.Int64, eager=True)
                    for first, good, n in raw.runs
                ],
                rechunk=True,  # one chunk, as the other columns (see canonical.contiguous)
            )
            # each raw buffer is freed once its column is made (they were all held to the end),
            # and the step is computed in 32 bits (< 2^28: four 7-bit groups), then widened
            words = pl.DataFrame({"w": _numbers(_taken(raw.steps), pl.UInt32, count)})
            step = sum(((pl.col("w") // (1 << (8 * k))) % 0x80) * (1 << (7 * k)) for k in range(4))
            data = {
                "row": rows,
                "step": words.select(step.cast(pl.Int64).alias("step")).to_series(),
            }
            del words
            data["time"] = _numbers(_taken(raw.times), pl.Float64, count)
            for tag, values in zip(tags, raw.values, strict=True):
                data[tag] = _numbers(_taken(values), pl.Float32, count).cast(pl.Float64)
            frames.append(pl.DataFrame(data))
        return frames

    def flush(self) -> None:
        if self.rows:
            self.pieces.append(
                long_frame(self.rows, self.steps, self.keys, self.values, self.times)
            )
            self.rows, self.steps, self.keys, self.values, self.times = [], [], [], [], []


def read_tensorboard(path: str | Path) -> Scalars:
    """Read an event file, or a run directory's event files, into scalars.

    Raises:
        DiagError: no event file, or a file that is not one (one line, naming it).
    """
    path = Path(path)
    files = event_files(path) if path.is_dir() else [path]
    if not files:
        raise DiagError(f"{path}: no TensorBoard event files (events.out.tfevents.*) in it")
    columns = _Columns([], [], [], [], [], [])
    issues = ParseIssues()
    for file in files:
        _read_file(file, columns, issues)
    columns.flush()
    frame = pl.concat(columns.pieces) if columns.pieces else pl.DataFrame(schema=SCALAR_SCHEMA)
    notes = [f"{len(files)} event files read in order"] if len(files) > 1 else []
    return Scalars(
        frame=frame, format=FORMAT, issues=issues, notes=notes, wide=columns.wide_frames()
    )


def _read_file(file: Path, columns: _Columns, issues: ParseIssues) -> None:
    try:
        handle = file.open("rb")
    except OSError as exc:
        raise DiagError(f"cannot read {file}: {exc}") from None
    with handle:
        head = handle.read(12)
        if not looks_like_event_file(head):
            raise DiagError(f"{file}: not a TensorBoard event file (bad record header)")
        handle.seek(0)
        pending = b""
        offset = 0  # where ``pending`` starts in the file
        tags: dict[bytes, str] = {}
        want = CHUNK_BYTES
        while True:
            try:
                block = handle.read(want)
            except OSError as exc:
                raise DiagError(f"cannot read {file}: {exc}") from None
            buf = pending + block if pending else block
            # the last bytes of the file as it is now: nothing is left for a next chunk
            final = not block or handle.tell() >= _size(handle)
            consumed, stop = _parse_buffer(buf, columns, issues, tags, final=final)
            pending = buf[consumed:]
            offset += consumed
            if stop or not block:
                break
            want = CHUNK_BYTES
            if len(pending) >= _HEADER.size:
                # A record longer than LONG_RECORD_BYTES is no scalar event: its data is passed
                # over, never held and re-joined with every chunk (a valid header claiming 2^40
                # bytes did that to the end of the file). One that would end beyond the file is
                # a torn tail: nothing after its start can be framed. A shorter one that the
                # next chunk would not complete is read to its end at once.
                length = _HEADER.unpack_from(pending, 0)[0]
                if length + 16 > LONG_RECORD_BYTES:
                    if offset + 16 + length > _size(handle):
                        break
                    issues.lines += 1
                    offset += 16 + length
                    handle.seek(offset)
                    pending = b""
                elif length + 16 > len(pending) + CHUNK_BYTES:
                    want = length + 16 - len(pending)
        if pending:
            issues.lines += 1
            issues.torn_tail.append(0)


def _size(handle) -> int:
    """The size of an open file now (a writer may still be appending to it)."""
    try:
        return os.fstat(handle.fileno()).st_size
    except OSError:
        return 0


def _parse_buffer(
    buf: bytes, columns: _Columns, issues: ParseIssues, tags: dict[bytes, str], *, final: bool
) -> tuple[int, bool]:
    """Parse the complete records of ``buf``; ``(bytes consumed, stop reading)``.

    Unless the buffer is the file's last, a run of cycles that reaches the buffer's end, or a
    cycle with too few repeats left before it for a run, ends the parse there: the rest is read
    with the next chunk, as part of a run, where decoding it here would make a few records one
    by one at every chunk (long rows whose merge with the wide ones sorts every record). What
    is left to the next chunk is less than a run: it always ends a chunk further on."""
    pos, end = 0, len(buf)
    cooldown = 0  # records to decode one by one before trying the fast path again
    while pos + 12 <= end:
        if cooldown == 0:
            run_end, count, to_end = _fast_run(buf, pos, columns, final=final)
            if run_end >= 0:
                issues.lines += count
                pos = run_end
            if to_end and not final:
                return pos, False
            if run_end >= 0:
                continue
            cooldown = count
        cooldown -= 1
        length, crc = _HEADER.unpack_from(buf, pos)
        if masked_crc32c(buf[pos : pos + 8]) != crc:
            # A damaged length: nothing after it can be framed again. Keep what was read.
            issues.malformed += 1
            if len(issues.malformed_lines) < 5:
                issues.malformed_lines.append((0, columns.next_row + 1))
            return end, True
        if pos + 16 + length > end:
            break  # the record continues in the next chunk (or is a torn tail)
        data_start = pos + 12
        issues.lines += 1
        try:
            _decode_event(buf, data_start, data_start + length, columns, tags)
        except WireError:
            issues.malformed += 1
            if len(issues.malformed_lines) < 5:
                issues.malformed_lines.append((0, columns.next_row + 1))
        pos = data_start + length + 4
    return pos, False


def _decode_event(
    buf: bytes, start: int, end: int, columns: _Columns, tags: dict[bytes, str]
) -> None:
    wall = None
    step = 0
    summary = None
    for number, wire, value in fields(buf, start, end):
        if number == 1 and wire == 1:
            wall = as_double(value)
        elif number == 2 and wire == 0:
            step = as_signed(value)  # type: ignore[arg-type]
        elif number == 5 and wire == 2:
            summary = value
    row = columns.next_row
    columns.next_row += 1
    if summary is None:
        return
    s_start, s_end = summary  # type: ignore[misc]
    for number, wire, value in fields(buf, s_start, s_end):
        if number != 1 or wire != 2:
            continue
        v_start, v_end = value  # type: ignore[misc]
        tag, number_value = _decode_value(buf, v_start, v_end, tags)
        if tag is None or number_value is None:
            continue
        columns.rows.append(row)
        columns.steps.append(step)
        columns.keys.append(tag)
        columns.values.append(number_value)
        columns.times.append(wall if wall is not None else float("nan"))


def _decode_value(
    buf: bytes, start: int, end: int, tags: dict[bytes, str]
) -> tuple[str | None, float | None]:
    tag = None
    number = None
    for field_no, wire, value in fields(buf, start, end):
        if field_no == 1 and wire == 2:
            t_start, t_end = value  # type: ignore[misc]
            raw = buf[t_start:t_end]
            tag = tags.get(raw)
            if tag is None:
                tag = tags.setdefault(raw, raw.decode("utf-8", "replace"))
        elif field_no == 2 and wire == 5:
            number = as_float(value)
        elif field_no == 8 and wire == 2:
            number = _tensor_scalar(buf, *value)  # type: ignore[misc]
    return tag, number


#: TensorProto dtypes read as a scalar: code -> (struct format, packed field number).
_DTYPES = {
    1: ("<f", 5),
    2: ("<d", 6),
    3: ("<i", 7),
    9: ("<q", 10),
    4: ("<B", 7),
    5: ("<h", 7),
    6: ("<b", 7),
}


def _tensor_scalar(buf: bytes, start: int, end: int) -> float | None:
    """The number of a one-element numeric TensorProto, else None."""
    dtype = None
    content = None
    packed: dict[int, tuple[int, int] | list[object]] = {}
    for number, wire, value in fields(buf, start, end):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number in (5, 6, 7, 10):
            packed.setdefault(number, []).append((wire, value))  # type: ignore[union-attr]
    if dtype not in _DTYPES:
        return None
    fmt, field_no = _DTYPES[dtype]  # type: ignore[index]
    size = struct.calcsize(fmt)
    if content is not None:
        c_start, c_end = content  # type: ignore[misc]
        if c_end - c_start != size:
            return None
        return float(struct.unpack_from(fmt, buf, c_start)[0])
    entries = packed.get(field_no)
    if not entries or len(entries) != 1:
        return None
    wire, value = entries[0]  # type: ignore[misc]
    if wire == 2:  # packed repeated
        p_start, p_end = value
        if field_no in (5, 6):
            if p_end - p_start != size:
                return None
            return float(struct.unpack_from(fmt, buf, p_start)[0])
        number, after = read_varint(buf, p_start, p_end)
        return float(as_signed(number)) if after == p_end else None
    if wire == 5:
        return as_float(value)
    if wire == 1:
        return as_double(value)
    if wire == 0:
        return float(as_signed(value))  # type: ignore[arg-type]
    return None


# ------------------------------------------------------------------------------------------
# the fast path: runs of records that repeat one cycle of shapes


@dataclass(frozen=True)
class _Shape:
    """Where the variable bytes of one simple scalar record sit (offsets from its start).

    The record is ``len crc | 09 wall(8) 10 step(n) 2a L 0a M 0a T tag 15 value(4) | crc``:
    the layout of ``add_scalar``'s events. Everything but the CRCs, the wall time, the step and
    the value is constant across the records of one shape.
    """

    size: int
    tag: str
    wall: int
    step: int
    step_len: int
    value: int


def _shape_at(buf: bytes, pos: int, end: int) -> _Shape | None:
    """The shape of the record at ``pos`` if it is a simple scalar event, else None."""
    if pos + 12 > end:
        return None
    length = int.from_bytes(buf[pos : pos + 8], "little")
    size = length + 16
    if pos + size > end or length > 512:
        return None
    d = pos + 12
    if buf[d] != 0x09 or buf[d + 9] != 0x10:
        return None
    s = d + 10
    n = 0
    while s + n < end and buf[s + n] & 0x80:
        n += 1
    n += 1
    if n > 9:
        return None
    q = s + n
    if buf[q] != 0x2A or buf[q + 2] != 0x0A or buf[q + 4] != 0x0A:
        return None
    summary_len, value_len, tag_len = buf[q + 1], buf[q + 3], buf[q + 5]
    if summary_len != value_len + 2 or value_len != tag_len + 2 + 5 or summary_len > 127:
        return None
    t = q + 6
    v = t + tag_len
    if buf[v] != 0x15 or v + 5 != d + length:
        return None
    tag = buf[t:v].decode("utf-8", "replace")
    return _Shape(size=size, tag=tag, wall=d + 1 - pos, step=s - pos, step_len=n, value=v + 1 - pos)


#: Longest cycle of record shapes looked for (tags logged per step): hundreds of tags per step
#: are common (a norm per layer beside the loss), and past the limit every record is decoded
#: one by one (300 tags, 1M events: 15.8 s against 1.3 s). Looking costs one shape per record
#: of a cycle, as decoding them would.
_MAX_CYCLE = 1024
#: Fewest repeats of a cycle worth the fast path (its set-up costs a few record decodes).
_MIN_REPEATS = 8


def _fast_run(
    buf: bytes, pos: int, columns: _Columns, *, final: bool = True
) -> tuple[int, int, bool]:
    """Decode a run of repeated record cycles starting at ``pos``.

    Unless ``final`` (the buffer is the file's last), the buffer's last :data:`_MIN_REPEATS`
    whole cycles are left undecoded, for the next buffer to start with enough of them for a
    run (the file's last cycles would otherwise be too few for one, and decoded one by one).

    Returns:
        ``(end, records, to_end)`` when a run was decoded (``to_end``: it ran to the last whole
        cycle of the buffer), else ``(-1, k, to_end)``: decode ``k`` records one by one before
        trying again (the records before a cycle starts, or a few when none does; ``to_end``:
        a cycle starts here but the buffer ends before it repeats enough for a run).
    """
    end = len(buf)
    shapes: list[_Shape] = []
    offsets: list[int] = []
    seen: dict[_Shape, int] = {}
    at = pos
    # The cycle: shapes until one comes back. If it is not the first, the records before it
    # (an eval record between two train steps) are not part of the cycle.
    while len(shapes) <= _MAX_CYCLE:
        shape = _shape_at(buf, at, end)
        if shape is None:
            return -1, max(1, len(shapes)), False
        if shape in seen:
            if seen[shape]:
                return -1, seen[shape], False
            break
        seen[shape] = len(shapes)
        shapes.append(shape)
        offsets.append(at - pos)
        at += shape.size
    else:
        return -1, _MAX_CYCLE, False
    period = at - pos
    repeats = (end - pos) // period - (0 if final else _MIN_REPEATS)
    if repeats < _MIN_REPEATS:
        return -1, len(shapes), True  # too few cycles left in the buffer for a run
    # Every byte of a cycle that is not a wall time, a step, a value or a data CRC is the same
    # in every repeat (the lengths, the field tags, the tag names): how many cycles keep them.
    varying: set[int] = set()
    for offset, shape in zip(offsets, shapes, strict=True):
        varying.update(range(offset + shape.wall, offset + shape.wall + 8))
        varying.update(range(offset + shape.step, offset + shape.step + shape.step_len))
        varying.update(range(offset + shape.value, offset + shape.value + 4))
        varying.update(range(offset + shape.size - 4, offset + shape.size))  # data CRC
    constant = [i for i in range(period) if i not in varying]
    good = _repeats(buf, pos, period, repeats, constant, offsets, shapes)
    if good < _MIN_REPEATS:
        return -1, len(shapes), False
    limit = pos + good * period
    first_steps = [
        read_varint(buf, pos + o + sh.step, end)[0] for o, sh in zip(offsets, shapes, strict=True)
    ]
    split = next((j for j, step in enumerate(first_steps) if step != first_steps[0]), 0)
    if split and len(set(first_steps[split:])) == 1:
        # The cycle starts inside a step (a chunk or a run ended there): decode the records of
        # that step one by one, so the next cycle starts where a step does.
        return -1, split, False
    first_row = columns.next_row
    n_slots = len(shapes)
    step_columns = [
        [buf[pos + o + sh.step + k : limit : period] for k in range(sh.step_len)]
        for o, sh in zip(offsets, shapes, strict=True)
    ]
    if all(c == step_columns[0] for c in step_columns) and shapes[0].step_len <= 4:
        # Every record of a cycle has the cycle's step (the usual case: all tags logged at one
        # step): one wide row per cycle. The raw bytes are gathered per tag set and decoded by
        # polars once at the end (a few queries, not a few per run).
        tags = tuple(shape.tag for shape in shapes)
        raw = columns.wide_raw.get(tags)
        if raw is None:
            raw = columns.wide_raw[tags] = _WideRaw(values=[bytearray() for _ in tags])
        raw.runs.append((first_row, good, n_slots))
        words = bytearray(4 * good)
        for k, column in enumerate(step_columns[0]):
            words[k::4] = column.translate(_LOW_BITS)
        raw.steps += words
        raw.times += _strided(buf, pos + shapes[0].wall, 8, period, good, limit)
        for slot, (offset, shape) in enumerate(zip(offsets, shapes, strict=True)):
            raw.values[slot] += _strided(buf, pos + offset + shape.value, 4, period, good, limit)
        columns.next_row += good * n_slots
        return limit, good * n_slots, good == repeats
    # Slots of different steps: decode each slot for all cycles at once, then interleave the
    # slots into row order with strided list assignments (long rows).
    total = good * n_slots
    steps: list[int] = [0] * total
    keys: list[str] = [""] * total
    values: list[float] = [0.0] * total
    times: list[float] = [0.0] * total
    for slot, (offset, shape) in enumerate(zip(offsets, shapes, strict=True)):
        base = pos + offset
        steps[slot::n_slots] = _varints(step_columns[slot])
        keys[slot::n_slots] = [shape.tag] * good
        values[slot::n_slots] = (
            memoryview(_strided(buf, base + shape.value, 4, period, good, limit)).cast("f").tolist()
        )
        times[slot::n_slots] = (
            memoryview(_strided(buf, base + shape.wall, 8, period, good, limit)).cast("d").tolist()
        )
    columns.rows.extend(range(first_row, first_row + total))
    columns.steps.extend(steps)
    columns.keys.extend(keys)
    columns.values.extend(values)
    columns.times.extend(times)
    columns.next_row += good * n_slots
    return limit, good * n_slots, good == repeats


def _repeats(
    buf: bytes,
    pos: int,
    period: int,
    repeats: int,
    positions: Sequence[int],
    offsets: Sequence[int],
    shapes: Sequence[_Shape],
) -> int:
    """How many of the first ``repeats`` cycles at ``pos`` equal the first cycle at the
    ``positions`` given and keep the continuation bits of the ``shapes``' step varints.

    The cycles are the rows of a 2-D view of the buffer, compared a block of rows at a time
    (a strided byte slice per position walked the whole buffer once per position: several
    times the cost of the rest of the read)."""
    import numpy as np  # only event files pay its import

    cycles = np.frombuffer(buf, dtype=np.uint8, count=repeats * period, offset=pos).reshape(
        repeats, period
    )
    same = np.asarray(positions, dtype=np.intp)
    expected = cycles[0, same]
    bits = [
        (offset + shape.step + k, 0x80 if k < shape.step_len - 1 else 0)
        for offset, shape in zip(offsets, shapes, strict=True)
        for k in range(shape.step_len)
    ]
    bit_at = np.asarray([i for i, _ in bits], dtype=np.intp)
    bit_set = np.asarray([b for _, b in bits], dtype=np.uint8)
    for first in range(0, repeats, _BLOCK_CYCLES):
        block = cycles[first : first + _BLOCK_CYCLES]
        bad = (block[:, same] != expected).any(axis=1)
        if len(bits):
            bad |= ((block[:, bit_at] & 0x80) != bit_set).any(axis=1)
        if bad.any():
            return first + int(bad.argmax())
    return repeats


#: Cycles compared at once by :func:`_repeats` (a block's copy is this times the period bytes).
_BLOCK_CYCLES = 2**13


def _taken(buffer: bytearray) -> bytes:
    """The buffer's bytes, the buffer emptied (its memory freed before a column is made)."""
    data = bytes(buffer)
    buffer.clear()
    return data


def _numbers(raw: bytes, dtype: pl.DataType, count: int) -> pl.Series:
    """``count`` little-endian numbers packed in ``raw``, reinterpreted by polars (no Python
    object per number)."""
    return pl.Series([raw]).bin.reinterpret(dtype=pl.Array(dtype, count)).explode()


#: Clears a varint byte's continuation bit.
_LOW_BITS = bytes(b & 0x7F for b in range(256))


def _varints(columns: list[bytes]) -> list[int]:
    """The values of varints given as their byte columns (byte k of every varint)."""
    if len(columns) == 1:
        return list(columns[0])
    if len(columns) == 2:
        return [(a & 0x7F) | (b << 7) for a, b in zip(*columns, strict=True)]
    if len(columns) == 3:
        return [
            (a & 0x7F) | ((b & 0x7F) << 7) | (c << 14) for a, b, c in zip(*columns, strict=True)
        ]
    out = []
    for parts in zip(*columns, strict=True):
        value = 0
        for k, byte in enumerate(parts):
            value |= (byte & 0x7F) << (7 * k)
        out.append(value)
    return out


def _strided(buf: bytes, start: int, width: int, period: int, count: int, limit: int) -> bytes:
    """The ``width``-byte fields at ``start + i*period`` for ``i < count``, concatenated."""
    out = bytearray(width * count)
    for k in range(width):
        out[k::width] = buf[start + k : limit : period]
    return bytes(out)


def newest_mtime(path: Path) -> float:
    """The newest modification time of a run directory's event files (to pick the latest run)."""
    try:
        return max((os.stat(p).st_mtime for p in event_files(path)), default=0.0)
    except OSError:
        return 0.0
