"""Property: whatever the log's bytes and whatever the option values, every command ends with
exit code 0, 1 or 2 and never a traceback (issue 13).

Three generators, each run through converge, compare and watch --once (typer's CliRunner, the real
commands): arbitrary byte strings around a few valid records; JSON records of arbitrary nesting
depth and number size in every field the diagnostics read; arbitrary option values (numbers of
any size, NaN, text, field maps). Bounded example counts, no deadline: a few seconds each.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.logschema import METRIC_LISTS, METRIC_NUMBERS

runner = CliRunner()
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

CLEAN = b"".join(
    json.dumps(
        {"step": s, "loss": 3 - s / 50, "acc": s / 100, "lr": 1e-3, "time": float(s)}
    ).encode()
    + b"\n"
    for s in range(1, 31)
)


def ends_cleanly(args):
    result = runner.invoke(app, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args,
        result.output,
        result.exception,
    )
    assert "Traceback" not in result.output, args
    assert result.exit_code in (0, 1, 2), (args, result.output)
    return result


def every_command(path, *options):
    ends_cleanly(["converge", path, "-f", "json", *options])
    ends_cleanly(["compare", path, "-f", "json", *options])
    ends_cleanly(["watch", path, "--once", *options])


# -- arbitrary bytes -------------------------------------------------------------------------------

lines = st.lists(
    st.one_of(st.binary(max_size=60), st.sampled_from(CLEAN.splitlines())), max_size=12
)


@SETTINGS
@given(st.binary(max_size=400), lines, st.booleans())
def test_arbitrary_bytes_end_with_an_exit_code(tmp_path_factory, raw, mixed, with_clean):
    path = tmp_path_factory.mktemp("bytes") / "log.jsonl"
    path.write_bytes((CLEAN if with_clean else b"") + raw + b"\n" + b"\n".join(mixed))
    every_command(path)


# -- JSON of arbitrary depth and number size ---------------------------------------------------------

numbers = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=6))
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
FIELDS = [
    "step",
    *METRIC_NUMBERS,
    *METRIC_LISTS,
    "event",
    "tau",
    "schedule",
    "block_size",
    "script",
    "rank",
    "resumed_from",
    "config",
    "steps_per_epoch",
    "world_size",
]
EVENTS = st.sampled_from(["run_start", "eval", "checkpoint", "nonfinite", "stop", "metrics"])


@st.composite
def records(draw):
    fields = {
        name: draw(st.one_of(numbers, values))
        for name in draw(st.lists(st.sampled_from(FIELDS), max_size=6, unique=True))
    }
    if draw(st.booleans()):
        fields["event"] = draw(EVENTS)
    text = json.dumps(fields)
    depth = draw(st.sampled_from([0, 0, 1, 50, 500, 1200, 5000]))
    if depth:  # one field nested ``depth`` deep, or the whole line
        inner = "[" * depth + json.dumps(draw(values)) + "]" * depth
        text = (
            (
                text[:-1]
                + (", " if len(text) > 2 else "")
                + f'"{draw(st.sampled_from(FIELDS))}": '
                + inner
                + "}"
            )
            if draw(st.booleans())
            else inner
        )
    return text.encode()


@SETTINGS
@given(st.lists(records(), min_size=1, max_size=6), st.integers(0, 30))
def test_json_of_any_depth_and_number_size_ends_with_an_exit_code(tmp_path_factory, extra, where):
    path = tmp_path_factory.mktemp("json") / "log.jsonl"
    clean = CLEAN.splitlines()
    path.write_bytes(b"\n".join(clean[:where] + extra + clean[where:]) + b"\n")
    every_command(path)


# -- arbitrary option values ------------------------------------------------------------------------

any_value = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=6),
    st.sampled_from(["0", "-1", "1", "nan", "inf", "-inf", "1e400", "", "9" * 40]),
)
field_map = st.builds(
    lambda new, old: f"{new}={old}",
    st.sampled_from([*FIELDS, "bogus", ""]),
    st.sampled_from([*FIELDS, "_line", "x", "", "train/acc"]) | st.text(max_size=4),
)
OPTIONS = {
    "converge": [
        "--window",
        "--from-step",
        "--to-step",
        "--threshold",
        "--loss-threshold",
        "--peak-lr",
        "--block-size",
        "--target-acc",
        "--target-tau",
        "--baseline-tau",
        "--alpha",
        "--rows",
        "--phase",
        "--format",
        "--fail-on",
    ],
    "compare": ["--k", "--window", "--x", "--phase", "--format"],
    "watch": [
        "--interval",
        "--stall",
        "--window",
        "--history",
        "--threshold",
        "--block-size",
        "--target-acc",
        "--phase",
    ],
}


@st.composite
def command_lines(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    args = []
    for flag in draw(st.lists(st.sampled_from(OPTIONS[command]), max_size=3)):
        args += [flag, draw(any_value)]
    for _ in range(draw(st.integers(0, 2))):
        args += ["--field", draw(field_map)]
    return command, args


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(command_lines())
def test_any_option_values_end_with_an_exit_code(tmp_path_factory, command_line):
    path = tmp_path_factory.mktemp("options") / "log.jsonl"
    path.write_bytes(CLEAN)
    command, args = command_line
    extra = ["--once"] if command == "watch" else []
    ends_cleanly([command, path, *extra, *args])
