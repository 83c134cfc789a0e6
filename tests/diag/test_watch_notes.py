"""watch gives converge's notes (values left out, a metric not measured, a block size that
changed, not a drafter's log), on logs long enough for watch to prune the records they are about."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

from .test_watch import HEADER, T0

runner = CliRunner()
#: 3,000 steps: watch keeps the newest 40 windows of 50 (2,000 steps) and prunes the rest.
STEPS = range(15000, 18000)


def _record(step: int, acc: float, n_pred: int = 30000) -> dict:
    return {
        "step": step,
        "time": T0 + step,
        "loss": 3.1 - 1e-4 * (step - 15000),
        "acc": acc,
        "lr": 6e-4 * step / 20000,
        "tok_per_sec": 16000.0,
        "n_pred": n_pred,
    }


def _rising(step: int) -> float:
    return 0.15 + 1e-4 * (step - 15000)


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _percent_early(path: Path) -> Path:
    """The first 300 steps' accuracy in percent and 20 records with n_pred 0: all pruned."""
    records = [
        _record(s, _rising(s) * (100 if s < 15300 else 1), 0 if 15300 <= s < 15320 else 30000)
        for s in STEPS
    ]
    return _write(path, [HEADER, *records])


def _constant_late(path: Path) -> Path:
    """The accuracy rises for 500 steps, then stays 0.3 exactly: constant in the records watch
    keeps, not in the log (converge judges the accuracy, and so must watch)."""
    return _write(path, [HEADER, *(_record(s, _rising(s) if s < 15500 else 0.3) for s in STEPS)])


def _block_size_change(path: Path) -> Path:
    """B=16, then a resume at step 15500 with B=8: the change lies in the pruned records."""
    second = {**HEADER, "block_size": 8, "time": T0 + 15500}
    return _write(
        path,
        [
            HEADER,
            *(_record(s, _rising(s)) for s in STEPS if s < 15500),
            second,
            *(_record(s, _rising(s)) for s in STEPS if s >= 15500),
        ],
    )


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*args, "-f", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            _percent_early,
            [
                "20 records with n_pred <= 0 left out of the loss and accuracy",
                "300 accuracy values outside [0, 1] left out",
            ],
        ),
        (_constant_late, []),
        (_block_size_change, ["block size changes at step 15500: B=16 -> B=8"]),
    ],
)
def test_watch_gives_converges_notes_and_verdict_past_its_pruning(tmp_path, make, expected):
    path = make(tmp_path / "train.jsonl")
    converge = _json("converge", str(path))
    watch = _json("watch", "--once", str(path))
    assert len(converge["notes"]) == len(expected)
    assert all(
        note.startswith(start) for note, start in zip(converge["notes"], expected, strict=True)
    )
    assert watch["notes"] == converge["notes"]
    assert watch["verdict"] == converge["verdict"]  # the constant check reads every record too


def test_watch_shows_the_notes_under_its_verdict():
    """A real public log (shared/wild) whose accuracy is written in percent: watch said "acc -"
    with no word of why; it now gives converge's notes."""
    path = (
        Path(__file__).resolve().parents[2]
        / "shared/wild/Ipiano__MNistClassifier/logs/250-epochs_4294967296-data_100-minibatch/train.log"
    )
    if not path.is_file():
        pytest.skip("the real-log corpus shared/wild is absent")
    result = runner.invoke(app, ["watch", "--once", str(path)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    notes = [i for i, line in enumerate(lines) if line.startswith("note: ")]
    assert lines[notes[0]].startswith("note: 250 accuracy values outside [0, 1] left out")
    assert lines[notes[1]].startswith("note: not a drafter's log")
    assert notes[0] > next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert max(len(line) for line in lines) <= 80
