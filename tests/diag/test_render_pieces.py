"""converge's JSON and CSV written a piece at a time (issue 21): the pieces joined are the text the
one-string renderers wrote, byte for byte, at every piece size and window count (none, one, a
piece's edges); a diagnosis' windows are cut into pieces of their columns; the command writes
the pieces as they come; and the window keys made by polars are the expression's."""

from __future__ import annotations

import errno
import json
import random
from types import SimpleNamespace

import polars as pl
import pytest
from typer.testing import CliRunner

from dflash_diag import load_log
from dflash_diag.analysis.diagnosis import DiagnosisConfig, WindowRow
from dflash_diag.analysis.trend import Trend
from dflash_diag.analysis.window_rows import WindowRows
from dflash_diag.analysis.windows import Window, window_index, window_keys
from dflash_diag.cli import app
from dflash_diag.converge.report import build_converge_report
from dflash_diag.render import csv as csv_render
from dflash_diag.render import json_columns
from dflash_diag.render.json import (
    _COMPACT,
    _converge_json,
    json_pieces,
    render_json,
    window_json,
    windows_pieces,
    windows_text,
)
from tests.diag.wild_harness import ROOT

from .references import csv_module_text

SAMPLE = ROOT / "sample_logs" / "train.jsonl"


def _one_string_json(report) -> str:
    """The JSON as the renderer wrote it before the pieces: every window in one text."""
    data = _converge_json(report, lambda rows: rows)
    lines = ["{"]
    for i, (key, value) in enumerate(data.items()):
        comma = "," if i < len(data) - 1 else ""
        if key == "windows" and value:
            lines += ['  "windows": [', windows_text(value, ",\n", prefix="    "), f"  ]{comma}"]
        elif key == "windows":
            lines.append(f'  "windows": []{comma}')
        else:
            lines.append(f"  {_COMPACT.encode(key)}: {_COMPACT.encode(value)}{comma}")
    return "\n".join([*lines, "}", ""])


@pytest.fixture(scope="module")
def report():
    # the sample log at one step per window: 260 windows (its pipeline phase)
    return build_converge_report(load_log(SAMPLE, lists=False), DiagnosisConfig(window=1))


@pytest.mark.parametrize("size", [1, 7, 259, 260, 261, 4096])
def test_the_json_pieces_joined_are_the_one_string_text(report, size, monkeypatch):
    monkeypatch.setattr(json_columns, "ROWS_PER_PIECE", size)
    pieces = list(json_pieces(report))
    windows = len(report.windows)
    # the keys before the windows, each piece of windows and the separators, the keys after
    assert len(pieces) == 2 + 2 * -(-windows // size) - 1
    assert "".join(pieces) == _one_string_json(report) == render_json(report)
    assert json.loads("".join(pieces))["windows"][-1]["end"] == report.windows[-1].window.end


def test_a_report_without_windows_is_written_as_before(report):
    empty = SimpleNamespace(**{**vars(report), "windows": []})
    assert "".join(json_pieces(empty)) == _one_string_json(empty)
    assert '  "windows": [],\n' in render_json(empty)


def _rows(n: int, seed: int) -> list[WindowRow]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        value = rng.choice([None, float("nan"), rng.uniform(-1, 1) * 10 ** rng.uniform(-7, 17)])
        window = Window(
            index=i, start=i, end=i, n=rng.choice([i, 2**70]), first_step=i, last_step=i,
            loss=value, acc=rng.random(), weighted=bool(i % 2), acc_se=None, loss_se=None,
            nonfinite=i % 3, tau_train=rng.choice([None, 2.5]),
        )  # fmt: skip
        label = rng.choice(["up", "down", "flat", None])
        out.append(WindowRow(window, Trend(rng.random(), label, value, label)))
    return out


@pytest.mark.parametrize(("n", "size"), [(0, 3), (1, 3), (3, 3), (4, 3), (100, 7)])
def test_window_pieces_of_a_list_join_to_its_text(n, size, monkeypatch):
    monkeypatch.setattr(json_columns, "ROWS_PER_PIECE", size)
    rows = _rows(n, seed=n)
    expected = ",\n    ".join(_COMPACT.encode(window_json(row)) for row in rows)
    assert "".join(windows_pieces(rows, ",\n    ")) == expected
    assert [len(p) for p in json_columns.row_pieces(rows)] == [
        min(size, n - low) for low in range(0, n, size)
    ]


def test_a_diagnosis_windows_are_cut_into_pieces_of_their_columns(report):
    rows = report.windows
    assert isinstance(rows, WindowRows)
    pieces = list(json_columns.row_pieces(rows, 100))
    assert len(rows) == 260  # the pipeline phase's steps
    assert [len(p) for p in pieces] == [100, 100, 60]
    assert all(isinstance(p, WindowRows) and p._rows is None for p in pieces)  # no row objects
    for name in ("start", "loss", "acc", "nonfinite"):
        joined = [v for p in pieces for v in json_columns.row_column(p, name)]
        assert joined == rows.column(name)
    assert [v for p in pieces for v in p.column("acc_trend")] == rows.column("acc_trend")


@pytest.mark.parametrize("size", [1, 9, 260, 4096])
def test_the_csv_pieces_joined_are_the_csv_modules_text(report, size, monkeypatch):
    monkeypatch.setattr(json_columns, "ROWS_PER_PIECE", size)
    pieces = list(csv_render.csv_pieces(report))
    assert len(pieces) == 1 + -(-len(report.windows) // size)  # the header, then the rows
    assert "".join(pieces) == csv_module_text(report)
    rows = SimpleNamespace(windows=_rows(50, seed=4))
    assert "".join(csv_render.csv_pieces(rows)) == csv_module_text(rows)
    quoted = _rows(20, seed=5)
    quoted[3] = WindowRow(quoted[3].window, Trend(None, "a,b", None, None))
    needs_quotes = SimpleNamespace(windows=quoted)
    assert list(csv_render.csv_pieces(needs_quotes)) == [csv_module_text(needs_quotes)]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_the_command_writes_the_pieces_as_they_come(report, fmt, monkeypatch):
    monkeypatch.setattr(json_columns, "ROWS_PER_PIECE", 50)
    expected = render_json(report) if fmt == "json" else csv_render.render_csv(report)
    written: list[str] = []
    renderer = json_pieces if fmt == "json" else csv_render.csv_pieces

    def recorded(report):
        for piece in renderer(report):
            written.append(piece)
            yield piece

    target = "dflash_diag.render.json" if fmt == "json" else "dflash_diag.render.csv"
    monkeypatch.setattr(f"{target}.{renderer.__name__}", recorded)
    result = CliRunner().invoke(
        app, ["converge", str(SAMPLE), "-f", fmt, "--window", "1", "--no-cache"]
    )
    assert result.exit_code == 0, result.output
    assert len(written) > 5
    assert result.stdout == "".join(written) == expected


@pytest.mark.parametrize("seed", range(4))
def test_window_keys_are_the_expressions_at_every_piece_size(seed, monkeypatch):
    from dflash_diag.analysis import windows

    rng = random.Random(seed)
    monkeypatch.setattr(windows, "_KEY_PIECE", rng.choice([1, 5, 64, 1 << 16]))
    start, size = rng.randint(-50, 50), rng.randint(1, 40)
    steps = [start + rng.randint(0, 10 ** rng.randint(1, 12)) for _ in range(rng.randint(0, 500))]
    if seed % 2:
        steps.sort()
    series = pl.Series("step", steps, dtype=pl.Int64)
    keys = window_keys(series, size, start)
    assert keys is not None
    assert keys.name == "_window"
    top = (max(steps) - start) // size if steps else 0
    assert keys.dtype == (pl.Int32 if top < 2**31 else pl.Int64)
    expected = pl.DataFrame({"step": series}).select(window_index(start, size))["_window"]
    assert keys.to_list() == expected.to_list()
    assert keys.n_chunks() == 1
    assert window_keys(pl.Series("step", [start], dtype=pl.Int32), size, start) is None
    assert window_keys(pl.Series("step", [1, None], dtype=pl.Int64), size, start) is None


class _Exited(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _run_with(monkeypatch, outcome, flush=None):
    """``cli.run`` with ``main`` ending as ``outcome`` does and ``os._exit`` recorded."""
    from dflash_diag import cli

    def fake_exit(code: int):
        raise _Exited(code)

    monkeypatch.setattr(cli, "main", outcome)
    monkeypatch.setattr(cli.os, "_exit", fake_exit)
    if flush is not None:
        monkeypatch.setattr(cli.sys, "stdout", SimpleNamespace(flush=flush))
    return cli.run


@pytest.mark.parametrize(("code", "status"), [(None, 0), (0, 0), (1, 1), (2, 2)])
def test_the_console_script_exits_at_once_with_the_status(monkeypatch, code, status):
    def main():
        raise SystemExit(code)

    with pytest.raises(_Exited) as exited:
        _run_with(monkeypatch, main)()
    assert exited.value.code == status
    with pytest.raises(_Exited) as returned:
        _run_with(monkeypatch, lambda: None)()
    assert returned.value.code == 0


def test_the_console_script_exits_as_usual_where_it_cannot_at_once(monkeypatch):
    def message():
        raise SystemExit("bad")

    with pytest.raises(SystemExit) as exited:
        _run_with(monkeypatch, message)()
    assert exited.value.code == "bad"

    def crash():
        raise KeyError("x")

    with pytest.raises(KeyError):  # a traceback stays a traceback
        _run_with(monkeypatch, crash)()


@pytest.mark.parametrize(
    ("error", "code", "status"),
    [
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 0, 0),  # the reader left: quietly
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1, 1),  # the command's own status stands
        (OSError(errno.ENOSPC, "No space left on device"), 0, 2),  # output lost: an error
    ],
)
def test_a_flush_that_fails_at_the_end_is_the_output_policy(
    monkeypatch, capsys, error, code, status
):
    def failing_flush():
        raise error

    def main():
        raise SystemExit(code)

    with pytest.raises(_Exited) as exited:
        _run_with(monkeypatch, main, flush=failing_flush)()
    assert exited.value.code == status
    lines = capsys.readouterr().err.splitlines()
    if status == 2:
        assert lines == ["dflash-diag: error: cannot write the output: No space left on device"]
    else:
        assert lines == []


def test_python_m_prints_and_exits_as_the_command_in_process(report):
    import subprocess
    import sys

    def process(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "dflash_diag", "converge", str(SAMPLE), *args]
        return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)

    done = process("-f", "json", "--window", "1", "--no-cache")
    assert done.returncode == 0
    assert done.stdout == render_json(report)
    assert process("-f", "csv", "--no-cache", "--fail-on", "plateau").returncode == 0
    assert process("--fail-on", "no-such-verdict").returncode == 2  # typer's usage error
    missing = subprocess.run(
        [sys.executable, "-m", "dflash_diag", "converge", str(ROOT / "no-such.jsonl")],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    assert missing.returncode == 2
    assert missing.stderr.startswith("dflash-diag: error:")
