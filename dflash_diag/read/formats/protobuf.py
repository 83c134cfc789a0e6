"""The protocol-buffer wire format, just enough to read TensorBoard events and W&B records.

Both formats store small protobuf messages whose few fields we need (a step, a tag, a float);
the schema is fixed by the writers, so a 60-line wire decoder replaces a generated-code
dependency (``protobuf`` plus each project's ``.proto`` modules). Wire types: 0 varint,
1 fixed 64-bit, 2 length-delimited, 5 fixed 32-bit (3 and 4, groups, are not used by either
writer and are rejected).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

_DOUBLE = struct.Struct("<d")
_FLOAT = struct.Struct("<f")


class WireError(ValueError):
    """The bytes are not a well-formed protobuf message."""


def encode_varint(n: int) -> bytes:
    """The varint of a non-negative ``n`` (the inverse of :func:`read_varint`); for the writers of
    test fixtures and benchmark inputs, which build the few messages these readers decode."""
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """``(value, next position)`` of the varint at ``pos``."""
    result = shift = 0
    while pos < end:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            break
    raise WireError("bad varint")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, object]]:
    """``(field number, wire type, value)`` of each field of the message in ``buf[start:end]``.

    The value is an int (varint), ``bytes`` of 8 or 4 bytes (fixed64/fixed32) or a
    ``(start, end)`` range of ``buf`` (length-delimited: a string, bytes or a nested message).

    Raises:
        WireError: a truncated or malformed message.
    """
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        key, pos = read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = read_varint(buf, pos, end)
            yield number, wire, value
        elif wire == 1:
            if pos + 8 > end:
                raise WireError("truncated fixed64")
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            length, pos = read_varint(buf, pos, end)
            if pos + length > end:
                raise WireError("truncated length-delimited field")
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire == 5:
            if pos + 4 > end:
                raise WireError("truncated fixed32")
            yield number, wire, buf[pos : pos + 4]
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")


def as_double(raw: object) -> float:
    """A fixed64 field's bytes as a little-endian double."""
    assert isinstance(raw, bytes)
    return _DOUBLE.unpack(raw)[0]


def as_float(raw: object) -> float:
    """A fixed32 field's bytes as a little-endian float."""
    assert isinstance(raw, bytes)
    return _FLOAT.unpack(raw)[0]


def as_signed(value: int) -> int:
    """A varint read as int64 (two's complement of 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value
