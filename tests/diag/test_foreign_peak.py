"""The canonical build's lower-peak paths give the frames the old ones gave, bit for bit.

* duplicate steps merged column by column, the columns taken out of the records (``take``),
  against the old ``filter`` + ``scatter`` of every column and a group-by over every record;
  all-null columns come back as nulls;
* ``acc_pos`` and the positions' mean built from a numpy buffer where every record holds every
  position (the mean a slice of rows at a time), against ``concat_list`` and
  ``mean_horizontal``, NaN values included; records missing a position keep the old path (a
  null list where none is present);
* to_parsed_log with ``release`` holds no column of the reader's wide piece at its end.
"""

from __future__ import annotations

import random
import sys

import polars as pl
import pytest

from dflash_diag.read.formats import canonical
from dflash_diag.read.formats.canonical import Scalars, empty_scalars, to_parsed_log

from .references import frame_bits


def _old_merge(records: pl.DataFrame) -> pl.DataFrame:
    """The merge as it was: every column filtered and scattered into, the input kept."""
    same = (
        (pl.col("_segment") == pl.col("_segment").shift(1))
        & (pl.col("step") == pl.col("step").shift(1))
    ).fill_null(False)
    flags = records.select(same.alias("dup"), same.shift(-1).fill_null(False).alias("next"))
    duplicate, followed = flags["dup"], flags["next"]
    if not duplicate.any():
        return records
    value_columns = [c for c in records.columns if c.startswith("k:")]
    merged = (
        records.filter(duplicate | followed)
        .group_by("_segment", "step", maintain_order=True)
        .agg(pl.col("time").min(), *(pl.col(c).drop_nulls().last() for c in value_columns))
    )
    keep = ~duplicate
    kept = records.select("_segment", "step").filter(keep)
    heads = followed.filter(keep).arg_true()
    return kept.with_columns(
        records[c].filter(keep).scatter(heads, merged[c]) for c in ("time", *value_columns)
    )


def _records(rng: random.Random, n: int, null_time: bool) -> pl.DataFrame:
    rows = []
    step = 0
    for _ in range(n):
        step += rng.choice((0, 1, 1, 2))
        rows.append(
            (
                rng.choice((0, 0, 0, 1)) if rows and rows[-1][0] == 0 else 1,
                step,
                None if null_time else rng.choice((None, rng.random())),
                rng.choice((None, rng.random(), float("nan"))),
                None,  # a key of other records only
                rng.choice((None, None, rng.random())),
            )
        )
    return pl.DataFrame(
        rows,
        schema={
            "_segment": pl.UInt32,
            "step": pl.Int64,
            "time": pl.Float64,
            "k:loss": pl.Float64,
            "k:absent": pl.Float64,
            "k:eval_loss": pl.Float64,
        },
        orient="row",
    ).sort("_segment", "step", maintain_order=True)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("null_time", [False, True])
def test_merge_taken_equals_the_old_merge(seed: int, null_time: bool) -> None:
    records = _records(random.Random(seed), 500, null_time)
    reference = _old_merge(records)
    kept = canonical._merge_duplicate_steps(records)
    assert records.width == 6  # not taken: the caller's frame is whole
    assert frame_bits(kept) == frame_bits(reference)
    taken = canonical._merge_duplicate_steps(records.clone(), take=True)
    assert frame_bits(taken) == frame_bits(reference)
    assert taken.height < records.height
    grouped = records.group_by("_segment", "step", maintain_order=True).agg(
        pl.col("time").min(), *(pl.col(c).drop_nulls().last() for c in records.columns[3:])
    )
    assert frame_bits(taken) == frame_bits(grouped)


def test_merge_takes_the_columns_out() -> None:
    records = _records(random.Random(3), 200, False)
    canonical._merge_duplicate_steps(records, take=True)
    assert records.width == 0  # each column freed as its merged copy was made


def _eagle(rng: random.Random, n: int, gaps: bool) -> Scalars:
    """An EAGLE-3 trainer's wide records: three positions, an eval record every 10 steps at a
    train step (merged with it), and with ``gaps`` records without any or some positions."""
    data: dict[str, list[float | None]] = {
        k: [] for k in ("train/loss", "train/acc_0", "train/acc_1", "train/acc_2", "train/lr")
    }
    data["eval/loss"] = []
    steps: list[int] = []
    for step in range(1, n + 1):
        steps.append(step)
        acc = rng.random()
        missing = rng.random() < 0.1 if gaps else False
        some = rng.random() < 0.5
        data["train/loss"].append(2.5 - acc)
        for k in range(3):
            gone = missing and (not some or k == 1)
            value = float("nan") if rng.random() < 0.02 else acc * 0.85**k * rng.random()
            data[f"train/acc_{k}"].append(None if gone else value)
        data["train/lr"].append(1e-4 * rng.random())
        data["eval/loss"].append(None)
        if step % 10 == 0:
            steps.append(step)
            for key, values in data.items():
                values.append(rng.random() if key == "eval/loss" else None)
    keys = list(data)
    wide = pl.DataFrame(
        {
            "row": pl.Series(range(0, len(steps) * len(keys), len(keys)), dtype=pl.Int64),
            "step": pl.Series(steps, dtype=pl.Int64),
            "time": pl.Series([None] * len(steps), dtype=pl.Float64),
            **{k: pl.Series(v, dtype=pl.Float64) for k, v in data.items()},
        }
    )
    return Scalars(frame=empty_scalars(), format="JSONL", wide=[wide])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("mean_rows", [7, 2**16])
def test_positions_equal_concat_list_and_mean(
    monkeypatch, seed: int, gaps: bool, mean_rows: int
) -> None:
    monkeypatch.setattr(canonical, "_MEAN_ROWS", mean_rows)  # the mean a slice at a time
    scalars = _eagle(random.Random(seed), 400, gaps)
    wide = scalars.wide[0]
    # the merged train records (an eval record adds no position), in step order
    train = wide.filter(pl.col("train/lr").is_not_null())
    positions = [pl.col(f"train/acc_{k}") for k in range(3)]
    any_pos = pl.any_horizontal(p.is_not_null() for p in positions)
    reference = train.select(
        pl.when(any_pos).then(pl.concat_list(positions)).alias("acc_pos"),
        pl.when(any_pos).then(pl.mean_horizontal(positions)).alias("acc"),
        pl.col("train/loss").alias("loss"),
    )
    log = to_parsed_log(scalars, release=True).log
    assert log.metrics.height == train.height
    assert frame_bits(log.metrics.select("acc_pos", "acc", "loss")) == frame_bits(reference)
    assert [e.step for e in log.events if e.kind == "eval"] == list(range(10, 401, 10))
    assert scalars.wide == []


def test_release_holds_no_column_of_the_wide_piece(monkeypatch) -> None:
    """At the build's start nothing but the records refers to the wide piece's buffers (the
    loop over the pieces kept the last one in a local name to the end)."""
    scalars = _eagle(random.Random(1), 300, False)
    held: list[int] = []
    build = canonical._build

    def spy(records, *args):
        frame = sys._getframe(1)  # to_parsed_log's frame
        held.extend(
            id(value)
            for name, value in frame.f_locals.items()
            if isinstance(value, pl.DataFrame) and name != "records" and value.height
        )
        return build(records, *args)

    monkeypatch.setattr(canonical, "_build", spy)
    to_parsed_log(scalars, release=True)
    assert held == []
