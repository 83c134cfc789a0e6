"""The MLflow file store's merge by step in the reader (issue 19: memory near the file size).

A run whose lines are in logging order is merged by step by the reader itself, with no row per
value; every other run keeps the long frame. Either way the canonical log must be the one the
long frame gives: checked on every real run of the corpus and on seeded random runs built to
hit each reason for the long frame (restarts, repeated steps, clock going back, lines written
out of step order across files, steps out of range, keys that collide, step keys).
"""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest

from dflash_diag.read.formats.canonical import Canonical, to_parsed_log
from dflash_diag.read.formats.mlflow_store import is_run_folder, read_file_store
from dflash_diag.read.presets import PRESETS

ROOT = Path(__file__).resolve().parents[2]
CORPUS_RUNS = sorted(
    p
    for base in (ROOT / "shared" / "wild", ROOT / "shared" / "wild_heldout", ROOT / "tests")
    for p in base.rglob("meta.yaml")
    if is_run_folder(p.parent)
)


def _write_run(root: Path, files: dict[str, str]) -> Path:
    run = root / "mlruns" / "0" / "r1"
    (run / "metrics").mkdir(parents=True)
    (run / "meta.yaml").write_text("start_time: 5\nlifecycle_stage: active\n")
    for key, text in files.items():
        path = run / "metrics" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "mlruns"


def _canonical(path: Path, *, merged: bool, **kwargs) -> Canonical:
    return to_parsed_log(read_file_store(path, merged=merged), **kwargs)


def _assert_same(path: Path, **kwargs) -> None:
    fast, lines = _canonical(path, merged=True, **kwargs), _canonical(path, merged=False, **kwargs)
    assert fast.log.metrics.equals(lines.log.metrics, null_equal=True)
    assert repr(fast.log.events) == repr(lines.log.events)  # NaN fields: compared as shown
    assert fast.log.issues == lines.log.issues
    assert fast.notes == lines.notes
    assert fast.resolution == lines.resolution
    assert fast.log.next_line_no == lines.log.next_line_no


def test_an_ordered_run_is_merged_by_step_without_a_row_per_value(tmp_path):
    """Three metrics at the same 1000 steps: one wide frame of 1000 records, no long frame, and
    the held frames smaller than the file (the long frame took about 50 bytes a value)."""
    files = {
        key: "".join(f"{1_700_000_000_000 + 10 * s} {s * scale:.6f} {s}\n" for s in range(1000))
        for key, scale in (("loss", 1e-3), ("acc", 1e-4), ("train/lr", 1e-7))
    }
    path = _write_run(tmp_path, files)
    scalars = read_file_store(path)
    assert scalars.frame.height == 0
    (wide,) = scalars.wide
    assert wide.columns == ["row", "step", "time", "acc", "loss", "train/lr"]
    assert wide.height == 1000
    assert wide["step"].to_list() == list(range(1000))
    assert wide["time"][1] == 1_700_000_000.010
    assert all(wide[c].n_chunks() == 1 for c in wide.columns)
    size = sum(len(text) for text in files.values())
    assert wide.estimated_size() < size
    # the long form of the same run: a row per value
    assert read_file_store(path, merged=False).frame.height == 3000


@pytest.mark.parametrize("run", CORPUS_RUNS, ids=lambda p: p.parent.name)
def test_corpus_runs_read_the_same_either_way(run):
    _assert_same(run.parent)


def _random_file(rng: random.Random, start_ts: int, n: int, faults: float) -> str:
    """Lines whose steps rise and whose clock follows the step (as a trainer logs), with
    faults at the rate ``faults``: restarts, repeats, the clock going back, bad steps."""
    lines, step = [], rng.randint(0, 3)
    for _ in range(n):
        fault = rng.random() / max(faults, 1e-9)
        if fault < 0.3:
            step -= rng.randint(1, 5)  # a restart
        elif fault < 0.6:
            pass  # the step again
        else:
            step += rng.randint(1, 3)
        ts = start_ts + 10 * step + rng.choice((0, 0, 1, 3))
        if rng.random() < faults * 0.3:
            ts -= 40  # the clock went back
        value = rng.choice(("nan", "inf", "-inf")) if rng.random() < 0.05 else f"{rng.random():.4f}"
        shown = str(step)
        if rng.random() < faults * 0.1:
            shown = rng.choice(("1e30", "9223372036854775808", "x"))  # out of range, junk
        lines.append(f"{ts} {value} {shown}\n")
    return "".join(lines)


@pytest.mark.parametrize("seed", range(80))
def test_random_runs_read_the_same_either_way(tmp_path, seed):
    rng = random.Random(seed)
    names = ["loss", "acc", "lr", "train/loss", "train.loss", "time", "global_step", "eval/loss"]
    faults = rng.choice((0.0, 0.0, 0.01, 0.05, 0.2))
    files = {
        name: _random_file(rng, 1000 + rng.choice((0, 0, 2, 30)), rng.randint(0, 40), faults)
        for name in rng.sample(names, rng.randint(1, 4))
    }
    path = _write_run(tmp_path, files)
    _assert_same(path)
    _assert_same(path, fields={"step": "global_step"})
    _assert_same(path, fields={"loss": "eval/loss"})


def test_random_clean_runs_are_merged_and_read_the_same(tmp_path):
    """Runs with no fault at all: merged (the fast form) in most cases, and equal."""
    merged = 0
    for seed in range(40):
        rng = random.Random(1000 + seed)
        steps = sorted(rng.sample(range(200), 30))
        files = {}
        for name in rng.sample(["loss", "acc", "lr", "eval/acc"], rng.randint(1, 4)):
            mine = sorted(rng.sample(steps, rng.randint(1, 30)))
            # a clock that follows the step (several metrics logged at one step may share it)
            files[name] = "".join(f"{5000 + 3 * s} {rng.random():.5f} {s}\n" for s in mine)
        folder = tmp_path / str(seed)
        path = _write_run(folder, files)
        merged += bool(read_file_store(path).wide)
        _assert_same(path)
    assert merged == 40


def _lines(*rows: tuple[int, float, int | str]) -> str:
    return "".join(f"{ts} {value} {step}\n" for ts, value, step in rows)


ORDERED = _lines(*((1000 + 10 * s, 1 / (s + 1), s) for s in range(12)))
#: Runs whose lines are not in logging order, each for one reason: the long frame is kept.
KEPT_LONG = {
    "a restart": {"loss": _lines((1000, 3.0, 1), (1010, 2.0, 2), (1020, 2.5, 1), (1030, 1.0, 3))},
    "a repeated step": {"loss": _lines((1000, 3.0, 1), (1010, 2.0, 2), (1020, 2.5, 2))},
    "the clock going back": {"loss": _lines((1000, 3.0, 1), (1010, 2.0, 2), (990, 2.5, 3))},
    # first: a step out of range reads as -2^63, below every step after it
    "a step out of range": {"loss": _lines((1000, 3.0, "1e30"), (1010, 2.0, 2), (1020, 1.0, 3))},
    "a line of a step after a higher one": {
        "loss": _lines((1000, 3.0, 1), (1020, 2.0, 5)),
        "acc": _lines((1010, 0.5, 7), (1030, 0.6, 8)),
    },
    "two files of one key": {"train.loss": ORDERED, "train/loss": ORDERED},
    "a key named like a column of records": {"time": ORDERED, "loss": ORDERED},
}


@pytest.mark.parametrize("files", KEPT_LONG.values(), ids=KEPT_LONG.keys())
def test_runs_out_of_logging_order_keep_the_long_frame(tmp_path, files):
    path = _write_run(tmp_path, files)
    scalars = read_file_store(path)
    assert not scalars.wide
    assert scalars.frame.height == sum(text.count("\n") for text in files.values())
    _assert_same(path)


@pytest.mark.parametrize("boundary", ["rising", "restart", "repeat"])
def test_logging_order_is_checked_across_chunks(tmp_path, monkeypatch, boundary):
    """A metric file read in chunks: the order between one chunk's last line and the next
    chunk's first counts as much as the order inside a chunk."""
    from dflash_diag.read.formats import mlflow_store

    second = {"rising": 6, "restart": 2, "repeat": 5}[boundary]
    text = _lines(*((1000 + s, 0.5, s) for s in range(6))) + _lines((1100, 0.5, second))
    monkeypatch.setattr(mlflow_store, "CHUNK_BYTES", len(text) - 11)  # the last line alone
    path = _write_run(tmp_path, {"loss": text})
    assert bool(read_file_store(path).wide) is (boundary == "rising")
    _assert_same(path)


def test_a_step_out_of_range_alone_in_its_chunk_keeps_the_long_frame(tmp_path, monkeypatch):
    """-2^63 (a step out of range) then rising steps, the first line alone in its chunk (no
    difference of steps spans the two, which would overflow): still not in logging order."""
    from dflash_diag.read.formats import mlflow_store

    first = "1000 3.0 1e30\n"
    monkeypatch.setattr(mlflow_store, "CHUNK_BYTES", len(first))
    path = _write_run(tmp_path, {"loss": first + _lines((1010, 2.0, 2), (1020, 1.0, 3))})
    assert not read_file_store(path).wide
    _assert_same(path)


def test_a_preset_step_key_among_merged_values_reads_the_lines(tmp_path):
    """A step key (Lightning's global_step) moves only its own line: the canonical step reads
    the run's lines instead of the reader's merged records."""
    lightning = next(p for p in PRESETS.values() if "global_step" in p.step_keys)
    files = {
        "global_step": "".join(f"{1000 + s} {s * 10} {s}\n" for s in range(20)),
        "train/loss": "".join(f"{1000 + s} {3 - s / 10} {s}\n" for s in range(20)),
    }
    path = _write_run(tmp_path, files)
    assert read_file_store(path).wide
    _assert_same(path, preset=lightning)
    steps = _canonical(path, merged=True, preset=lightning).log.metrics["step"]
    assert steps.max() == 19  # train/loss keeps its own steps (global_step is no metric)


def test_scalars_of_a_merged_run_unpivot_to_its_values(tmp_path):
    """``long_frame`` of the merged records gives each value once, record by record."""
    files = {
        "acc": "1000 0.5 1\n1010 0.6 2\n",
        "loss": "1000 3.0 1\n1020 2.0 3\n",
    }
    long = read_file_store(_write_run(tmp_path, files)).long_frame()
    assert long.select("step", "key", "value").rows() == [
        (1, "acc", 0.5),
        (1, "loss", 3.0),
        (2, "acc", 0.6),
        (3, "loss", 2.0),
    ]
    assert long["time"].to_list() == [1.0, 1.0, 1.01, 1.02]
    assert long["row"].is_sorted()
    assert pl.Series(long["row"]).n_unique() == 4


def test_canonical_order_checks_agree_with_a_sort():
    """The canonical step's checks without columns of differences (one segment: is the step
    column sorted) say "in order" exactly where a sort by (segment, step) changes nothing, and
    the segments found are those of the rule (a step below the one before starts one)."""
    from dflash_diag.read.formats.canonical import _in_order, _segments

    rng = random.Random(7)
    said_ordered = 0
    for _ in range(300):
        n = rng.randint(0, 7)
        steps = [rng.choice([0, 1, 2, 3]) for _ in range(n)]
        one_segment = rng.random() < 0.5
        segments = [0] * n if one_segment else sorted(rng.choice([0, 1]) for _ in range(n))
        records = pl.DataFrame(
            {"_segment": segments, "step": steps}, schema={"_segment": pl.UInt32, "step": pl.Int64}
        )
        ordered = records.sort("_segment", "step", maintain_order=True)
        assert _in_order(records) is ordered.equals(records), (segments, steps)
        said_ordered += _in_order(records)
        frame = pl.DataFrame(
            {"row": list(range(n)), "step": steps}, schema={"row": pl.Int64, "step": pl.Int64}
        )
        marks, _ = _segments(frame, [])
        expected, segment = [], 0
        for i, step in enumerate(steps):
            segment += i > 0 and step < steps[i - 1]
            expected.append(segment)
        assert marks["_segment"].to_list() == expected, steps
    assert said_ordered > 50
