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


# -- class 4: a folder holding two sources -------------------------------------------------------

def test_folder_with_two_sources_reads_the_richer_and_says_so(tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "hf_trainer", out)
    shutil.copytree(FIXTURES / "specforge_dflash" / "runs", out / "runs")
    log = load_log(out)
    note = next(n for n in log.notes if "the folder holds" in n)
    tb, hf = load_log(out / "runs"), load_log(out / "checkpoint-260")
    richer = "TensorBoard" if tb.metrics.height > hf.metrics.height else "HF trainer_state.json"
    assert f"read {richer}" in note and "records" in note
    assert log.metrics.height == max(tb.metrics.height, hf.metrics.height)


def test_folder_whose_first_source_maps_nothing_reads_the_other(tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "hf_trainer", out)
    (out / "runs").mkdir()
    shutil.copy(wild("gi7014__SunXiaochuan-V1/trainer_log.jsonl"), out / "runs" / "x.jsonl")
    shutil.copytree(FIXTURES / "lightning" / "lightning_logs", out / "lightning_logs")
    log = load_log(out)
    assert log.metrics.height and any("the folder holds" in n for n in log.notes)


def test_mlflow_store_of_deleted_runs_only_is_read_with_a_note():
    log = load_log(wild("Awritrojit__AIOPS_learning_mnist/mlruns"))
    assert log.metrics.height and any("only deleted runs" in n for n in log.notes)


# -- class 5, 6: console shapes, epoch-local counters ----------------------------------------------

def _console(tmp_path, text: str):
    path = tmp_path / "train.log"
    path.write_text(text)
    return load_log(path)


def test_hf_trainer_console_dicts_take_the_progress_bar_step(tmp_path):
    bar = " {p}%|#    | {n}/500 [00:10<01:30,  4.9it/s]"
    record = "{{'loss': {:.3f}, 'grad_norm': 1.0, 'learning_rate': 4e-05, 'epoch': {:.2f}}}\n"
    text = "***** Running training *****\n" + "".join(
        "\r" + bar.format(p=i, n=i * 10)
        + (record.format(5 - i * 0.1, i / 50) if i % 5 == 0 else "") for i in range(1, 41))
    text += "{'eval_loss': 3.95, 'eval_runtime': 2.1, 'epoch': 0.8}\n"
    log = _console(tmp_path, text)
    assert log.metrics["step"].to_list() == list(range(50, 401, 50))
    assert log.metrics["lr"].null_count() == 0
    assert [e.fields.get("loss") for e in log.events if e.kind == "eval"] == [3.95]


def test_epoch_local_step_counter_becomes_a_global_step(tmp_path):
    text = "".join(f"Epoch {e} | Step {s}/30 | Loss: {9 - e - s / 30:.4f} | LR: 5.97e-05\n"
                   for e in range(3) for s in (10, 20, 30))
    log = _console(tmp_path, "\n" * 250 + text)  # the first step line after line 200
    assert log.metrics["step"].to_list() == [10, 20, 30, 40, 50, 60, 70, 80, 90]


def test_batch_counter_within_epochs(tmp_path):
    text = "".join(f"ep: {e}, batch: {b}, lr: 0.1, loss: {10 - e - b / 100:.2f}\n"
                   for e in range(2) for b in (20, 40))
    assert _console(tmp_path, text).metrics["step"].to_list() == [20, 40, 60, 80]


def test_validation_console_lines_are_validation_not_train(tmp_path):
    log = _console(tmp_path, "step 100: train loss 2.0123, val loss 2.1456\n"
                             "Validation - Step 200, Loss: 2.3, Acc: 0.4\n"
                             "Val | Step 300 | loss=2.2\n"
                             "Train - Step 200, Loss: 1.9, Acc: 0.5\n"
                             "Train - Step 300, Loss: 1.8, Acc: 0.55\n")
    assert log.metrics.select("step", "loss").rows() == [(100, 2.0123), (200, 1.9), (300, 1.8)]
    evals = {e.step: e.fields for e in log.events if e.kind == "eval"}
    assert evals == {100: {"loss": 2.1456}, 200: {"loss": 2.3, "acc": 0.4}, 300: {"loss": 2.2}}


def test_nanogpt_iter_lines_and_avg_loss_pairs(tmp_path):
    log = _console(tmp_path, "".join(f"iter {i}: loss {4 - i / 100:.4f}, time 12.3ms, mfu 3.4%\n"
                                     for i in range(0, 50, 10)))
    assert log.metrics["loss"].to_list() == [4.0, 3.9, 3.8, 3.7, 3.6]
    log = _console(tmp_path, "[step 50] avg_loss=0.0008 acc=0.4800\n"
                             "[step 100] avg_loss=0.0007 acc=0.5000\n")
    assert log.metrics.select("loss", "acc").rows() == [(0.0008, 0.48), (0.0007, 0.5)]


def test_tab_separated_step_table(tmp_path):
    path = tmp_path / "loss.tsv"
    path.write_text("step\tloss\n" + "".join(f"{i}\t{3 - i / 100}\n" for i in range(1, 11)))
    assert load_log(path).metrics["loss"].len() == 10
