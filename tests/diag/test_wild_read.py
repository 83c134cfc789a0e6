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

pytestmark = pytest.mark.skipif(
    not WILD.is_dir(), reason="the real-log corpus shared/wild is absent"
)


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
    assert log.metrics["loss"].null_count() == 0
    assert log.metrics["lr"].null_count() == 0
    assert any("preset llama-factory (detected)" in n for n in log.notes)


def test_lightning_step_and_epoch_columns_map_per_step_first():
    path = wild("Awritrojit__AIOPS_learning_mnist/lightning_logs/version_3/metrics.csv")
    log = load_log(path)
    first = log.metrics.row(0, named=True)
    # acc_step / train_loss_step on the first line: 0.921875 and 0.644082...
    assert first["acc"] == pytest.approx(0.921875)
    assert first["loss"] == pytest.approx(0.644082248)
    assert converge_json(path)["windows"]


def test_lightning_val_loss_is_validation_not_train():
    log = load_log(wild("DanyaSH759__MLOps_homework/lightning_logs/version_0/metrics.csv"))
    evals = [e for e in log.events if e.kind == "eval"]
    assert evals
    assert all("loss" in e.fields for e in evals)
    assert log.metrics["loss"].null_count() == 0  # train_loss only: no val row became a record


def test_nothing_maps_names_the_series_found_and_a_field_line():
    result = invoke("converge", wild("gi7014__SunXiaochuan-V1/trainer_log.jsonl"))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "Traceback" not in result.output
    assert "numeric series found: percentage" in lines[0]
    assert "--field loss=" in lines[0]


def test_nothing_maps_suggests_the_loss_like_series(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(
        "".join(json.dumps({"step": i, "my_weird_loss": 1.0 / i}) + "\n" for i in range(1, 30))
    )
    with pytest.raises(DiagError, match="map them: --field loss=my_weird_loss"):
        load_log(path)


def test_records_with_another_trainers_event_key_are_metric_records(tmp_path):
    lines = [
        json.loads(line)
        for line in wild("AolinGuo__graduate_agent/trainer_log.jsonl").read_text().splitlines()
    ]
    lines = [r for r in lines if "loss" in r]
    path = tmp_path / "events.jsonl"
    path.write_text(
        "".join(
            json.dumps({"event": "step", "step": r["current_steps"], "train/loss": r["loss"]})
            + "\n"
            for r in lines
        )
    )
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
    assert (
        load_log(path).metrics.height
        == load_log(wild("Tashu014__lora-imdb-distilbert/trainer_state.json")).metrics.height
    )


def test_git_lfs_pointer_gets_one_clear_line():
    result = invoke("converge", wild("Observer-18__nlp/trainer_log.jsonl"))
    assert result.exit_code == 2
    assert "Git LFS pointer" in result.stderr


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
    assert f"read {richer}" in note
    assert "records" in note
    assert log.metrics.height == max(tb.metrics.height, hf.metrics.height)


def test_folder_whose_first_source_maps_nothing_reads_the_other(tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "hf_trainer", out)
    (out / "runs").mkdir()
    shutil.copy(wild("gi7014__SunXiaochuan-V1/trainer_log.jsonl"), out / "runs" / "x.jsonl")
    shutil.copytree(FIXTURES / "lightning" / "lightning_logs", out / "lightning_logs")
    log = load_log(out)
    assert log.metrics.height
    assert any("the folder holds" in n for n in log.notes)


def test_mlflow_store_of_deleted_runs_only_is_read_with_a_note(tmp_path):
    import shutil

    run = "24005fa4a9124421b61899b4a82e6510"  # lifecycle_stage: deleted
    shutil.copytree(
        wild(f"Awritrojit__AIOPS_learning_mnist/mlruns/0/{run}"), tmp_path / "mlruns" / "0" / run
    )
    log = load_log(tmp_path / "mlruns")
    assert log.metrics.height
    assert any("only deleted runs" in n for n in log.notes)


# -- class 5, 6: console shapes, epoch-local counters ----------------------------------------------


def _console(tmp_path, text: str):
    path = tmp_path / "train.log"
    path.write_text(text)
    return load_log(path)


def test_hf_trainer_console_dicts_take_the_progress_bar_step(tmp_path):
    bar = " {p}%|#    | {n}/500 [00:10<01:30,  4.9it/s]"
    record = "{{'loss': {:.3f}, 'grad_norm': 1.0, 'learning_rate': 4e-05, 'epoch': {:.2f}}}\n"
    text = "***** Running training *****\n" + "".join(
        "\r"
        + bar.format(p=i, n=i * 10)
        + (record.format(5 - i * 0.1, i / 50) if i % 5 == 0 else "")
        for i in range(1, 41)
    )
    text += "{'eval_loss': 3.95, 'eval_runtime': 2.1, 'epoch': 0.8}\n"
    log = _console(tmp_path, text)
    assert log.metrics["step"].to_list() == list(range(50, 401, 50))
    assert log.metrics["lr"].null_count() == 0
    assert [e.fields.get("loss") for e in log.events if e.kind == "eval"] == [3.95]


def test_epoch_local_step_counter_becomes_a_global_step(tmp_path):
    text = "".join(
        f"Epoch {e} | Step {s}/30 | Loss: {9 - e - s / 30:.4f} | LR: 5.97e-05\n"
        for e in range(3)
        for s in (10, 20, 30)
    )
    log = _console(tmp_path, "\n" * 250 + text)  # the first step line after line 200
    assert log.metrics["step"].to_list() == [10, 20, 30, 40, 50, 60, 70, 80, 90]


def test_batch_counter_within_epochs(tmp_path):
    text = "".join(
        f"ep: {e}, batch: {b}, lr: 0.1, loss: {10 - e - b / 100:.2f}\n"
        for e in range(2)
        for b in (20, 40)
    )
    assert _console(tmp_path, text).metrics["step"].to_list() == [20, 40, 60, 80]


def test_validation_console_lines_are_validation_not_train(tmp_path):
    log = _console(
        tmp_path,
        "step 100: train loss 2.0123, val loss 2.1456\n"
        "Validation - Step 200, Loss: 2.3, Acc: 0.4\n"
        "Val | Step 300 | loss=2.2\n"
        "Train - Step 200, Loss: 1.9, Acc: 0.5\n"
        "Train - Step 300, Loss: 1.8, Acc: 0.55\n",
    )
    assert log.metrics.select("step", "loss").rows() == [(100, 2.0123), (200, 1.9), (300, 1.8)]
    evals = {e.step: e.fields for e in log.events if e.kind == "eval"}
    assert evals == {100: {"loss": 2.1456}, 200: {"loss": 2.3, "acc": 0.4}, 300: {"loss": 2.2}}


def test_nanogpt_iter_lines_and_avg_loss_pairs(tmp_path):
    log = _console(
        tmp_path,
        "".join(
            f"iter {i}: loss {4 - i / 100:.4f}, time 12.3ms, mfu 3.4%\n" for i in range(0, 50, 10)
        ),
    )
    assert log.metrics["loss"].to_list() == [4.0, 3.9, 3.8, 3.7, 3.6]
    log = _console(
        tmp_path, "[step 50] avg_loss=0.0008 acc=0.4800\n[step 100] avg_loss=0.0007 acc=0.5000\n"
    )
    assert log.metrics.select("loss", "acc").rows() == [(0.0008, 0.48), (0.0007, 0.5)]


def test_tab_separated_step_table(tmp_path):
    path = tmp_path / "loss.tsv"
    path.write_text("step\tloss\n" + "".join(f"{i}\t{3 - i / 100}\n" for i in range(1, 11)))
    log = load_log(path)
    assert log.metrics["loss"].len() == 10
    assert "read as CSV metrics" in log.notes[0]


# -- class 2: HF Trainer's own TensorBoard tags; a drafter log's own names ------------------------


def _event_file(path: Path, rows: list[tuple[int, dict[str, float]]]) -> Path:
    from tests.diag.test_formats_readers import VERSION, _scalar_event

    path.mkdir(parents=True, exist_ok=True)
    events = [VERSION] + [
        _scalar_event(step, tag, value) for step, values in rows for tag, value in values.items()
    ]
    (path / "events.out.tfevents.1719642696.host.1.0").write_bytes(b"".join(events))
    return path


def test_hf_trainer_tensorboard_tags_read_with_no_flags(tmp_path):
    # the tags HF Trainer's TensorBoardCallback writes (as in a real run's runs/<date>/ folder)
    rows = [
        (
            s,
            {
                "train/loss": 3 - s / 100,
                "train/learning_rate": 5e-5 * (1 - s / 1000),
                "train/grad_norm": 1.5,
                "train/epoch": s / 100,
            },
        )
        for s in range(10, 510, 10)
    ]
    rows += [
        (
            s,
            {
                "eval/loss": 2.9 - s / 200,
                "eval/accuracy": 0.3 + s / 2000,
                "eval/runtime": 4.2,
                "eval/samples_per_second": 90.0,
            },
        )
        for s in (250, 500)
    ]
    run = _event_file(tmp_path / "runs" / "Jun29_06-31-19_host", rows)
    log = load_log(run)
    assert any("preset hf-trainer-tensorboard (detected)" in n for n in log.notes)
    assert not any("never in the log" in n for n in log.notes)
    assert log.metrics.height == 50
    assert log.metrics["lr"].null_count() == 0
    assert log.metrics["grad_norm"].null_count() == 0
    evals = [e for e in log.events if e.kind == "eval"]
    assert [(e.step, e.fields["loss"], e.fields["acc"]) for e in evals] == [
        (250, pytest.approx(1.65), pytest.approx(0.425)),
        (500, pytest.approx(0.4), pytest.approx(0.55)),
    ]
    assert not any(
        e.kind == "run_start" and e.fields.get("preset") == "specforge-dflash" for e in log.events
    )


def test_eagle3_positions_with_a_plain_lr_are_not_warned_missing(tmp_path):
    # AngelSlim's EAGLE-3 trainer: train/acc_0 .. train/acc_6 and a plain lr
    rows = [
        (s, {**{f"train/acc_{i}": 0.8 - 0.1 * i + s / 1e4 for i in range(7)}, "lr": 1e-4})
        for s in range(10, 310, 10)
    ]
    log = load_log(_event_file(tmp_path / "run", rows))
    assert not any("never in the log" in n for n in log.notes), log.notes
    assert log.metrics["lr"].null_count() == 0
    assert log.metrics["acc"].null_count() == 0


# -- class 7: duplicate writers, epoch summaries ---------------------------------------------------


def test_two_writers_are_one_finding_not_a_restart_per_step(tmp_path):
    real = [
        json.loads(line)
        for line in wild("AolinGuo__graduate_agent/trainer_log.jsonl").read_text().splitlines()
    ]
    path = tmp_path / "train.jsonl"
    path.write_text(
        "".join(
            json.dumps({"step": r["current_steps"], "loss": r["loss"]}) + "\n"
            for r in real
            if "loss" in r
            for _ in range(2)
        )
    )
    result = invoke("converge", path, "-f", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["restarts"] == []
    assert result.stderr.count("repeat the step of the record before them") == 1


def test_one_repeated_step_stays_a_restart(tmp_path):
    path = tmp_path / "train.jsonl"
    steps = [*list(range(1, 40)), 39, *list(range(40, 60))]
    path.write_text("".join(json.dumps({"step": s, "loss": 3 - s / 100}) + "\n" for s in steps))
    assert len(json.loads(invoke("converge", path, "-f", "json").stdout)["restarts"]) == 1


def test_epoch_summary_row_is_validation_not_an_entry_or_a_restart(tmp_path):
    path = tmp_path / "log.jsonl"
    lines = []
    for epoch in range(3):
        for step in range(epoch * 100 + 10, epoch * 100 + 101, 10):
            lines.append({"epoch": epoch, "step": step, "train_loss": 3 - step / 100})
        lines.append(
            {
                "epoch": epoch,
                "step": epoch * 100 + 100,
                "train_loss": 9.0,
                "val_loss": 2.5 - epoch / 10,
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = load_log(path)
    assert log.metrics.height == 30
    assert 9.0 not in log.metrics["loss"].to_list()
    assert [e.fields["loss"] for e in log.events if e.kind == "eval"] == [2.5, 2.4, 2.3]
    assert json.loads(invoke("converge", path, "-f", "json").stdout)["restarts"] == []


# -- choosing among runs (issue 19): newest W&B run, largest global step, numeric versions --------


def test_wandb_folder_with_two_offline_runs_reads_the_newest_and_names_it(tmp_path):
    import shutil

    source = next((FIXTURES / "speculators" / "wandb").glob("*run-*"))
    wandb = tmp_path / "wandb"
    older = wandb / "offline-run-20240101_000000-aaaa"
    newer = wandb / "run-20250101_000000-bbbb"  # a synced run's name sorts after "offline-"
    shutil.copytree(source, older)
    shutil.copytree(source, newer)
    for run, name in ((older, "aaaa"), (newer, "bbbb")):
        for file in run.glob("*.wandb"):
            file.rename(run / f"run-{name}.wandb")
    log = load_log(wandb)
    assert any(f"read {newer / 'run-bbbb.wandb'}" in n for n in log.notes), log.notes
    newest = wandb / "offline-run-20260101_000000-cccc"
    shutil.copytree(newer, newest)
    log = load_log(wandb)
    assert any("offline-run-20260101_000000-cccc" in n for n in log.notes), log.notes


def test_hf_output_folder_takes_the_largest_global_step_whatever_the_mtimes(tmp_path):
    import os
    import shutil

    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "hf_trainer", out)
    late = out / "checkpoint-260" / "trainer_state.json"
    early = out / "checkpoint-130" / "trainer_state.json"
    os.utime(late, (1_000_000_000, 1_000_000_000))  # the latest state has the oldest mtime
    os.utime(early, (2_000_000_000, 2_000_000_000))
    log = load_log(out)
    assert any("checkpoint-260" in n for n in log.notes)
    assert log.metrics["step"].max() == load_log(late).metrics["step"].max()


def test_lightning_version_10_is_newer_than_version_9(tmp_path):
    import shutil

    logs = tmp_path / "lightning_logs"
    for version in (9, 10):
        shutil.copytree(
            wild(f"0Xero7__slm_training/lightning_logs/version_{11 if version == 10 else 9}"),
            logs / f"version_{version}",
        )
    log = load_log(logs)
    assert any("version_10/metrics.csv" in n for n in log.notes), log.notes


# -- epoch-only logs, bare numeric tables, a W&B run's console --------------------------------------


def test_keras_csvlogger_epochs_are_the_steps():
    log = load_log(wild("Aditya24jar__Emotion-Detection-Resnet50/training.log"))
    assert log.metrics["step"].to_list()[:3] == [0, 1, 2]
    assert log.metrics["loss"].null_count() == 0
    assert log.metrics["acc"].null_count() == 0
    assert any("the epoch is the step" in n for n in log.notes)
    assert {e.step for e in log.events if e.kind == "eval" and "acc" in e.fields} == set(
        log.metrics["step"].to_list()
    )  # val_accuracy: validation, at every epoch


def test_epoch_console_lines_qualify_their_names():
    # "Epoch 1/35, Train Loss: 1.6279, Test Acc: 59.86%": the test accuracy is no train accuracy
    log = load_log(wild("5697526__CIFAR-10-Network/training.log"))
    assert log.metrics.select("step", "loss").row(0) == (1, 1.6279)
    assert log.metrics["acc"].null_count() == log.metrics.height
    assert [e.fields["acc"] for e in log.events if e.kind == "eval"][:2] == [59.86, 69.33]


def test_wandb_run_files_folder_reads_its_console():
    run = wild(
        "Laksh-Mendpara__MLOps-Laksh-B23CS1037/HuggingFace-A/wandb/"
        "run-20260221_102153-bmkwwwfc/files"
    )
    log = load_log(run)
    assert log.metrics.select("step", "loss", "acc").row(0) == (1, 0.4929, 85.20)
    assert not any("specforge" in n for n in log.notes)  # Train Acc / Val Acc are anyone's names
    empty = invoke(
        "converge",
        wild(
            "Laksh-Mendpara__MLOps-Laksh-B23CS1037/HuggingFace-A/wandb/"
            "run-20260221_102344-p26h6vze/files"
        ),
    )
    assert empty.exit_code == 2
    assert "no progress line" in empty.stderr


@pytest.mark.parametrize(
    ("relative", "name", "first"),
    [
        ("Brokenwind__BertSimilarity/logs/loss.log", "loss", (0, 1.0218862)),  # "value step" lines
        (
            "Ipiano__MNistClassifier/logs/250-epochs_4294967296-data_100-minibatch/train.log",
            "acc",
            (1, 43.513),
        ),  # a header line naming it, one value a line
    ],
)
def test_bare_numeric_tables(relative, name, first):
    log = load_log(wild(relative))
    assert log.metrics.select("step", name).row(0) == pytest.approx(first)
    assert "read as numeric table" in log.notes[0]


def test_tensorboard_run_of_lfs_pointers_is_named(tmp_path):
    run = tmp_path / "runs" / "Mar28_20-40-13_host"
    run.mkdir(parents=True)
    (run / "events.out.tfevents.1711658414.host.177.0").write_bytes(
        wild("Observer-18__nlp/trainer_log.jsonl").read_bytes()
    )  # a real LFS pointer's bytes
    result = invoke("converge", tmp_path)
    assert result.exit_code == 2
    assert "Git LFS pointers" in result.stderr


# -- JSON documents, records that say nothing of learning ---------------------------------------


def test_keras_history_document_reads_one_record_per_epoch(tmp_path):
    real = wild(
        "A-SHOJAEI__adaptive-gating-network-for-heterogeneous-tabular-ensembles/"
        "results/training_history.json"
    )
    log = load_log(real)
    assert log.metrics.select("step", "acc").rows() == [(0, pytest.approx(0.95757142857))]
    assert [e.fields["acc"] for e in log.events if e.kind == "eval"] == [0.852]
    # the same shape on one line, over several epochs
    path = tmp_path / "history.json"
    path.write_text(json.dumps({"loss": [2.0, 1.5, 1.2], "val_loss": [2.1, 1.7, 1.8]}))
    assert load_log(path).metrics["loss"].to_list() == [2.0, 1.5, 1.2]


def test_a_json_document_of_another_schema_gets_one_line():
    result = invoke("watch", "--once", wild("JamalJane__Jarvis/trainer_state.json"))
    assert result.exit_code == 2
    assert "one JSON document, not a log of JSON lines" in result.stderr


def test_records_of_lr_only_are_no_reading(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(
        "".join(
            json.dumps({"step": s, "learning_rate": 1e-4, "nll_bits": 3 - s / 9}) + "\n"
            for s in range(1, 20)
        )
    )
    with pytest.raises(DiagError, match="numeric series found: learning_rate"):
        load_log(path)


def test_a_loss_with_a_unit_suffix_is_the_loss():
    log = load_log(wild("Chickaboo__NeuroZip/metrics.jsonl"))
    assert log.metrics["loss"].null_count() == 0
    assert any("loss" in e.fields for e in log.events if e.kind == "eval")


def test_rich_wrapped_speculators_records_keep_their_step(tmp_path):
    # vLLM speculators' trainer logs through rich's RichHandler: one record wraps onto indented
    # lines, the source column (trainer.py:220) at the right of the first
    record = (
        "[16:10:{sec:02d}] INFO     train/loss_0={l0:.3f}, train/full_acc_0={a0:.3f},"
        "        trainer.py:220\n"
        "                    train/cond_acc_0={a0:.3f}, train/loss_1=7.629,\n"
        "                    train/full_acc_1={f1:.4f}, train/cond_acc_1={a1:.3f},\n"
        "                    train/loss={loss:.3f}, epoch=0,\n"
        "                    lr=5.00e-04, global_step={step}\n"
    )
    text = "Requirement already satisfied: accelerate<=1.13.0 (1.13.0)\n" + "".join(
        record.format(
            sec=i,
            l0=7 - i / 10,
            a0=0.04 + i / 100,
            f1=(0.04 + i / 100) * 0.5,
            a1=0.5,
            loss=22 - i / 5,
            step=50 * i,
        )
        for i in range(12)
    )
    log = _console(tmp_path, text)
    assert log.metrics["step"].to_list() == [50 * i for i in range(12)]
    assert log.metrics["loss"].to_list()[:2] == [22.0, 21.8]
    assert log.metrics["acc_pos"].to_list()[0] == [0.04, 0.5]
    assert any("preset speculators (detected)" in n for n in log.notes)
    assert not any("never in the log" in n for n in log.notes)


def test_keras_tensorboard_train_and_validation_runs_are_one_run(tmp_path):
    # Keras' TensorBoard callback: <log_dir>/train and <log_dir>/validation, TF2 tensor scalars
    # with the same tags; the validation folder is written last
    import os

    from tests.diag.test_formats_readers import VERSION, _tensor_event

    def write(folder: Path, stamp: int, rows) -> None:
        folder.mkdir(parents=True)
        path = folder / f"events.out.tfevents.{stamp}.host.1.v2"
        path.write_bytes(
            VERSION
            + b"".join(_tensor_event(e, tag, v) for e, values in rows for tag, v in values.items())
        )
        os.utime(path, (stamp, stamp))

    logs = tmp_path / "logs" / "fit" / "20240101-000000"
    write(
        logs / "train",
        1_700_000_000,
        [(e, {"epoch_loss": 2 - e / 10, "epoch_accuracy": 0.5 + e / 100}) for e in range(8)],
    )
    write(
        logs / "validation",
        1_700_000_100,
        [(e, {"epoch_loss": 2.1 - e / 20, "epoch_accuracy": 0.45 + e / 100}) for e in range(8)],
    )
    log = load_log(tmp_path / "logs")
    assert log.metrics["loss"].to_list() == pytest.approx([2 - e / 10 for e in range(8)])
    assert log.metrics["acc"].to_list() == pytest.approx([0.5 + e / 100 for e in range(8)])
    evals = [e for e in log.events if e.kind == "eval"]
    assert [e.fields["loss"] for e in evals] == pytest.approx([2.1 - e / 20 for e in range(8)])
    assert any("Keras' train and validation runs" in n for n in log.notes)


def test_a_counter_leading_the_line_is_the_step(tmp_path):
    log = _console(
        tmp_path,
        "Namespace(batch_size=128, lr=0.0002, max_epoch=200)\n"
        + "".join(
            f"[ ({i} ) Loss:  {0.4 - i / 50:.3f}, train_Acc: {0.9 + i / 100:.5f}, "
            f"valid_Loss: 0.36, valid_Acc: 0.97]\n"
            for i in range(6)
        ),
    )
    assert log.metrics.select("step", "loss", "acc").row(1) == (1, 0.38, 0.91)
    assert len([e for e in log.events if e.kind == "eval"]) == 6
    # a date or a clock time leading a line is no counter
    log = _console(
        tmp_path, "2025-06-04 17:36:55,374 - INFO - step 5 loss=1.5\n12:30:01 step 6 loss=1.4\n"
    )
    assert log.metrics["step"].to_list() == [5, 6]


def test_hf_closing_summary_is_no_training_record(tmp_path):
    state = json.loads(wild("Emon2358__serial-lain-ai/trainer_state.json").read_text())
    summary = [e for e in state["log_history"] if "train_runtime" in e]
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps({**state, "log_history": summary}))
    with pytest.raises(DiagError, match="no series maps to loss or acc"):
        load_log(path)
    full = load_log(wild("Emon2358__serial-lain-ai/trainer_state.json"))
    assert summary[0]["train_loss"] not in full.metrics["loss"].to_list()


def test_one_json_line_without_newline_or_step_gets_one_line_from_every_command(tmp_path):
    path = tmp_path / "val_metrics.json"
    path.write_text(json.dumps({"loss_0_epoch": 2.9, "cond_acc_0_epoch": 0.43}))  # no "\n"
    for command in (("converge",), ("watch", "--once")):
        result = invoke(*command, path)
        assert result.exit_code == 2
        assert "no record has a 'step' field" in result.stderr


def test_validation_frame_names_the_series_alike_for_every_format():
    from dflash_diag.read.validation import validation_frame

    hf = validation_frame(
        load_log(wild("Jaypee34__Sentiment-Analysis-for-Customer-Feedback/trainer_state.json"))
    )
    lightning = validation_frame(
        load_log(wild("DanyaSH759__MLOps_homework/lightning_logs/version_0/metrics.csv"))
    )
    for frame in (hf, lightning):
        assert frame.columns == ["step", "eval_loss", "eval_acc", "eval_tau"]
        assert frame.height
        assert frame["eval_loss"].null_count() == 0
        assert frame["step"].is_sorted()
    assert hf["eval_acc"].null_count() == 0  # HF's eval_accuracy
    state = json.loads(
        wild("Jaypee34__Sentiment-Analysis-for-Customer-Feedback/trainer_state.json").read_text()
    )
    first = next(e for e in state["log_history"] if "eval_loss" in e)
    assert hf.row(0) == (first["step"], first["eval_loss"], first["eval_accuracy"], None)
