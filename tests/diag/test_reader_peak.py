"""The readers' lower-peak paths give the frames the old ones gave, bit for bit.

* trainer_state's pieces joined into numpy buffers (``_WideColumns``) against polars'
  ``concat(how="diagonal_relaxed")`` and one chunk per column, on pieces with keys first seen
  late, nulls, NaN, null steps and a lone piece; and whole states read in small pieces;
* the foreign JSONL scan's colon count a block at a time against ``bytes.count``;
* the scan's wide piece without the all-null filter where a key is in every record.
"""

from __future__ import annotations

import json
import random

import polars as pl
import pytest

from dflash_diag.read.formats import foreign_jsonl_scan, trainer_state
from dflash_diag.read.formats.canonical import contiguous

from .references import frame_bits


def _piece(rng: random.Random, first_row: int, keys: list[str]) -> pl.DataFrame:
    n = rng.randint(1, 40)
    data: dict[str, pl.Series] = {
        "row": pl.Series("row", range(first_row, first_row + n), dtype=pl.Int64),
        "step": pl.Series(
            "step",
            [None if rng.random() < 0.1 else rng.randint(-5, 10**6) for _ in range(n)],
            dtype=pl.Int64,
        ),
    }
    frame = pl.DataFrame(list(data.values())).with_columns(pl.lit(None, pl.Float64).alias("time"))
    values = []
    for key in keys:
        choice = rng.random()
        if choice < 0.15:
            continue  # a key this piece does not hold
        column = [
            None
            if rng.random() < 0.2
            else float("nan")
            if rng.random() < 0.05
            else rng.uniform(-1e6, 1e6)
            for _ in range(n)
        ]
        if choice < 0.25:
            column = [None] * n  # held, with no value
        values.append(pl.Series(key, column, dtype=pl.Float64))
    return frame.with_columns(values) if values else frame


@pytest.mark.parametrize("seed", range(40))
def test_wide_columns_equal_the_diagonal_concat(monkeypatch, seed: int) -> None:
    rng = random.Random(seed)
    all_keys = [f"k{i}" for i in range(6)]
    frames, row = [], 0
    for _ in range(rng.randint(1, 7)):
        keys = rng.sample(all_keys, rng.randint(0, len(all_keys)))
        frame = _piece(rng, row, keys)
        row += frame.height
        frames.append(frame)
    monkeypatch.setattr(trainer_state._WideColumns, "BATCH_ROWS", rng.choice([1, 30, 2**16]))
    joined = _join(frames, hint=rng.choice([1, 2, 50]))
    expected = (
        frames[0] if len(frames) == 1 else contiguous(pl.concat(frames, how="diagonal_relaxed"))
    )
    assert joined.columns == expected.columns
    assert frame_bits(joined) == frame_bits(expected)
    assert all(c.n_chunks() == 1 for c in joined.iter_columns())


def _join(frames: list[pl.DataFrame], hint: int) -> pl.DataFrame:
    columns = trainer_state._WideColumns(hint)
    for frame in frames:
        columns.append(frame)
    return columns.frame()


class _ConcatPieces(trainer_state._WideColumns):
    """The join as it was: the pieces held as frames, concatenated and rechunked."""

    def __init__(self, pieces_hint: int) -> None:
        super().__init__(pieces_hint)
        self.frames: list[pl.DataFrame] = []

    def append(self, frame: pl.DataFrame) -> None:
        self.count += 1
        self.frames.append(frame)

    def frame(self) -> pl.DataFrame:
        if len(self.frames) == 1:
            return self.frames[0]
        return contiguous(pl.concat(self.frames, how="diagonal_relaxed"))


def _state(rng: random.Random, entries: int) -> dict:
    history = []
    for step in range(1, entries + 1):
        entry: dict = {"loss": round(rng.uniform(0, 5), 4), "step": step}
        if rng.random() < 0.7:
            entry["grad_norm"] = round(rng.uniform(0, 3), 4)
        if rng.random() < 0.5:
            entry["learning_rate"] = rng.uniform(0, 1e-3)
        if step > entries // 2 and rng.random() < 0.3:
            entry["eval_loss"] = round(rng.uniform(0, 5), 4)  # a key first seen late
        if rng.random() < 0.05:
            entry = {"eval_loss": round(rng.uniform(0, 5), 4), "step": step}
        history.append(entry)
    return {"global_step": entries, "max_steps": entries * 2, "log_history": history}


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [300, 4096])
def test_trainer_state_reads_the_same(tmp_path, monkeypatch, seed: int, chunk: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(_state(rng, rng.randint(1, 3000))))
    monkeypatch.setattr(trainer_state._Scanner, "CHUNK", chunk)
    monkeypatch.setattr(trainer_state._WideColumns, "BATCH_ROWS", rng.choice([1, 100, 2**16]))
    now = trainer_state.read_trainer_state(path)
    monkeypatch.setattr(trainer_state, "_WideColumns", _ConcatPieces)
    before = trainer_state.read_trainer_state(path)
    assert len(now.wide) == len(before.wide)
    for a, b in zip(now.wide, before.wide, strict=True):
        assert a.columns == b.columns
        assert frame_bits(a) == frame_bits(b)
    assert now.issues == before.issues


def test_trainer_state_with_nan_entries_reads_the_same(tmp_path, monkeypatch) -> None:
    # NaN is no JSON to polars: such pieces take json.loads and from_dicts (NaN kept)
    history = [{"loss": float("nan") if i % 7 == 0 else i / 10, "step": i} for i in range(1, 500)]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({"log_history": history}))
    monkeypatch.setattr(trainer_state._Scanner, "CHUNK", 512)
    now = trainer_state.read_trainer_state(path)
    monkeypatch.setattr(trainer_state, "_WideColumns", _ConcatPieces)
    before = trainer_state.read_trainer_state(path)
    assert [frame_bits(w) for w in now.wide] == [frame_bits(w) for w in before.wide]


@pytest.mark.parametrize("seed", range(20))
def test_colons_counted_in_blocks(monkeypatch, seed: int) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(foreign_jsonl_scan, "_COUNT_BYTES", rng.choice([1, 7, 64, 1000]))
    data = bytes(rng.choice(b'ab:{}",\n') for _ in range(rng.randint(0, 5000)))
    assert foreign_jsonl_scan._colons(data) == data.count(b":")


@pytest.mark.parametrize("every_record", [True, False])
def test_wide_piece_without_the_filter(tmp_path, monkeypatch, every_record: bool) -> None:
    lines = []
    for step in range(1, 400):
        record: dict = {"step": step, "grad_norm": step / 3}
        if every_record or step % 5:
            record["loss"] = step / 7
        lines.append(json.dumps(record))
    if not every_record:
        lines.append(json.dumps({"note": "x"}))  # a record with no number
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    now = foreign_jsonl_scan.read_foreign_jsonl_scan(path, "JSONL", ("step",))
    assert now is not None
    assert len(now.wide) == 1
    wide = now.wide[0]
    keys = [c for c in wide.columns if c not in ("row", "step", "time")]
    # the old rule: the records with no number filtered out, whatever the nulls
    filtered = wide.filter(pl.any_horizontal(pl.col(k).is_not_null() for k in keys))
    assert frame_bits(wide) == frame_bits(filtered)
    assert wide.height == 399


def _native_log(rng: random.Random, n: int) -> bytes:
    lines = [json.dumps({"event": "run_start", "script": "train.py", "block_size": 8})]
    for step in range(1, n + 1):
        record: dict = {"step": step, "loss": round(rng.uniform(0, 5), 4)}
        if rng.random() < 0.6:
            record["acc"] = round(rng.random(), 4)
        if step > n // 3:
            record["tok_per_sec"] = rng.randint(1, 10**6)  # a field first written late
            record["acc_pos"] = [round(rng.random(), 3) for _ in range(rng.randint(1, 5))]
        if rng.random() < 0.05:
            record["lr"] = None
        if step < n // 2:
            record["time"] = 1.7e9 + step  # a field no longer written: nulls in later pieces
        if (step // 50) % 3 == 0:
            record["n_pred"] = rng.randint(0, 64)  # written in bursts
        line = json.dumps(record)
        if rng.random() < 0.03:
            line = line.replace(f'"loss": {record["loss"]}', '"loss": NaN')
        lines.append(line)
        if rng.random() < 0.02:
            lines.append(json.dumps({"event": "eval", "step": step, "tau": rng.uniform(1, 4)}))
        if rng.random() < 0.01:
            lines.append("{not json")
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("lists", [False, True])
def test_native_pieces_joined_the_same(monkeypatch, seed: int, lists: bool) -> None:
    import io

    from dflash_diag.read import jsonl

    rng = random.Random(seed)
    data = _native_log(rng, rng.randint(1, 2500))
    chunk = rng.choice([700, 4096, 2**20])

    def read() -> jsonl.ParsedLog:
        return jsonl.parse_stream(io.BytesIO(data), lists=lists, chunk_bytes=chunk)

    now = read()
    # the join as it was: every column left in the pieces and concatenated at the end
    monkeypatch.setattr(jsonl._NumberColumns, "take", lambda self, piece, n: None)
    before = read()
    assert now.metrics.columns == before.metrics.columns
    assert frame_bits(now.metrics) == frame_bits(before.metrics)
    assert all(c.n_chunks() == 1 for c in now.metrics.iter_columns())
    assert now.events == before.events
    assert now.issues == before.issues
    assert now.chunk_starts == before.chunk_starts


def test_native_pieces_of_a_file(tmp_path, monkeypatch) -> None:
    # a file: the buffers are sized from its bytes
    from dflash_diag.read import jsonl

    path = tmp_path / "train.jsonl"
    path.write_bytes(_native_log(random.Random(5), 3000))

    def read() -> jsonl.ParsedLog:
        with path.open("rb") as handle:
            return jsonl.parse_stream(handle, lists=False, chunk_bytes=5000)

    now = read()
    monkeypatch.setattr(jsonl._NumberColumns, "take", lambda self, piece, n: None)
    before = read()
    assert frame_bits(now.metrics) == frame_bits(before.metrics)
