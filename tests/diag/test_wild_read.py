"""Each reading failure class found on real public logs (issue 17), on a real file of the corpus
in ``shared/wild`` (edge cases such as a byte-order mark are made from a real file's bytes).

The corpus is data in the repository; a test here names the file it reads and what it must get.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import DiagError
from dflash_diag.read.jsonl import load_log

ROOT = Path(__file__).resolve().parents[2]
WILD = ROOT / "shared" / "wild"
FIXTURES = ROOT / "tests" / "fixtures" / "formats"
runner = CliRunner()

pytestmark = pytest.mark.skipif(not WILD.is_dir(), reason="the real-log corpus shared/wild is absent")


def wild(relative: str) -> Path:
    path = WILD / relative
    assert path.exists(), f"corpus file missing: {relative}"
    return path


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def converge_json(path: Path, *flags: str) -> dict:
    result = invoke("converge", path, "-f", "json", *flags)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- class 1: a TensorBoard event file named directly ------------------------------------------

def test_event_file_named_directly_is_read_not_called_utf16():
    event_file = next((FIXTURES / "specforge_dflash" / "runs").glob("events.out.tfevents.*"))
    for flags in ((), ("--input-format", "tensorboard")):
        result = invoke("converge", event_file, *flags)
        assert result.exit_code == 0, result.output
        assert "UTF-16" not in result.output
        assert "read as TensorBoard" in result.stderr


# -- classes 2, 3, 7: other trainers' names ------------------------------------------------------

def test_llama_factory_trainer_log_reads_current_steps_with_no_flags():
    log = load_log(wild("AolinGuo__graduate_agent/trainer_log.jsonl"))
    assert log.metrics["step"].to_list()[:3] == [10, 20, 30]
    assert log.metrics["loss"].null_count() == 0 and log.metrics["lr"].null_count() == 0
    assert any("preset llama-factory (detected)" in n for n in log.notes)


def test_lightning_step_and_epoch_columns_map_per_step_first():
    path = wild("Awritrojit__AIOPS_learning_mnist/lightning_logs/version_3/metrics.csv")
    log = load_log(path)
    first = log.metrics.row(0, named=True)
    # acc_step / train_loss_step on the first line: 0.921875 and 0.644082...
    assert first["acc"] == pytest.approx(0.921875) and first["loss"] == pytest.approx(0.644082248)
    assert converge_json(path)["windows"]


def test_lightning_val_loss_is_validation_not_train():
    log = load_log(wild("DanyaSH759__MLOps_homework/lightning_logs/version_0/metrics.csv"))
    evals = [e for e in log.events if e.kind == "eval"]
    assert evals and all("loss" in e.fields for e in evals)
    assert log.metrics["loss"].null_count() == 0  # train_loss only: no val row became a record


def test_nothing_maps_names_the_series_found_and_a_field_line():
    result = invoke("converge", wild("gi7014__SunXiaochuan-V1/trainer_log.jsonl"))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert "numeric series found: percentage" in lines[0] and "--field loss=" in lines[0]


def test_nothing_maps_suggests_the_loss_like_series(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"step": i, "my_weird_loss": 1.0 / i}) + "\n"
                            for i in range(1, 30)))
    with pytest.raises(DiagError, match="map them: --field loss=my_weird_loss"):
        load_log(path)


def test_records_with_another_trainers_event_key_are_metric_records(tmp_path):
    lines = [json.loads(line) for line in
             wild("AolinGuo__graduate_agent/trainer_log.jsonl").read_text().splitlines()]
    lines = [r for r in lines if "loss" in r]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps({"event": "step", "step": r["current_steps"],
                                        "train/loss": r["loss"]}) + "\n" for r in lines))
    log = load_log(path)
    assert log.metrics.height == len(lines)
    assert log.metrics["loss"].to_list() == [r["loss"] for r in lines]


# -- class 8: a byte-order mark, a zero-filled start ----------------------------------------------

@pytest.mark.parametrize("prefix", [b"\xef\xbb\xbf", bytes(4096), bytes(4096) + b"\n"])
def test_bom_and_zero_filled_start_read_with_no_flags(tmp_path, prefix):
    real = wild("AolinGuo__graduate_agent/trainer_log.jsonl").read_bytes()
    path = tmp_path / "trainer_log.jsonl"
    path.write_bytes(prefix + real)
    log = load_log(path)
    plain = load_log(wild("AolinGuo__graduate_agent/trainer_log.jsonl"))
    assert log.metrics["loss"].to_list() == plain.metrics["loss"].to_list()


def test_bom_trainer_state_reads_with_no_flags(tmp_path):
    real = wild("Tashu014__lora-imdb-distilbert/trainer_state.json").read_bytes()
    path = tmp_path / "trainer_state.json"
    path.write_bytes(b"\xef\xbb\xbf" + real)
    assert load_log(path).metrics.height == load_log(
        wild("Tashu014__lora-imdb-distilbert/trainer_state.json")).metrics.height


def test_git_lfs_pointer_gets_one_clear_line():
    result = invoke("converge", wild("Observer-18__nlp/trainer_log.jsonl"))
    assert result.exit_code == 2 and "Git LFS pointer" in result.stderr
