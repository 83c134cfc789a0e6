"""One JSON writer for every command: the same encoding, the same ``format_version`` first key,
``held_back`` on every estimate (checked on the bundled sample log, whose measured-tau reason
carries a ``±`` and whose walk is held back as in-sample)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs" / "train.jsonl"
COMMANDS = {
    "converge": ["converge", str(SAMPLE), "-f", "json"],
    "compare": ["compare", str(SAMPLE), str(SAMPLE), "-f", "json"],
    "watch": ["watch", str(SAMPLE), "--once", "-f", "json"],
}


def _json_text(command: str) -> str:
    result = CliRunner().invoke(app, COMMANDS[command])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_format_version_is_the_first_key(command):
    data = json.loads(_json_text(command))
    assert next(iter(data)) == "format_version"
    assert data["format_version"] == 1


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_text_is_written_as_utf8_not_escapes(command):
    text = _json_text(command)
    assert "\\u" not in text
    assert "latest 2.45 ± 0.32 at step 400" in text


def _estimates(command: str) -> list[dict]:
    data = json.loads(_json_text(command))
    if command == "compare":
        data = data["regimes"][-1]["diagnosis"]  # the sample log's last regime has the evals
    return data["acceptance"]["estimates"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_estimate_says_whether_it_is_held_back(command):
    by_name = {e["name"]: e for e in _estimates(command)}
    assert all("held_back" in e for e in by_name.values())
    assert by_name["measured"]["held_back"] is None
    walk = by_name["walk"]["held_back"]
    assert walk.startswith("walk in-sample")
    assert by_name["walk"]["basis"].endswith(walk)
