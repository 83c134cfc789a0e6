"""A walk of training sequences is in-sample past the first epoch and must not lead; a walk of a
held-out split (named in the ``run_start`` header) may (docs/diagnostics.md, "Acceptance")."""

from __future__ import annotations

import json
from pathlib import Path

from dflash_diag.analysis.acceptance import walk_in_sample

from .test_diagnosis import as_json

SAMPLE = Path(__file__).resolve().parents[2] / "sample_logs" / "train.jsonl"


def _walk(path: Path) -> dict:
    a = as_json("converge", path, "-f", "json")["acceptance"]
    return next(e for e in a["estimates"] if e["name"] == "walk")


def test_the_rule():
    assert walk_in_sample(False, 0.99) is None
    assert walk_in_sample(True, 4.2) is None
    assert walk_in_sample(False, None) is None
    assert walk_in_sample(False, 1.0).startswith("walk in-sample, unfit to lead: it walks training")


def test_a_log_without_a_held_out_split_keeps_its_walk_but_not_its_lead_past_epoch_one(tmp_path):
    """The sample log (written before held-out splits) walks its training batches: its last
    window (epoch 4.2) lists the walk, held back as in-sample; the same log cut in its first
    epoch, and the same log whose header names a split, do not say so."""
    walk = _walk(SAMPLE)
    assert "walk in-sample" in walk["basis"]
    assert "epoch 4.2" in walk["basis"]
    assert walk["tau"] > 0  # kept, listed
    lines = SAMPLE.read_text().splitlines()
    early = tmp_path / "early.jsonl"
    early.write_text(
        "\n".join(line for line in lines if json.loads(line).get("step", 0) <= 180) + "\n"
    )
    assert "in-sample" not in _walk(early)["basis"]
    named = tmp_path / "named.jsonl"
    out = []
    for line in lines:
        record = json.loads(line)
        if record.get("event") == "run_start":
            record["walk_held_out"] = {"examples": 32, "seed": 0, "of": 2048, "indices": []}
        out.append(json.dumps(record))
    named.write_text("\n".join(out) + "\n")
    assert "in-sample" not in _walk(named)["basis"]
