"""From scalars to the canonical log: presets, records merged by step, restarts, warnings."""

from __future__ import annotations

import polars as pl
import pytest

from dflash_diag.errors import DiagError
from dflash_diag.read.formats.canonical import RowCollector, Scalars, to_parsed_log
from dflash_diag.read.formats.load import split_per_input
from dflash_diag.read.presets import PRESETS, detect_preset, get_preset, numbered_pattern


def scalars(rows: list[tuple[object, dict]]) -> Scalars:
    collector = RowCollector()
    for step, record in rows:
        collector.add(record, step=step)
    return Scalars(frame=collector.frame(), format="test")


def test_train_and_eval_at_one_step_merge_and_only_a_rewind_restarts():
    log = to_parsed_log(
        scalars(
            [
                (10, {"loss": 2.0, "learning_rate": 1e-3}),
                (10, {"eval_loss": 2.2}),  # HF's eval entry at the train step: not a restart
                (20, {"loss": 1.5, "learning_rate": 9e-4}),
                (15, {"loss": 1.7, "learning_rate": 9e-4}),  # resumed from an earlier checkpoint
                (20, {"loss": 1.4, "learning_rate": 8e-4}),
            ]
        ),
        preset=get_preset("hf-trainer"),
    ).log
    assert log.metrics.select("seq", "step", "loss").rows() == [
        (1, 10, 2.0),
        (2, 20, 1.5),
        (3, 15, 1.7),
        (4, 20, 1.4),
    ]
    assert [(e.step, e.fields["loss"]) for e in log.evals] == [(10, 2.2)]
    from dflash_diag.analysis.restarts import resolve_restarts

    frame, restarts = resolve_restarts(log.metrics)
    assert [(r.step, r.previous_step) for r in restarts] == [(15, 20)]
    assert frame["loss"].to_list() == [2.0, 1.7, 1.4]


def test_torchspec_positions_tau_plus_one_and_eval_step_key():
    rows = []
    for step in (1, 2):
        rows.append(
            (
                None,
                {
                    "train/step": step,
                    "train/avg_loss": 1.0,
                    "train/avg_acc": 0.5,
                    "train/lr": 1e-4,
                    "train/simulated_acc_len": 1.25,
                    **{f"train/acc_{i}": 0.9 - 0.1 * i for i in range(12)},
                },
            )
        )
    rows.append((99, {"eval/step": 2, "eval/simulated_acc_len": 1.5, "eval/avg_acc": 0.4}))
    canonical = to_parsed_log(scalars(rows))
    log = canonical.log
    assert canonical.resolution.preset.name == "torchspec"
    assert canonical.resolution.detected
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.metrics["tau_train"].to_list() == [2.25, 2.25]  # the verified token added
    positions = log.metrics["acc_pos"][0].to_list()
    assert len(positions) == 12
    assert positions[:3] == pytest.approx([0.9, 0.8, 0.7])
    (evaluation,) = log.evals
    assert evaluation.step == 2
    assert evaluation.fields["tau"] == 2.5
    assert log.run_starts[0].fields["block_size"] == 13  # 12 positions + the anchor


def test_eagle3_overall_accuracy_and_loss_from_positions():
    rows = [
        (
            1,
            {
                "train/lr": 1e-4,
                **{f"train/acc_{i}": a for i, a in enumerate([0.8, 0.6, 0.4])},
                **{f"train/ploss_{i}": 1.0 for i in range(3)},
                **{f"train/acceptance_rate_{i}": 0.5 for i in range(3)},
            },
        )
    ]
    canonical = to_parsed_log(scalars(rows))
    row = canonical.log.metrics.row(0, named=True)
    assert canonical.resolution.preset.name == "specforge-eagle3"
    assert row["acc"] == pytest.approx(0.6)  # mean of the positions, not acc_0
    assert row["loss"] == pytest.approx(1 + 0.8 + 0.64)
    assert row["acc_pos"] == pytest.approx([0.8, 0.6, 0.4])


def test_nested_and_dotted_names_are_one_field():
    rows = [(s, {"train": {"full_acc": 0.1 * s, "loss": 1.0}}) for s in (1, 2)]
    rows += [(s, {"train.full_acc": 0.1 * s, "train.loss": 1.0}) for s in (3,)]
    log = to_parsed_log(scalars(rows), preset=get_preset("speculators")).log
    assert log.metrics["acc"].to_list() == pytest.approx([0.1, 0.2, 0.3])
    dotted = to_parsed_log(scalars(rows), fields={"acc": "train.full_acc"}).log
    assert dotted.metrics["acc"].to_list() == pytest.approx([0.1, 0.2, 0.3])


def test_mapped_fields_that_never_occur_are_named():
    canonical = to_parsed_log(
        scalars([(1, {"train/acc": 0.5, "train/loss": 1.0})]),
        fields={"acc": "train/acuracy", "acc_pos": "train/acc_{i}"},
        detect=False,
    )
    assert canonical.notes == ["never in the log: acc=train/acuracy; acc_pos=train/acc_{i}"]
    preset = to_parsed_log(
        scalars([(1, {"train/accuracy": 0.5})]), preset=get_preset("specforge-dflash")
    )
    assert "loss (train/loss)" in preset.notes[0]
    assert "lr (train/lr)" in preset.notes[0]


def test_field_map_of_one_numbered_key_means_its_family():
    assert numbered_pattern("train/acc_0") == r"train/acc_(\d+)"
    assert numbered_pattern("train/position_{k}_acc") == r"train/position_(\d+)_acc"
    with pytest.raises(DiagError):
        numbered_pattern("train/acc")
    rows = [(1, {"loss": 1.0, "p0": 0.9, "p1": 0.5})]
    log = to_parsed_log(scalars(rows), fields={"acc_pos": "p0"}).log
    assert log.metrics["acc_pos"].to_list() == [[0.9, 0.5]]


def test_detection_needs_a_signature():
    assert detect_preset(["loss", "acc", "step"]) is None
    assert detect_preset(["loss_metrics/global_avg_loss", "lr"]).name == "torchtitan"
    assert detect_preset(["train.full_acc", "train.eal"]).name == "speculators"
    with pytest.raises(DiagError, match="known: specforge-dflash"):
        get_preset("nope")
    assert set(PRESETS) == {
        "specforge-dflash",
        "specforge-eagle3",
        "torchspec",
        "speculators",
        "hf-trainer",
        "torchtitan",
        "hf-trainer-tensorboard",
        "lightning",
        "llama-factory",
        "nanogpt",
    }


def test_rows_without_step_are_counted():
    log = to_parsed_log(scalars([(None, {"loss": 1.0}), (1, {"loss": 0.5})])).log
    assert log.issues.without_step == 1
    assert log.metrics.height == 1


def test_per_input_presets_and_fields():
    presets, fields = split_per_input(2, ["specforge-dflash", "torchspec"], ["acc=x", "2:loss=y"])
    assert presets == ["specforge-dflash", "torchspec"]
    assert fields == [["acc=x"], ["acc=x", "loss=y"]]
    assert split_per_input(2, ["auto"], [])[0] == [None, None]
    with pytest.raises(DiagError, match="3 --preset values for 2 inputs"):
        split_per_input(2, ["torchspec"] * 3, [])
    with pytest.raises(DiagError, match="input 3 of 2"):
        split_per_input(2, [], ["3:acc=x"])
    # inputs count from 1: a 0: prefix is no input (it must not map the last one)
    with pytest.raises(DiagError, match="input 0 of 2"):
        split_per_input(2, [], ["0:acc=x"])


def test_long_frame_keys_named_like_columns():
    """A log key called "step" or "time" cannot clash with the pivot's own columns."""
    frame = pl.DataFrame(
        {
            "row": [0, 0, 0],
            "step": [1, 1, 1],
            "key": ["step", "time", "loss"],
            "value": [1.0, 5.0, 2.0],
            "time": [None, None, None],
        },
        schema={
            "row": pl.Int64,
            "step": pl.Int64,
            "key": pl.String,
            "value": pl.Float64,
            "time": pl.Float64,
        },
    )
    log = to_parsed_log(Scalars(frame=frame, format="t")).log
    assert log.metrics.select("step", "loss", "time").rows() == [(1, 2.0, 5.0)]


def _reference_merge(frame: pl.DataFrame, wanted: list[str]) -> pl.DataFrame:
    """The merge by (segment, step) as a hashing group-by (the old implementation)."""
    key = pl.col("key")
    return (
        frame.group_by("_segment", "step")
        .agg(
            pl.col("time").min(),
            *(pl.col("value").filter(key == k).last().alias("k:" + k) for k in wanted),
        )
        .sort("_segment", "step")
    )


@pytest.mark.parametrize("ordered", [True, False])
def test_merge_by_step_matches_a_group_by(ordered):
    """The run-based merge gives each (segment, step) the earliest time and each key's last
    value in row order, as a group-by does, whether or not the rows come in step order."""
    import random

    from dflash_diag.read.formats.canonical import _merge_by_step

    rng = random.Random(7)
    rows = []
    for segment in range(3):
        step = 0
        for _ in range(300):
            step += rng.choice((0, 0, 1, 2))
            key = rng.choice(("loss", "acc", "lr", "other"))
            time = rng.choice((None, rng.random()))
            rows.append((segment, step, key, rng.choice((rng.random(), float("nan"))), time))
    if not ordered:
        rng.shuffle(rows)
    frame = pl.DataFrame(
        rows,
        schema={
            "_segment": pl.UInt32,
            "step": pl.Int64,
            "key": pl.String,
            "value": pl.Float64,
            "time": pl.Float64,
        },
        orient="row",
    )
    wanted = ["acc", "loss", "missing"]
    got = _merge_by_step(frame, wanted)
    assert got.equals(_reference_merge(frame, wanted))
    # one row per record (an MLflow metric file): the rows are the records
    single = frame.unique(["_segment", "step"], keep="first", maintain_order=True)
    assert _merge_by_step(single, wanted).equals(_reference_merge(single, wanted))
    assert _merge_by_step(frame.clear(), wanted).equals(_reference_merge(frame.clear(), wanted))


def test_duplicate_steps_merge_as_a_group_by_over_every_record():
    """Only the runs of a (segment, step) written twice are grouped; the result is the group-by
    over every record it replaces: the earliest time and each key's last non-null value."""
    import random

    from dflash_diag.read.formats.canonical import _merge_duplicate_steps

    rng = random.Random(11)
    rows = []
    for segment in range(2):
        step = 0
        for _ in range(400):
            step += rng.choice((0, 1, 1, 1, 3))
            rows.append(
                (
                    segment,
                    step,
                    rng.choice((None, rng.random())),
                    rng.choice((None, None, rng.random(), float("nan"))),
                    rng.choice((None, rng.random())),
                )
            )
    records = pl.DataFrame(
        rows,
        schema={
            "_segment": pl.UInt32,
            "step": pl.Int64,
            "time": pl.Float64,
            "k:loss": pl.Float64,
            "k:eval_loss": pl.Float64,
        },
        orient="row",
    )
    values = ["k:loss", "k:eval_loss"]
    reference = records.group_by("_segment", "step", maintain_order=True).agg(
        pl.col("time").min(), *(pl.col(c).drop_nulls().last() for c in values)
    )
    got = _merge_duplicate_steps(records)
    assert got.height < records.height
    assert got.equals(reference)
    once = records.unique(["_segment", "step"], keep="first", maintain_order=True)
    assert _merge_duplicate_steps(once) is once
