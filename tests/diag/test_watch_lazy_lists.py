"""watch parses a large backlog without its per-position lists where nothing shown changes.

Every test compares a `LiveLog` that takes the lazy path (``lazy_lists_bytes=0``: every piece
qualifies) with one that always reads the lists (``None``): the frames drawn at a fixed width
with an injected clock, the kept records and the NaN/Inf account must be the same, after the
first read, appends, a truncation and a rewrite.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.watch import LiveLog, WatchConfig, build_view, render_view
from dflash_diag.watch import state as watch_state
from dflash_diag.watch.lazy_lists import no_string_in_arrays

REPO = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


class FakeClock:
    def __call__(self) -> float:
        return T0 + 10**6


def _frame(live: LiveLog) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_view(build_view(live)))
    return console.file.getvalue()


def _pair(path, **kw) -> tuple[LiveLog, LiveLog]:
    config = kw.pop("config", WatchConfig())
    lazy = LiveLog(path, config, clock=FakeClock(), lazy_lists_bytes=0, **kw)
    eager = LiveLog(path, config, clock=FakeClock(), lazy_lists_bytes=None, **kw)
    return lazy, eager


def _assert_same(lazy: LiveLog, eager: LiveLog) -> None:
    lazy.refresh()
    eager.refresh()
    assert _frame(lazy) == _frame(eager)
    assert lazy.log is not None
    assert eager.log is not None
    assert lazy.log.metrics.equals(eager.log.metrics)
    assert lazy.issues.nonfinite == eager.issues.nonfinite
    assert lazy.nonfinite_last == eager.nonfinite_last
    assert lazy.issues.malformed == eager.issues.malformed


def _record(step: int, **extra) -> str:
    rec = {
        "step": step,
        "time": T0 + step,
        "loss": 3.0 - 1e-4 * step,
        "acc": 0.15 + 1e-4 * step,
        "lr": 6e-4,
        "tok_per_sec": 16000.0,
        "n_blocks": 100 + step % 7,
        "acc_pos": [round(0.6 - 0.03 * k + 1e-5 * step, 5) for k in range(7)],
        "accept_pos": [round(0.5 - 0.04 * k + 1e-5 * step, 5) for k in range(7)],
    }
    rec.update(extra)
    return json.dumps(rec) + "\n"


HEADER = json.dumps({"event": "run_start", "schema": 1, "script": "pipeline", "block_size": 8})


def _log(tmp_path, steps=range(1, 1201), special=None, name="train.jsonl"):
    special = special or {}
    path = tmp_path / name
    text = HEADER + "\n" + "".join(special.get(s) or _record(s) for s in steps)
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "run",
    [
        "sample_logs/train.jsonl",
        "tests/fixtures/runs/cosine-6e-4-s0/train.jsonl",
        "tests/fixtures/runs_evalwalk/constant-5e-4-s8-160/train.jsonl",
    ],
)
def test_committed_logs_draw_the_same_frame(run):
    for chunk in (None, 4096):
        _assert_same(*_pair(REPO / run, max_chunk_bytes=chunk))


def test_a_clean_backlog_is_read_without_its_lists(tmp_path, monkeypatch):
    path = _log(tmp_path)
    lazy, eager = _pair(path, max_chunk_bytes=20_000)

    def with_lists(*args, **kwargs):
        raise AssertionError("a clean piece is parsed without its lists")

    monkeypatch.setattr(watch_state, "parse_records", with_lists)
    lazy.refresh()
    monkeypatch.undo()
    assert lazy.log is not None
    assert lazy.log.metrics["accept_pos"].null_count() == 0  # the kept records' lists, read back
    eager.refresh()
    assert _frame(lazy) == _frame(eager)
    assert "harmonic" in _frame(lazy)
    assert lazy.log.metrics.equals(eager.log.metrics)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param({"acc_pos": [0.5, math.nan, 0.1]}, id="nan-token"),
        pytest.param({"acc_pos": [0.5, "nan", 0.1]}, id="nan-string"),
        pytest.param({"accept_pos": ["-Infinity"]}, id="inf-string"),
        pytest.param({"acc_pos": [True, 0.2]}, id="bool"),
        pytest.param({"acc_pos": 0.5}, id="not-a-list"),
        pytest.param({"acc_pos": [[0.5], {"a": "inf"}]}, id="nested"),
        pytest.param({"loss": "nan", "acc_pos": ["1e999"]}, id="strings"),
    ],
)
def test_bad_list_values_in_the_backlog_give_the_same_account(tmp_path, bad):
    special = {300: _record(300, **bad), 1150: _record(1150, **bad)}
    path = _log(tmp_path, special=special)
    for chunk in (None, 20_000):
        _assert_same(*_pair(path, max_chunk_bytes=chunk))


def test_a_number_out_of_range_in_a_list(tmp_path):
    line = _record(500).replace('"acc_pos": [', '"acc_pos": [1e400, ')
    path = _log(tmp_path, special={500: line})
    _assert_same(*_pair(path, max_chunk_bytes=20_000))


def test_restarts_appends_truncation_and_rewrite(tmp_path):
    steps = [*range(1, 801), *range(600, 1001)]  # resumed from step 600
    path = _log(tmp_path, steps=steps)
    config = WatchConfig(history=8, analysis=DiagnosisConfig(window=25))
    lazy, eager = _pair(path, max_chunk_bytes=30_000, config=config)
    _assert_same(lazy, eager)
    with path.open("a") as f:  # a refresh's few lines, then a backlog again
        f.write("".join(_record(s) for s in range(1001, 1011)))
    _assert_same(lazy, eager)
    with path.open("a") as f:
        f.write("".join(_record(s, acc_pos=[0.1, "nan"]) for s in range(1011, 1500)))
    _assert_same(lazy, eager)
    path.write_text(HEADER + "\n" + "".join(_record(s) for s in range(1, 400)))  # truncated
    _assert_same(lazy, eager)
    text = path.read_text().replace('"loss": 2.99', '"loss": 2.98')  # rewritten in place
    path.write_text(text + "".join(_record(s) for s in range(400, 900)))
    _assert_same(lazy, eager)
    assert lazy.tail.resets == eager.tail.resets == 2


def test_an_overlong_line_reads_with_the_lists(tmp_path, monkeypatch):
    from dflash_diag.read import tail

    monkeypatch.setattr(tail, "MAX_LINE_BYTES", 2000)
    long_line = _record(400, config="x" * 5000)
    path = _log(tmp_path, special={400: long_line})
    _assert_same(*_pair(path, max_chunk_bytes=20_000))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"a": 1, "b": [1, 2.5e-3, -4]}\n', True),
        (b'{"a":"x","b":[1]}\n{"c": "y", "d": {"e": "f"}}\n', True),
        (b'{"a": [{"b": "c"}]}\n', True),  # an object in an array: its strings are keys, values
        (b'{"a": ["x"]}\n', False),
        (b'{"a": [1, "x"]}\n', False),
        (b'{"a": [1,"x"]}\n', False),
        (b'{"a:b": 1, "acc_pos": ["nan"]}\n', False),  # a colon inside a key
        (b'{"a": ":", "acc_pos": ["nan"]}\n', False),  # a value that starts with a colon
        (b'{"a" : 1}\n', False),  # a space before the colon: not told apart
        (b'{"a": "\\"x"}\n', False),  # escaped quotes
        (b'{"a": 1}\n{"b": ["', False),  # odd quotes: not whole lines
        (b"", True),
    ],
)
def test_strings_that_are_array_elements_are_found(line, expected):
    assert no_string_in_arrays(line) is expected


def test_strings_are_found_across_the_check_blocks(monkeypatch):
    from dflash_diag.watch import lazy_lists

    monkeypatch.setattr(lazy_lists, "_BLOCK", 64)
    clean = "".join(_record(s) for s in range(1, 50)).encode()
    assert no_string_in_arrays(clean)
    assert not no_string_in_arrays(clean + _record(50, acc_pos=["x"]).encode() + clean)
