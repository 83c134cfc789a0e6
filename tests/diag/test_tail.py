"""The incremental log reader: offsets, torn lines, truncation, rotation, missing files."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflash_diag.read.tail import LogTail


def _append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_reads_only_appended_lines_and_tracks_line_numbers(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2}\n')
    tail = LogTail(log)
    first = tail.read_new()
    assert first.data == b'{"step": 1}\n{"step": 2}\n'
    assert (first.first_line_no, first.n_lines, first.reset) == (1, 2, False)
    assert tail.offset == log.stat().st_size

    assert tail.read_new().data == b""  # nothing new: nothing handed out twice

    _append(log, b'{"step": 3}\n')
    second = tail.read_new()
    assert second.data == b'{"step": 3}\n'
    assert second.first_line_no == 3


def test_torn_last_line_waits_for_its_newline(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_bytes(b'{"step": 1}\n{"st')
    tail = LogTail(log)
    chunk = tail.read_new()
    assert chunk.data == b'{"step": 1}\n'
    assert chunk.pending_bytes == len(b'{"st')

    _append(log, b'ep": 2')  # still no newline
    chunk = tail.read_new()
    assert chunk.data == b""
    assert chunk.pending_bytes == len(b'{"step": 2')

    _append(log, b'}\n{"step": 3}\n')
    chunk = tail.read_new()
    assert chunk.data == b'{"step": 2}\n{"step": 3}\n'  # the torn line arrives whole, once
    assert chunk.first_line_no == 2
    assert chunk.pending_bytes == 0


def test_truncation_rereads_from_the_start(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2}\n{"step": 3}\n')
    tail = LogTail(log)
    tail.read_new()
    with open(log, "wb") as f:  # truncate in place (same inode), shorter than our offset
        f.write(b'{"step": 9}\n')
    chunk = tail.read_new()
    assert chunk.reset
    assert chunk.data == b'{"step": 9}\n'
    assert chunk.first_line_no == 1
    assert tail.resets == 1
    _append(log, b'{"step": 10}\n')
    after = tail.read_new()
    assert (after.reset, after.data, after.first_line_no) == (False, b'{"step": 10}\n', 2)


def test_in_place_rewrite_to_a_larger_size_is_noticed(tmp_path):
    # Size alone cannot see this one: the new content is longer than what was read.
    log = tmp_path / "train.jsonl"
    log.write_bytes(b'{"step": 1}\n')
    tail = LogTail(log)
    tail.read_new()
    ino = log.stat().st_ino
    with open(log, "wb") as f:
        f.write(b'{"step": 7, "loss": 2.0}\n{"step": 8}\n')
    assert log.stat().st_ino == ino
    chunk = tail.read_new()
    assert chunk.reset
    assert chunk.data == b'{"step": 7, "loss": 2.0}\n{"step": 8}\n'


def test_rotation_switches_to_the_new_file(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2}\n')
    tail = LogTail(log)
    tail.read_new()
    os.rename(log, tmp_path / "train.jsonl.1")
    assert tail.read_new().missing  # rotated away, not yet re-created
    # The new file is larger than the old offset, so only its inode tells it apart.
    log.write_bytes(b'{"step": 3}\n{"step": 4}\n{"step": 5}\n')
    chunk = tail.read_new()
    assert chunk.reset
    assert chunk.data == b'{"step": 3}\n{"step": 4}\n{"step": 5}\n'
    assert chunk.first_line_no == 1


def test_file_created_after_the_tail_started(tmp_path):
    log = tmp_path / "later.jsonl"
    tail = LogTail(log)
    chunk = tail.read_new()
    assert chunk.missing
    assert chunk.data == b""
    log.write_bytes(b'{"step": 1}\n')
    chunk = tail.read_new()
    assert not chunk.missing
    assert not chunk.reset
    assert chunk.data == b'{"step": 1}\n'


def test_max_chunk_bytes_consumes_a_backlog_in_pieces(tmp_path):
    log = tmp_path / "train.jsonl"
    lines = [b'{"step": %d}\n' % i for i in range(100)]
    log.write_bytes(b"".join(lines))
    tail = LogTail(log, max_chunk_bytes=64)
    got = b""
    first_numbers = []
    for _ in range(100):
        chunk = tail.read_new()
        if chunk.data:
            first_numbers.append(chunk.first_line_no)
        got += chunk.data
        if tail.offset == log.stat().st_size and chunk.pending_bytes == 0:
            break
        assert tail.backlog_bytes == log.stat().st_size - tail.offset
    assert got == b"".join(lines)
    assert tail.backlog_bytes == 0
    # every piece starts where the previous one ended
    assert first_numbers[0] == 1
    assert first_numbers == sorted(set(first_numbers))


def test_rejects_a_nonpositive_chunk_bound(tmp_path):
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        LogTail(tmp_path / "x", max_chunk_bytes=0)


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(
        st.binary(min_size=0, max_size=30).map(lambda b: b.replace(b"\n", b"")),
        min_size=0,
        max_size=20,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
    bound=st.one_of(st.none(), st.integers(min_value=1, max_value=50)),
)
def test_any_append_pattern_hands_out_each_complete_line_once(tmp_path_factory, lines, cuts, bound):
    """Whatever the writer's chunking and the reader's bound, the lines handed out are exactly
    the complete lines written, in order, with consistent line numbers."""
    data = b"".join(line + b"\n" for line in lines) + b"torn"
    log = tmp_path_factory.mktemp("tail") / "train.jsonl"
    log.write_bytes(b"")
    tail = LogTail(log, max_chunk_bytes=bound)
    got, next_line = b"", 1
    pieces = sorted({min(c, len(data)) for c in cuts} | {len(data)})
    start = 0
    for end in pieces:
        _append(log, data[start:end])
        start = end
        for _ in range(len(data) + 2):  # enough reads to drain a bounded tail
            chunk = tail.read_new()
            assert not chunk.reset
            if chunk.data:
                assert chunk.first_line_no == next_line
                next_line += chunk.n_lines
                got += chunk.data
            if tail.offset == log.stat().st_size:
                break
    assert got == b"".join(line + b"\n" for line in lines)
    assert tail.pending_bytes == len(b"torn")


def test_newlines_are_counted_across_the_counting_blocks():
    from dflash_diag.read.files import _COUNT_BLOCK, count_newlines

    block = _COUNT_BLOCK
    cases = [b"", b"\n", b"a", b"\n" * block, b"x\n" * block + b"\n", b"a" * (3 * block + 1)]
    cases.append(b"".join(b"%d\n" % i if i % 7 else b"%d" % i for i in range(200_000)))
    for data in cases:
        assert count_newlines(data) == data.count(b"\n")
