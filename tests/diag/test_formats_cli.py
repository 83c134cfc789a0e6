"""Every preset, on a log with its trainer's real field names, through converge, compare and
watch --once; the no-flags runs the issue asks for; per-input presets in compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
runner = CliRunner()

#: preset -> a fixture written with that trainer's names (format in the comment)
PRESET_LOGS = {
    "specforge-dflash": "specforge_dflash/runs",  # TensorBoard, by SummaryWriter
    "specforge-eagle3": "specforge_eagle3/mlruns",  # MLflow file store
    "torchspec": "torchspec",  # TensorBoard, by SummaryWriter
    "speculators": "speculators/wandb",  # W&B offline run
    "hf-trainer": "hf_trainer",  # trainer_state.json of a real Trainer run
    "torchtitan": "torchtitan",  # TensorBoard, by SummaryWriter
}


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("preset", sorted(PRESET_LOGS))
def test_each_preset_through_converge_compare_and_watch(preset):
    log = FIXTURES / PRESET_LOGS[preset]
    converge = invoke("converge", log, "--preset", preset, "-f", "json")
    assert converge.exit_code == 0, converge.output
    report = json.loads(converge.stdout)
    assert len(report["windows"]) >= 5
    assert report["verdict"]["status"] == "converging"
    assert f"preset {preset}" in converge.stderr
    compare = invoke("compare", log, "--preset", preset, "-f", "json")
    assert compare.exit_code == 0, compare.output
    assert json.loads(compare.stdout)["regimes"]
    watch = invoke("watch", log, "--once", "--preset", preset)
    assert watch.exit_code == 0, watch.output
    assert "verdict: converging" in watch.stdout


@pytest.mark.parametrize(
    ("log", "estimator"),
    [
        ("specforge_dflash/runs", "linear"),
        ("hf_trainer", None),  # an HF Trainer run is no drafter: no acceptance section
    ],
)
def test_no_flags_give_windows_schedule_acceptance_and_verdict(log, estimator):
    result = invoke("converge", FIXTURES / log, "-f", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert len(report["windows"]) >= 5
    assert report["lr"]["current"] > 0
    assert report["lr"]["phase"] == "decay"
    if estimator is None:
        assert report["acceptance"] is None
        assert not report["drafter"]["is_drafter"]
        assert report["drafter"]["reason"].startswith("no drafter evidence")
    else:
        assert report["acceptance"]["estimator"] == estimator
        assert report["acceptance"]["tau"] > 1
    assert report["verdict"]["status"] == "converging"
    assert "(detected)" in result.stderr


def test_acceptance_conventions_of_the_presets():
    """TorchSpec's chain gets its +1 (tau_train), EAGLE-3 uses the chain of its positions, not a
    linear tau from one position, speculators' eval eal becomes a measured tau."""
    from dflash_diag.converge.report import build_converge_report
    from dflash_diag.read.jsonl import load_log

    def acceptance(log: str):
        return build_converge_report(load_log(FIXTURES / log, lists=False)).acceptance

    torchspec = acceptance("torchspec")
    # its simulated_acc_len + 1 is kept as tau_train (prefix: never primary); the chain of its
    # own per-position accuracies leads, and the two agree
    assert torchspec.estimator == "chain"
    assert torchspec.block_size == 8
    estimates = {e.name: e.tau for e in torchspec.estimates}
    assert estimates["prefix"] == pytest.approx(estimates["chain"], abs=0.02)
    eagle3 = acceptance("specforge_eagle3/mlruns")
    assert eagle3.estimator == "chain"
    assert eagle3.block_size == 8
    assert eagle3.tau < 3
    speculators = acceptance("speculators/wandb")
    assert speculators.estimator == "measured"


def test_compare_a_specforge_run_with_a_torchspec_run_one_preset_each():
    result = invoke(
        "compare",
        FIXTURES / "specforge_dflash" / "runs",
        FIXTURES / "torchspec",
        "--preset",
        "specforge-dflash",
        "--preset",
        "torchspec",
        "-f",
        "json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["alignment"]["windows"]
    notes = " ".join(data["notes"])
    assert "preset specforge-dflash" in notes
    assert "preset torchspec" in notes


def test_compare_field_maps_per_input(tmp_path):
    a = tmp_path / "a.jsonl"
    b = tmp_path / "b.jsonl"
    a.write_text(
        "".join(json.dumps({"step": s, "acc": 0.1, "loss": 1.0}) + "\n" for s in range(1, 200))
    )
    b.write_text(
        "".join(json.dumps({"step": s, "my_acc": 0.2, "loss": 1.0}) + "\n" for s in range(1, 200))
    )
    result = invoke("compare", a, b, "--field", "2:acc=my_acc", "-f", "json")
    assert result.exit_code == 0, result.output
    window = json.loads(result.stdout)["alignment"]["windows"][0]
    assert window["acc_a"] == pytest.approx(0.1)
    assert window["acc_b"] == pytest.approx(0.2)


def test_nested_json_and_a_mapped_field_that_never_occurs(tmp_path):
    log = tmp_path / "nested.jsonl"
    log.write_text(
        "".join(
            json.dumps({"step": s, "train": {"full_acc": 0.2 + s / 1000, "loss": 2.0 - s / 1000}})
            + "\n"
            for s in range(300)
        )
    )
    result = invoke("converge", log, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["acceptance"]["acc"] > 0.2
    typo = invoke(
        "converge", log, "--field", "acc=train/acuracy", "--field", "loss=train.loss", "-f", "json"
    )
    assert typo.exit_code == 0
    assert "never in the log: acc=train/acuracy" in typo.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--input-format", "parquet"],
            "unknown input format 'parquet' (supported: jsonl, tensorboard",
        ),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--input-format", "tensorboard"], "not a TensorBoard event file"),
    ],
)
def test_bad_reading_options_are_one_line(tmp_path, args, message):
    log = tmp_path / "a.jsonl"
    log.write_text(json.dumps({"step": 1, "loss": 1.0}) + "\n")
    result = invoke("converge", log, *args)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_folder_of_no_known_format(tmp_path):
    (tmp_path / "readme.txt").write_text("hello\n")
    result = invoke("converge", tmp_path)
    assert result.exit_code == 2
    assert "cannot tell the format of directory" in result.stderr


def test_native_jsonl_output_is_unchanged_by_the_readers(tmp_path):
    """This project's own logs still take the fast path: no note, same report."""
    from .make_sample_log import generate

    log = tmp_path / "train.jsonl"
    log.write_bytes(generate(seed=3))
    result = invoke("converge", log, "-f", "json")
    assert result.exit_code == 0
    assert result.stderr == ""


def test_watch_rereads_a_changed_trainer_state(tmp_path):
    """Formats that cannot be tailed are read again when their files change, not otherwise."""
    import os

    from dflash_diag.read.formats.load import plan_input, read_planned
    from dflash_diag.watch import LiveLog

    state = tmp_path / "trainer_state.json"

    def write(steps: int, stamp: int) -> None:
        history = [
            {
                "step": s,
                "loss": 2.0 - s / 1000,
                "learning_rate": 1e-4,
                "mean_token_accuracy": 0.1 + s / 1000,
            }
            for s in range(1, steps + 1)
        ]
        state.write_text(json.dumps({"global_step": steps, "log_history": history}))
        os.utime(state, (stamp, stamp))

    write(100, 1_000_000)
    plan = plan_input(str(state))
    assert not plan.native
    assert plan.format == "hf-trainer-state"
    reads = []

    def snapshot():
        reads.append(1)
        return read_planned(plan, 0)

    live = LiveLog(state, snapshot=snapshot, clock=lambda: 1_000_100.0)
    assert live.refresh().new_records == 100
    assert live.refresh().new_records == 0
    assert len(reads) == 1
    write(150, 1_000_050)
    assert live.refresh().new_records == 50
    assert len(reads) == 2
    assert live.last_step == 150


def test_acc_pos_mapped_to_numbered_keys(tmp_path):
    """--field acc_pos=train/acc_0 (one member of the family) assembles every position."""
    log = tmp_path / "flat.jsonl"
    log.write_text(
        "".join(
            json.dumps(
                {
                    "step": s,
                    "loss": 1.0,
                    "acc": 0.3,
                    **{f"p_acc_{i}": 0.9 - 0.1 * i for i in range(4)},
                }
            )
            + "\n"
            for s in range(1, 120)
        )
    )
    from dflash_diag.read.jsonl import load_log

    parsed = load_log(log, fields={"acc_pos": "p_acc_0"})
    assert parsed.metrics["acc_pos"][0].to_list() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    result = invoke("converge", log, "--field", "acc_pos=p_acc_{i}", "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["acceptance"]["estimator"] == "chain"


@pytest.mark.parametrize(
    "log",
    [
        "specforge_dflash_mlflow/mlflow.db",  # MLflow SQLite
        "lightning",  # Lightning CSV (no preset: the keys are the canonical names)
        "specforge_console/train.log",  # console text
        "speculators_jsonl/metrics.jsonl",  # nested JSONL
    ],
)
def test_every_other_format_through_the_three_commands(log):
    path = FIXTURES / log
    converge = invoke("converge", path, "-f", "json")
    assert converge.exit_code == 0, converge.output
    assert json.loads(converge.stdout)["verdict"]["status"] == "converging"
    assert "read as" in converge.stderr
    compare = invoke("compare", path, "-f", "json")
    assert compare.exit_code == 0, compare.output
    watch = invoke("watch", path, "--once")
    assert watch.exit_code == 0, watch.output
    assert "verdict: converging" in watch.stdout
