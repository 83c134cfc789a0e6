"""Packaging promises: no torch/transformers/dflash in dflash_diag, a fast --help, the sample log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dflash_diag.cli
from dflash_diag.cli import app

ROOT = Path(__file__).resolve().parents[2]
#: Every module of the package (the layout is checked too: each sub-package imports on its own).
MODULES = sorted(
    ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    for path in (ROOT / "dflash_diag").rglob("*.py")
)


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout


def test_no_heavy_imports():
    code = (
        "import sys, importlib\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "import dflash_diag\n"
        "dflash_diag.build_converge_report\n"
        "print(sorted(m for m in ('torch', 'transformers', 'dflash') if m in sys.modules))"
    )
    assert _run(code).strip() == "[]"


def test_cli_import_does_not_load_polars():
    code = (
        "import sys, dflash_diag.cli\n"
        "print(sorted(m for m in ('polars', 'numpy', 'scipy') if m in sys.modules))"
    )
    assert _run(code).strip() == "[]"


def test_a_json_run_imports_what_it_prints_with_only():
    # rich's console and the other renderers cost a re-run of converge about 0.03 s that a
    # JSON run does not need (a text run imports the console, as it must); numpy.ma (0.015 s,
    # which np.median's NaN check imports) no run needs
    code = (
        "import sys\n"
        "from dflash_diag.cli import main\n"
        "sys.argv = ['dflash-diag', 'converge', sys.argv[1], '-f', sys.argv[2], '--no-cache']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "names = ('rich.console', 'dflash_diag.render.markdown', 'dflash_diag.render.csv',"
        " 'numpy.ma')\n"
        "print(sorted(m for m in names if m in sys.modules), file=sys.stderr)"
    )
    sample = str(ROOT / "sample_logs" / "train.jsonl")

    def imported(fmt: str) -> str:
        return (
            subprocess.run(
                [sys.executable, "-c", code, sample, fmt],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            .stderr.strip()
            .splitlines()[-1]
        )

    assert imported("json") == "[]"
    assert imported("text") == "['rich.console']"


def test_the_command_collects_cycles_in_a_large_young_generation():
    # the command's process only (a library caller keeps its own collector settings)
    code = (
        "import gc, sys\n"
        "from dflash_diag.cli import GC_THRESHOLDS, main\n"
        "before = gc.get_threshold()\n"
        "sys.argv = ['dflash-diag', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(before, gc.get_threshold() == GC_THRESHOLDS, GC_THRESHOLDS[0] >= 10_000)"
    )
    assert _run(code).strip().splitlines()[-1] == "(700, 10, 10) True True"


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_the_command_runs_blas_on_one_thread_unless_the_user_says(given, expected):
    # set before numpy is imported (OpenBLAS reads it once, at load); a user's own setting wins
    code = (
        "import os, sys\n"
        "from dflash_diag.cli import main\n"
        "loaded = 'numpy' in sys.modules\n"
        "sys.argv = ['dflash-diag', '--version']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(loaded, os.environ.get('OPENBLAS_NUM_THREADS'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
    ).stdout
    assert out.strip().splitlines()[-1] == f"False {expected}"


@pytest.mark.parametrize("columns", [80, 100])
@pytest.mark.parametrize("command", ["converge", "compare", "watch"])
def test_help_paragraphs_are_wrapped_once(command, columns):
    # typer keeps a docstring's line breaks after its first paragraph; the help re-joins them
    # so the terminal's wrapping is the only one (compare's paragraph came out ragged)
    from dflash_diag.cli import help_text

    out = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": str(columns)}).stdout
    lines = [line.strip() for line in out.splitlines()]
    for paragraph in help_text(getattr(dflash_diag.cli, command)).split("\n\n")[1:]:
        words = paragraph.split()
        start = next(i for i, line in enumerate(lines) if line.startswith(" ".join(words[:3])))
        shown: list[str] = []
        while len(" ".join(shown).split()) < len(words):
            shown.append(lines[start + len(shown)])
        assert " ".join(shown).split() == words
        assert all(len(line) > columns - 20 for line in shown[:-1]), shown


def test_help_lists_converge():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "converge" in result.stdout
    options = CliRunner().invoke(app, ["converge", "--help"]).stdout
    for flag in (
        "--phase",
        "--window",
        "--threshold",
        "--target-acc",
        "--target-tau",
        "--fail-on",
        "--keep-all",
        "--strict",
        "--format",
        "--field",
        "--peak-lr",
        "--block-size",
    ):
        assert flag in options


def test_smoke_committed_sample_log():
    """Only this test reads sample_logs/ (it may be replaced by a real run's log)."""
    result = CliRunner().invoke(app, ["converge", str(ROOT / "sample_logs" / "train.jsonl")])
    assert result.exit_code == 0, result.output
    for label in ("schedule", "acceptance", "verdict"):
        assert label in result.stdout
