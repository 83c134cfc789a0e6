"""`--resume-schedule`: what a sync -> pipeline migration does with the lr schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.checkpoints import step_dir
from pipelines.cli import main
from pipelines.log_records import validate_record
from pipelines.schedule import Schedule

from .test_cli import write_toml


def records(log: Path) -> list[dict]:
    out = [json.loads(x) for x in log.read_text().splitlines()]
    for r in out:
        validate_record(r)
    return out


def lrs(recs: list[dict]) -> dict[int, float]:
    return {r["step"]: r["lr"] for r in recs if "event" not in r}


def headers(recs: list[dict]) -> list[dict]:
    return [r for r in recs if r.get("event") == "run_start"]


@pytest.fixture
def migrated(tmp_path, tiny_assets, capsys):
    """sync to step 4 (its schedule ends there, at the floor), then the pipeline to step 8."""

    def run(*pipeline_args: str, sync_args: tuple[str, ...] = (), **toml) -> tuple[list[dict], str]:
        cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path, **toml)
        assert main(["sync", "--config", str(cfg), "--max-steps", "4", *sync_args]) == 0
        capsys.readouterr()
        assert (
            main(
                [
                    "pipeline",
                    "--config",
                    str(cfg),
                    "--max-steps",
                    "8",
                    "--grad-accum",
                    "1",
                    "--eval-every",
                    "0",
                    "--resume",
                    str(step_dir(tmp_path / "ck", 4)),
                    *pipeline_args,
                ]
            )
            == 0
        )
        return records(tmp_path / "train.jsonl"), capsys.readouterr().err

    return run


def test_continue_is_the_default_and_keeps_the_old_schedule(migrated):
    recs, err = migrated()
    lr = lrs(recs)
    assert lr[4] == pytest.approx(6e-5)  # the sync schedule (4 steps) ended at its floor
    assert lr[5] == pytest.approx(6e-5)
    assert lr[8] == pytest.approx(6e-5)
    sync_h, pipe_h = headers(recs)
    assert "resume_schedule" not in sync_h
    assert pipe_h["resume_schedule"] == "continue"
    assert pipe_h["schedule"] == sync_h["schedule"]
    assert "lr schedule continued at step 5: 6.0e-05" in err
    assert "it ended at step 4, so its floor holds" in err
    assert (
        "this config's schedule is not used: --resume-schedule restart starts it here "
        "(cosine 6.0e-04 -> 6.0e-05, from step 5, warmup 1 step, ends at step 8)"
    ) in err


def test_continue_mid_schedule_matches_the_uninterrupted_rates(migrated):
    # An 8-step schedule stopped at step 4: the pipeline goes on with it, warmup of 2 included.
    recs, err = migrated(sync_args=("--warmup-steps", "2"), total_steps=8)
    sched = Schedule.from_dict(headers(recs)[0]["schedule"])
    assert sched.total_steps == 8
    assert headers(recs)[1]["schedule"] == sched.to_dict()
    assert [lrs(recs)[k] for k in range(1, 9)] == pytest.approx(
        [sched.lr_at(k) for k in range(1, 9)]
    )
    assert lrs(recs)[5] > lrs(recs)[8] == pytest.approx(6e-5)
    assert "floor holds" not in err


def test_restart_warms_up_again_from_the_resumed_step(migrated):
    recs, err = migrated("--resume-schedule", "restart", "--warmup-steps", "2")
    lr = lrs(recs)
    assert lr[4] == pytest.approx(6e-5)
    assert lr[5] == pytest.approx(3e-4)  # 1/2 of the peak: the first of 2 warmup steps
    assert lr[6] == pytest.approx(6e-4)
    assert lr[8] == pytest.approx(6e-5)  # cosine down to the floor at --max-steps
    pipe_h = headers(recs)[1]
    assert pipe_h["resume_schedule"] == "restart"
    assert pipe_h["schedule"] == {
        "kind": "cosine",
        "peak_lr": 6e-4,
        "warmup_steps": 2,
        "total_steps": 8,
        "min_lr": 6e-5,
        "start_step": 4,
    }
    assert "lr schedule restarted at step 5: 6.0e-05 -> 3.0e-04" in err
    # The checkpoint carries the restarted schedule, so resuming it again continues it.
    state = json.loads((step_dir(Path(pipe_h["config"]["ckpt_dir"]), 8) / "state.json").read_text())
    assert state["schedule"] == pipe_h["schedule"]


def test_restart_with_the_default_warmup_ratio_and_another_shape(migrated):
    recs, _ = migrated("--resume-schedule", "restart", "--schedule", "linear", "--lr", "1e-3")
    lr = lrs(recs)
    # 0.04 of the 4 steps left rounds up to 1 warmup step: the peak at once, then a straight line.
    assert [lr[k] for k in (5, 6, 7, 8)] == pytest.approx(
        [1e-3, 1e-3 - (1e-3 - 6e-5) / 3, 1e-3 - 2 * (1e-3 - 6e-5) / 3, 6e-5]
    )


def test_restart_past_the_schedule_end_is_one_line(migrated, tmp_path, capsys, tiny_assets):
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path)
    assert main(["sync", "--config", str(cfg), "--max-steps", "4"]) == 0
    capsys.readouterr()
    f = tmp_path / "short.toml"
    f.write_text(cfg.read_text().replace("[drafter]", "total_steps = 3\n[drafter]"))
    assert (
        main(
            [
                "sync",
                "--config",
                str(f),
                "--max-steps",
                "6",
                "--resume",
                str(step_dir(tmp_path / "ck", 4)),
                "--resume-schedule",
                "restart",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the schedule ends at step 3" in err[0], err


def test_the_diagnostics_report_the_restart_of_a_real_migration(migrated, tmp_path):
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    migrated("--resume-schedule", "restart", "--warmup-steps", "2")
    log = str(tmp_path / "train.jsonl")
    runner = CliRunner()
    text = "lr schedule restarted at step 5: 6.0e-05 -> 3.0e-04, warmup 2 steps"
    converge = json.loads(
        runner.invoke(app, ["converge", log, "-f", "json", "--window", "2"]).stdout
    )
    assert [e["text"] for e in converge["schedule_events"]] == [text]
    compare = json.loads(runner.invoke(app, ["compare", log, "-f", "json", "--k", "2"]).stdout)
    assert [b["step"] for b in compare["boundaries"]] == [5]
    assert text in compare["boundaries"][0]["explanation"]
    watch = runner.invoke(app, ["watch", log, "--once", "--window", "2"], env={"COLUMNS": "300"})
    assert text in watch.stdout


def test_the_diagnostics_see_no_restart_when_the_schedule_continued(migrated, tmp_path):
    from typer.testing import CliRunner

    from dflash_diag.cli import app

    migrated()
    out = (
        CliRunner()
        .invoke(app, ["converge", str(tmp_path / "train.jsonl"), "-f", "json", "--window", "2"])
        .stdout
    )
    assert "schedule_events" not in json.loads(out)


def test_continuing_a_restarted_schedule_of_the_same_config_says_nothing_about_it():
    from pipelines.config import TrainConfig
    from pipelines.resume import config_schedule, schedule_for

    cfg = TrainConfig(resume="ck/step-000006", max_steps=10)
    restarted = config_schedule(cfg, start_step=4)  # what a restart at step 4 stored
    sched, note = schedule_for(cfg, 6, restarted.to_dict())
    assert sched == restarted
    assert sched.lr_at(7) == pytest.approx(restarted.lr_at(7))
    assert note.startswith("lr schedule continued at step 7: ")
    assert "not used" not in note
    other = schedule_for(
        TrainConfig(resume="ck", max_steps=10, peak_lr=1e-3), 6, restarted.to_dict()
    )[1]
    assert other.endswith(
        "; this config's schedule is not used: --resume-schedule restart starts "
        "it here (cosine 1.0e-03 -> 6.0e-05, from step 7, warmup 1 step, ends "
        "at step 10)"
    )
