"""Where the readers cut their input: the pieces, chunks and windows they parse at a time give
the same result as one piece would, and no more work than the parse (issue 21).

* TensorBoard: a run of record cycles that reaches a chunk's end leaves the rest of the cycle
  to the next chunk, so every step of a regular file is a wide row (a record decoded one by one
  at each chunk's end made long rows, whose merge with the wide ones sorted every record);
* foreign JSONL: a piece's size is found by a small read of its end, so it is read as it is
  parsed; the pieces are the ones a read-and-cut gives;
* trainer_state: a window's last item end, found ``}`` by ``}`` from the end, is the one the
  three searches for ``},``, ``}]`` and ``}\\n`` give.
"""

from __future__ import annotations

import os
import random

import pytest

from dflash_diag.read.formats import foreign_jsonl_scan, tensorboard
from dflash_diag.read.formats.canonical import to_parsed_log
from dflash_diag.read.formats.tensorboard import read_tensorboard
from dflash_diag.read.formats.trainer_state import _last_item_end

from .test_formats_readers import VERSION, _scalar_event


def _regular_run(steps: int, first: int = 200) -> bytes:
    """A SummaryWriter file of four tags at every step (HF's logging call), from a step whose
    varint has the length of the last one (a step varint growing a byte starts a new cycle)."""
    tags = ("loss", "grad_norm", "learning_rate", "epoch")
    return VERSION + b"".join(
        _scalar_event(step, tag, 1.0 / (step + k))
        for step in range(first, first + steps)
        for k, tag in enumerate(tags)
    )


@pytest.mark.parametrize("chunk", [2**12, 2**12 + 37, 5000, 2**16])
def test_tensorboard_chunks_leave_no_record_to_the_slow_path(tmp_path, monkeypatch, chunk):
    """Cut into chunks of any size, a regular file's records are all read as cycles (wide
    rows), as one chunk reads them: none decoded one by one where a chunk ends or where too
    few cycles are left in it, and the log is the one a chunk reads."""
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(_regular_run(600))
    one = read_tensorboard(path)
    assert one.frame.height == 0
    whole = to_parsed_log(one).log
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", chunk)
    scalars = read_tensorboard(path)
    assert scalars.frame.height == 0
    assert sum(w.height for w in scalars.wide) == 600
    log = to_parsed_log(scalars).log
    assert log.metrics.equals(whole.metrics)
    assert log.issues == whole.issues


def test_tensorboard_last_chunk_still_reads_its_partial_cycle(tmp_path, monkeypatch):
    """The file's last chunk is parsed to its end: records after the last whole cycle (a step
    with fewer tags) are read, and a torn record after them is a torn tail."""
    path = tmp_path / "events.out.tfevents.1.host"
    data = _regular_run(300) + _scalar_event(500, "loss", 0.5)
    path.write_bytes(data + _scalar_event(501, "loss", 0.25)[:-3])
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 2**12)
    scalars = read_tensorboard(path)
    log = to_parsed_log(scalars).log
    assert log.metrics["step"].to_list() == list(range(200, 501))
    assert log.metrics["loss"][-1] == 0.5
    assert scalars.issues.torn_tail == [0]


def test_tensorboard_hundreds_of_tags_per_step_are_read_as_cycles(tmp_path, monkeypatch):
    """A step of 300 tags (per-layer norms beside the loss) is one cycle: every step is a wide
    row, and the log is the one a one-by-one decode of every record gives (no cycle looked
    for). Past 64 tags a cycle was not looked for and every record was decoded one by one
    (1M events: 15.8 s against 1.3 s)."""
    tags = ["loss", "learning_rate", *(f"grad_norm/layer_{k}" for k in range(298))]
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(
        VERSION
        + b"".join(
            _scalar_event(step, tag, 1.0 / (step + k))
            for step in range(200, 240)
            for k, tag in enumerate(tags)
        )
    )
    scalars = read_tensorboard(path)
    assert scalars.frame.height == 0
    assert sum(w.height for w in scalars.wide) == 40
    monkeypatch.setattr(tensorboard, "_MAX_CYCLE", 0)
    one_by_one = read_tensorboard(path)
    assert one_by_one.frame.height == 40 * len(tags)
    log, reference = to_parsed_log(scalars).log, to_parsed_log(one_by_one).log
    assert log.metrics.equals(reference.metrics)
    assert log.issues == reference.issues


def _old_pieces(path):
    """The pieces as read-and-cut gave them before (the reference)."""
    with path.open("rb", buffering=0) as handle:
        while block := handle.read(foreign_jsonl_scan.PIECE_BYTES):
            while (cut := block.rfind(b"\n") + 1) == 0 and (
                more := handle.read(foreign_jsonl_scan.PIECE_BYTES)
            ):
                block += more
            if 0 < cut < len(block):
                handle.seek(cut - len(block), os.SEEK_CUR)
                block = block[:cut]
            yield block


@pytest.mark.parametrize("probe", [16, 64, 999, 5000])
def test_foreign_pieces_are_the_read_and_cut_ones(tmp_path, monkeypatch, probe):
    """Lines shorter and longer than the probe and than a piece, with and without a last
    newline: the same pieces as reading a piece and cutting it at its last newline."""
    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 1000)
    monkeypatch.setattr(foreign_jsonl_scan, "_PROBE_BYTES", probe)
    rng = random.Random(21)
    lengths = [0, 1, 15, 16, 17, 63, 64, 65, 200, 999, 1000, 1001, 2500]
    for _ in range(200):
        lines = [b"x" * rng.choice(lengths) for _ in range(rng.randint(0, 20))]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        path = tmp_path / "log.jsonl"
        path.write_bytes(data)
        pieces = list(foreign_jsonl_scan._pieces(path))
        assert pieces == list(_old_pieces(path))
        assert b"".join(pieces) == data


def test_foreign_pieces_are_read_whole_not_sliced(tmp_path, monkeypatch):
    """Each piece of a file of short lines is read to its last newline by one read."""
    monkeypatch.setattr(foreign_jsonl_scan, "PIECE_BYTES", 4096)
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"".join(b'{"loss": %d}\n' % i for i in range(3000)))
    sizes = []
    real = foreign_jsonl_scan._piece_size
    monkeypatch.setattr(
        foreign_jsonl_scan, "_piece_size", lambda handle: sizes.append(real(handle)) or sizes[-1]
    )
    pieces = list(foreign_jsonl_scan._pieces(path))
    assert [len(p) for p in pieces[:-1]] == sizes[: len(pieces) - 1]
    assert all(p.endswith(b"\n") for p in pieces)


def _three_searches(window: str) -> int:
    return max(window.rfind("},"), window.rfind("}]"), window.rfind("}\n"))


def test_last_item_end_is_the_three_searches_one():
    """Random windows of braces, the three followers and other characters, and windows with
    more closing braces than the walk takes before falling back."""
    rng = random.Random(5)
    alphabet = "}}},]\nx{"
    for _ in range(5000):
        window = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert _last_item_end(window) == _three_searches(window), window
    for window in ("}" * 100, "}," + "}" * 100, "x}]" + "}x" * 200, "", "}", "},"):
        assert _last_item_end(window) == _three_searches(window), window
    # in place: the window text[start:limit] of a longer text, as its copy would give it
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        start = rng.randint(0, len(text))
        limit = rng.randint(start, len(text))
        found = _three_searches(text[start:limit])
        assert _last_item_end(text, start, limit) == (start + found if found >= 0 else -1)


def test_tensorboard_record_longer_than_a_chunk_is_read_when_it_may_be_a_scalar(
    tmp_path, monkeypatch
):
    """The chunk is the read's size, not the bound on a record: an event longer than a chunk
    (a scalar beside a large field) but under LONG_RECORD_BYTES is read, in one read."""
    import struct

    from .test_formats_readers import _framed, _varint

    raw = b"loss"
    item = b"\x0a" + _varint(len(raw)) + raw + b"\x15" + struct.pack("<f", 0.5)
    summary = b"\x0a" + _varint(len(item)) + item
    padding = b"x" * 50_000  # field 3 (file_version): a string the reader passes over
    event = (
        b"\x09"
        + struct.pack("<d", 1.7e9)
        + b"\x10"
        + _varint(250)
        + b"\x1a"
        + _varint(len(padding))
        + padding
        + b"\x2a"
        + _varint(len(summary))
        + summary
    )
    path = tmp_path / "events.out.tfevents.1.host"
    path.write_bytes(_regular_run(50) + _framed(event) + _scalar_event(251, "loss", 0.25))
    monkeypatch.setattr(tensorboard, "CHUNK_BYTES", 2**12)
    sizes = []
    real_open = type(path).open

    class Counting:
        def __init__(self, handle):
            self.handle = handle

        def __getattr__(self, name):
            return getattr(self.handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

        def read(self, size=-1):
            data = self.handle.read(size)
            sizes.append(len(data))
            return data

    monkeypatch.setattr(
        type(path), "open", lambda self, *a, **k: Counting(real_open(self, *a, **k))
    )
    log = to_parsed_log(read_tensorboard(path)).log
    assert log.metrics["step"].to_list() == list(range(200, 252))
    assert log.metrics["loss"][-2:].to_list() == [0.5, 0.25]
    assert max(sizes) < 2 * len(event)  # the long record's rest in one read, not chunk by chunk
    assert sum(1 for s in sizes if s > 2**12) == 1
