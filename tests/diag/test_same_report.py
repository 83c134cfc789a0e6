"""The faster read paths give the same converge report as the paths they replace.

* ``load_log``'s default leaves the per-position lists in the file (``lists=False``) and the
  diagnosis reads them back for the rows that need them: the same report as an eager read;
* other trainers' JSONL read by polars (read/formats/foreign_jsonl_scan.py): the same report JSON as the
  line reader's, through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.diagnosis import diagnose
from dflash_diag.cli import app
from dflash_diag.converge.report import build_converge_report
from dflash_diag.read.jsonl import load_log
from dflash_diag.render.json import render_json

from .make_sample_log import generate

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _converge_json(path: Path) -> dict:
    result = runner.invoke(app, ["converge", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("log", ["sample_logs/train.jsonl", "generated"])
def test_lazy_lists_give_the_eager_report(tmp_path, log):
    if log == "generated":
        path = tmp_path / "train.jsonl"
        path.write_bytes(generate(seed=3, pipeline_steps=400))
    else:
        path = ROOT / log
    lazy = load_log(path)
    assert lazy.lists_pending == [0]
    eager = load_log(path, lists=True)
    assert render_json(build_converge_report(lazy)) == render_json(build_converge_report(eager))
    # the library's diagnose reads the pending lists by itself
    assert repr(diagnose(lazy).acceptance) == repr(diagnose(eager).acceptance)


def _hf_lines(n: int) -> str:
    lines = []
    for step in range(1, n + 1):
        lines.append(
            json.dumps(
                {
                    "loss": round(2.0 / step**0.3, 4),
                    "grad_norm": 1.0 + step % 7 / 10,
                    "learning_rate": 2e-4 * (1 - step / (n + 1)),
                    "epoch": step / 500,
                    "step": step,
                }
            )
        )
        if step % 250 == 0:
            lines.append(
                json.dumps({"eval_loss": 1.0 / step**0.2, "epoch": step / 500, "step": step})
            )
    return "\n".join(lines) + "\n"


def _nested_lines(n: int) -> str:
    return "".join(
        json.dumps(
            {
                "global_step": s,
                "lr": 1e-4,
                "train": {
                    "loss": 3.0 - s / n,
                    "full_acc": 0.2 + 0.3 * s / n,
                    "eal": 1.5 + s / n,
                    **{
                        f"position_{k}_acc": round((0.2 + 0.3 * s / n) * 0.9**k, 4)
                        for k in range(1, 6)
                    },
                },
            }
        )
        + "\n"
        for s in range(n)
    )


@pytest.mark.parametrize("shape", ["hf", "nested"])
def test_polars_read_of_foreign_jsonl_gives_the_line_readers_report(tmp_path, monkeypatch, shape):
    path = tmp_path / "train.jsonl"
    path.write_text(_hf_lines(2000) if shape == "hf" else _nested_lines(1500))
    from dflash_diag.read.formats import foreign_jsonl_scan

    calls = []
    real = foreign_jsonl_scan.read_foreign_jsonl_scan
    monkeypatch.setattr(
        foreign_jsonl_scan, "read_foreign_jsonl_scan", lambda *a: calls.append(1) or real(*a)
    )
    fast = _converge_json(path)
    assert calls
    monkeypatch.setattr(foreign_jsonl_scan, "read_foreign_jsonl_scan", lambda *a: None)
    assert fast == _converge_json(path)
