"""The shared options table (dflash_diag.cli.options): one declaration per option feeds every
command's parameters, the number checks and the configs."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.cli import app
from dflash_diag.cli.options import (
    OPTIONS,
    TUNING,
    Given,
    Group,
    build_config,
    command,
)
from dflash_diag.read.formats.load import ReadOptions

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs" / "train.jsonl"
CONFIGS = {"diagnosis": DiagnosisConfig, "read": ReadOptions}


def _field(cls: type, path: str) -> dataclasses.Field:
    head, _, rest = path.partition(".")
    found = {f.name: f for f in dataclasses.fields(cls)}[head]
    if not rest:
        return found
    assert found.default_factory is not dataclasses.MISSING, path
    return _field(type(found.default_factory()), rest)


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.feeds], ids=lambda o: o.name)
def test_every_option_feeds_a_config_field(option):
    config, _, path = option.feeds.partition(".")
    _field(CONFIGS[config], path)  # raises KeyError for a field that does not exist


def test_defaults_are_the_configs_defaults():
    """Nothing given on the command line is the library's default analysis."""
    given = Given({o.name: o.default for o in OPTIONS})
    assert given.diagnosis() == DiagnosisConfig()
    # the commands read through the parsed-log cache unless --no-cache
    assert given.read() == ReadOptions(cache=True)


def test_build_config_fills_nested_fields_and_keeps_the_rest():
    config = build_config(DiagnosisConfig, {"verdict.alpha": 0.2, "from_step": 5})
    assert config.verdict.alpha == 0.2
    assert config.verdict.min_points == DiagnosisConfig().verdict.min_points
    assert config.from_step == 5
    assert config.trend == DiagnosisConfig().trend


def test_a_group_reaches_every_command_that_takes_it():
    """A new knob in the tuning group is one table entry: every command lists the group."""
    tuning = [o.name for o in OPTIONS if o.group == TUNING]
    for name in ("converge", "compare", "watch"):
        callback = next(c.callback for c in app.registered_commands if c.name == name)
        params = list(inspect.signature(callback).parameters)
        assert set(tuning) <= set(params), name


def test_command_places_own_and_shared_parameters_in_layout_order():
    seen = {}

    @command("log", "alpha", "rows", Group(TUNING))
    def demo(log: str, *, options: Given, rows: int = 3) -> None:
        seen.update(options.values, log=log, rows=rows)

    names = list(inspect.signature(demo).parameters)
    tuning = [o.name for o in OPTIONS if o.group == TUNING and o.name != "alpha"]
    assert names == ["ctx", "log", "alpha", "rows", *tuning]


def test_command_options_reach_the_diagnosis(monkeypatch):
    """converge's flags land in the DiagnosisConfig fields the table names."""
    from dflash_diag.converge import report

    seen = []

    def capture(log, config):
        seen.append(config)
        raise KeyboardInterrupt  # stop before rendering

    monkeypatch.setattr(report, "build_converge_report", capture)
    flags = ["--alpha", "0.2", "--to-step", "300", "--target-tau", "2.5", "--schedule", "linear"]
    flags += ["--phase", "all", "-w", "60", "--noise-aware", "--block-size", "8", "--keep-all"]
    CliRunner().invoke(app, ["converge", str(SAMPLE), *flags])
    (config,) = seen
    assert config.verdict.alpha == 0.2
    assert (config.to_step, config.window, config.phase, config.keep_all) == (300, 60, "all", True)
    assert (config.acceptance.target_tau, config.acceptance.block_size) == (2.5, 8)
    assert config.forecast.schedule == "linear"
    assert config.trend.noise_aware is True


def test_every_tuning_flag_reaches_its_own_field(monkeypatch):
    """The knobs the test above leaves out, each given a value of its own: each lands in the
    field it documents and no other (a flag feeding its neighbour's field, ``--threshold`` into
    the loss threshold, kept the other at its default and passed every other test)."""
    from dflash_diag.converge import report

    seen = []

    def capture(log, config):
        seen.append(config)
        raise KeyboardInterrupt  # stop before rendering

    monkeypatch.setattr(report, "build_converge_report", capture)
    flags = ["--threshold", "0.07", "--loss-threshold", "0.03", "--peak-lr", "0.002"]
    flags += ["--target-acc", "0.6", "--baseline-tau", "2.2", "--target-loss", "1.1"]
    flags += ["--end-step", "900", "--from-step", "5"]
    CliRunner().invoke(app, ["converge", str(SAMPLE), *flags])
    (config,) = seen
    assert (config.trend.acc_threshold, config.trend.loss_threshold) == (0.07, 0.03)
    assert config.peak_lr == 0.002
    assert (config.acceptance.target_acc, config.acceptance.baseline_tau) == (0.6, 2.2)
    assert (config.forecast.target_loss, config.forecast.end_step) == (1.1, 900)
    assert config.from_step == 5


@pytest.mark.parametrize("command_name", ["converge", "compare", "watch"])
def test_the_thresholds_state_their_range_in_help(command_name):
    """Bug guarded (issue 19's fresh audit): an option's ``min`` dropped from the table. The
    config still refuses a negative threshold, so only ``--help`` shows the loss: the range
    the user is told (typer's ``[x>=0.0]``) is the one the analysis enforces."""
    result = CliRunner().invoke(app, [command_name, "--help"], env={"COLUMNS": "200"})
    lines = result.stdout.splitlines()
    for flag in ("--threshold ", "--loss-threshold "):
        line = next(x for x in lines if flag in x)
        assert "[x>=0.0]" in line, line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["converge", "LOG", "--rows", str(2**60)], "--rows"),
        (["converge", "LOG", "--alpha", "nan"], "--alpha"),
        (["compare", "LOG", "--k", str(2**60)], "--k"),
        (["watch", "LOG", "--interval", "inf"], "--interval"),
        (["watch", "LOG", "--history", str(-(2**60))], "--history"),
    ],
)
def test_every_number_a_command_takes_is_checked(args, flag):
    """Own options as well as shared ones: one line, exit 2, naming the flag."""
    args = [str(SAMPLE) if a == "LOG" else a for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"dflash-diag: error: {flag} must be")
    assert result.stderr.count("\n") == 1
