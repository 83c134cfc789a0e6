"""The training options: every default in --help is the config dataclass's, and flags win."""

from __future__ import annotations

import dataclasses
import re

import pytest

from pipelines.cli import FLAGS, NONE_MEANS, flags_of, main
from pipelines.config import CPU_DRAFTER, PipelineConfig, TrainConfig, build_config, default_of

PROGRAMS = {"sync": TrainConfig, "pipeline": PipelineConfig}


def help_text(program: str, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: nothing wraps
    monkeypatch.setenv("TERMINAL_WIDTH", "400")
    assert main([program, "--help"]) == 0
    return capsys.readouterr().out


def shown_defaults(text: str) -> dict[str, str]:
    """``--flag`` -> the text of its ``[default: ...]`` in the rendered help."""
    out = {}
    for line in text.splitlines():
        m = re.search(r"│ (--[a-z-]+)\b.*\[default: (.*?)\]\s*│", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def expected(cls: type, field: str) -> str:
    value = default_of(cls, field)
    if value is None:
        return f"({NONE_MEANS[field]})"
    if isinstance(value, bool):
        return "log-all-ranks" if value else "no-log-all-ranks"
    return str(value)


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_shows_every_default_from_the_config(program, capsys, monkeypatch):
    cls = PROGRAMS[program]
    shown = shown_defaults(help_text(program, capsys, monkeypatch))
    flags = flags_of(program)
    assert len(flags) >= 22
    for flag in flags:
        name = flag.decls[0].split("/")[0]
        assert name in shown, f"{name} shows no default"
        if flag.field == "progress":
            assert shown[name] == f"({NONE_MEANS['progress']})"
            continue
        assert shown[name] == expected(cls, flag.field), name


def test_the_documented_disagreements_are_gone(capsys, monkeypatch):
    shown = shown_defaults(help_text("pipeline", capsys, monkeypatch))
    assert shown["--eval-every"] == str(PipelineConfig().eval_every) == "20"
    assert shown["--max-steps"] == "80"
    assert shown["--ckpt-every"] == "20"
    assert shown["--seed"] == "0"
    sync = shown_defaults(help_text("sync", capsys, monkeypatch))
    assert sync["--max-steps"] == "200"
    assert sync["--ckpt-every"] == "50"
    assert "--eval-every" not in sync
    assert "--grad-accum" not in sync


def test_every_config_default_matches_an_instance():
    """default_of reads the dataclass, the same default an instance gets."""
    for cls in PROGRAMS.values():
        inst = cls()
        for f in dataclasses.fields(cls):
            if f.name in ("target_devices",):  # filled in by __post_init__
                continue
            assert default_of(cls, f.name) == getattr(inst, f.name), f.name
    assert default_of(TrainConfig, "drafter.block_size") == CPU_DRAFTER["block_size"] == 16


def capture_config(monkeypatch) -> list:
    """Run the CLI up to the config, not the training: the config it would train with."""
    from pipelines import cli

    seen = []

    def fake_run(program, cfg):
        seen.append(cfg)

    monkeypatch.setattr(cli, "_run", fake_run)
    return seen


def test_flags_reach_the_config_and_win_over_the_file(tmp_path, monkeypatch):
    seen = capture_config(monkeypatch)
    f = tmp_path / "c.toml"
    f.write_text(
        "peak_lr = 1e-3\nmin_lr = 1e-5\nseed = 4\n[pipeline]\nmax_steps = 50\n"
        "[drafter]\nblock_size = 8\nnum_anchors = 4\n"
    )
    assert (
        main(
            [
                "pipeline",
                "--config",
                str(f),
                "--lr",
                "2e-4",
                "--warmup-steps",
                "5",
                "--schedule",
                "linear",
                "--draft-layers",
                "2",
                "--resume-schedule",
                "restart",
                "--progress-every",
                "7",
                "--progress-seconds",
                "1.5",
            ]
        )
        == 0
    )
    cfg = seen[-1]
    assert (cfg.peak_lr, cfg.min_lr, cfg.warmup_steps, cfg.schedule) == (2e-4, 1e-5, 5, "linear")
    assert (cfg.seed, cfg.max_steps, cfg.resume_schedule) == (4, 50, "restart")  # file kept
    assert cfg.drafter == {"block_size": 8, "num_anchors": 4, "num_draft_layers": 2}
    assert (cfg.progress_every, cfg.progress_seconds) == (7, 1.5)
    # A flag equal to the built-in default still wins over the file.
    assert main(["pipeline", "--config", str(f), "--seed", "0", "--block-size", "16"]) == 0
    assert seen[-1].seed == 0
    assert seen[-1].drafter["block_size"] == 16


def test_epochs_replaces_max_steps(tmp_path, monkeypatch):
    seen = capture_config(monkeypatch)
    f = tmp_path / "c.toml"
    f.write_text("[sync]\nmax_steps = 50\n")
    assert main(["sync", "--config", str(f), "--epochs", "2.5"]) == 0
    assert seen[-1].epochs == 2.5
    assert seen[-1].for_epochs(10).max_steps == 25
    assert main(["sync", "--epochs", "0.01"]) == 0
    assert seen[-1].for_epochs(10).max_steps == 1
    with pytest.raises(ValueError, match="max_steps and epochs both given"):
        build_config(TrainConfig, None, {"epochs": 1.0, "max_steps": 3})


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["sync", "--schedule", "step"], "schedule must be one of cosine, linear, constant"),
        (
            ["sync", "--resume-schedule", "again"],
            "resume_schedule must be one of continue, restart",
        ),
        (["pipeline", "--lr", "0"], "peak_lr must be > 0"),
        (["sync", "--warmup-steps", "500"], "warmup_steps (500) exceeds the schedule's 200 steps"),
        (["sync", "--epochs", "-1"], "epochs must be a finite number > 0"),
        (["sync", "--block-size", "1"], "[drafter]: block_size"),
        (["sync", "--progress-every", "-1"], "progress_every must be an integer >= 0"),
    ],
)
def test_bad_new_flags_are_one_line(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("dflash-train: error: "), err
    assert needle in err[0], err


def test_every_flag_names_a_config_field():
    fields = {f.name for f in dataclasses.fields(PipelineConfig)}
    for flag in FLAGS:
        assert flag.field in fields or flag.field.split(".")[1] in CPU_DRAFTER, flag


@pytest.mark.parametrize("program", [None, "sync", "pipeline", "eval"])
def test_no_flag_looks_like_it_takes_a_value(program, capsys, monkeypatch):
    """--help, --progress/--no-progress, --log-all-ranks: no '<bool>' value column."""
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("TERMINAL_WIDTH", "400")
    assert main([program, "--help"] if program else ["--help"]) == 0
    text = capsys.readouterr().out
    assert "--help" in text
    assert "<bool>" not in text


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["sync", "--bogus"], "(see dflash-train sync --help)"),
        (["pipeline", "--max-steps", "x"], "(see dflash-train pipeline --help)"),
        (["eval"], "(see dflash-train eval --help)"),
        (["bogus"], "(see dflash-train --help)"),
    ],
)
def test_usage_error_points_at_the_help_of_its_command(capsys, argv, hint):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("dflash-train: error: "), err
    assert err[0].endswith(hint), err


def test_bare_program_is_its_help_and_version_is_one_line(capsys):
    """`dflash-train` alone: the help, exit 0, nothing on stderr (it printed an empty error line
    and exited 2); `dflash-train --version`: one line."""
    assert main([]) == 0
    out, err = capsys.readouterr()
    assert "Usage: dflash-train" in out
    assert err == ""
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    assert re.fullmatch(r"dflash-train \S+\n", out)
    assert err == ""
