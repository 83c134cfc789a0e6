"""The plain option conversion (dflash_diag.cli.fast_params) gives what typer's own gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from dflash_diag.cli import app
from dflash_diag.cli.fast_params import PlainRuntimeParam, install

ROOT = Path(__file__).resolve().parents[2]

#: Texts for every kind of option: valid numbers, near-misses typer must judge, choices.
VALUES = [
    "0",
    "1",
    "-3",
    "007",
    "12345678901234567890",
    "0.5",
    "-0.25",
    "1e-3",
    "2E+2",
    ".5",
    "5.",
    "1_000",
    " 5",
    "5 ",
    "+5",
    "0x10",
    "inf",
    "nan",
    "-inf",
    "1e999",
    "",
    "abc",
    "auto",
    "json",
    "JSON",
    "pipeline",
    "diverging",
    "target-unreachable",
    "cosine",
    "none",
    "sample_logs/train.jsonl",
    "sample_logs",
    "/nonexistent/log.jsonl",
    "-",
]


def _params():
    group = typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        for param in command.params:
            yield name, param


def _outcome(runtime, value, param, ctx):
    try:  # repr: the value and its type (and a NaN equals a NaN)
        got = runtime.coerce(value, param=param, ctx=ctx)
        return "ok", f"{type(got).__name__} {got!r}"
    except BadParameter as exc:
        return "error", exc.format_message()


def test_every_value_converts_as_typer_converts_it():
    checked = 0
    group = typer.main.get_command(app)
    for name, param in _params():
        install([param])
        plain = param._runtime_param
        if not isinstance(plain, PlainRuntimeParam):
            continue
        ctx = group.commands[name].make_context(name, [], resilient_parsing=True)
        own = build_runtime_param(param.type_descriptor)
        multiple = param.multiple or param.nargs == -1
        for text in VALUES:
            value = (text, "1") if multiple else text
            got = _outcome(plain, value, param, ctx)
            want = _outcome(own, value, param, ctx)
            assert got == want, (name, param.name, text)
            checked += 1
        # defaults pass through the conversion too (a float option's default may be an int)
        if param.default is not None and not callable(param.default):
            assert _outcome(plain, param.default, param, ctx) == _outcome(
                own, param.default, param, ctx
            )
    assert checked > 1000  # the three commands' options, not a vacuous pass


def test_install_is_not_a_no_op_under_the_installed_typer():
    # a typer that moved its coercion layer would silently make every run 0.1 s slower
    group = typer.main.get_command(app)
    params = [p for p in group.commands["converge"].params if p.name in ("alpha", "fmt", "logs")]
    assert len(params) == 3
    for param in params:
        param._runtime_param = None
    install(params)
    assert all(isinstance(p._runtime_param, PlainRuntimeParam) for p in params)


@pytest.mark.parametrize("command", ["converge", "compare", "watch"])
def test_a_run_imports_no_pydantic(command, tmp_path):
    # the options are parsed, then the command stops at its first step (no log read)
    code = (
        "import sys, dflash_diag.cli as cli, dflash_diag.cli.options as o\n"
        "class Stop(Exception): pass\n"
        "def stop(*a, **k): raise Stop\n"
        "o.check_numbers = stop\n"
        "try:\n"
        f"    cli.app([{command!r}, 'sample_logs/train.jsonl', 'sample_logs/train.jsonl', "
        "'--alpha', '0.01', '--format', 'json'], standalone_mode=False)\n"
        "except Stop: pass\n"
        "print('pydantic' in sys.modules)\n"
    )
    if command == "watch":
        code = code.replace("'sample_logs/train.jsonl', '--alpha', '0.01', '--format', 'json'", "")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert out.strip() == "False"
