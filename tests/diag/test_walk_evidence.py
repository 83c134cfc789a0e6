"""The walked tau's standard error, and the rule that lets the walk lead only on adequate evidence
(docs/diagnostics.md, "Acceptance")."""

from __future__ import annotations

import json
import math
import random

import polars as pl
import pytest

from dflash_diag.analysis import defaults
from dflash_diag.analysis.acceptance import walk_held_back
from dflash_diag.analysis.windows import compute_windows, ratio_se

from .logs import dumps
from .test_diagnosis import as_json, cli


def _reference_se(pairs: list[tuple[float, float]]) -> float:
    """The textbook ratio-of-sums standard error, written out from its definition."""
    n = len(pairs)
    mean_t = sum(t for t, _ in pairs) / n
    mean_s = sum(s for _, s in pairs) / n
    r = mean_t / mean_s
    variance = sum((t - r * s) ** 2 for t, s in pairs) / (n - 1)
    return math.sqrt(variance / n) / mean_s


def test_ratio_se_matches_a_plain_reference_and_the_window_query():
    rng = random.Random(11)
    rows = []
    for step in range(1, 201):
        row = {"step": step, "loss": 1.0, "acc": 0.5, "walk_tokens": None, "walk_steps": None}
        if step % 7 == 0:
            steps = rng.randint(5, 40)
            row |= {"walk_tokens": float(steps * rng.uniform(1.2, 6.5)), "walk_steps": float(steps)}
        elif step % 31 == 0:  # a record that did not walk: left out, as in the tau itself
            row |= {"walk_tokens": 0.0, "walk_steps": 0.0}
        rows.append(row)
    frame = pl.DataFrame(
        rows,
        schema={
            "step": pl.Int64,
            "loss": pl.Float64,
            "acc": pl.Float64,
            "walk_tokens": pl.Float64,
            "walk_steps": pl.Float64,
        },
    )
    windows = compute_windows(frame, size=50)
    assert len(windows) == 4
    for w in windows:
        pairs = [
            (r["walk_tokens"], r["walk_steps"])
            for r in rows
            if w.start <= r["step"] <= w.end and r["walk_steps"]
        ]
        assert w.walk_n == len(pairs) >= 2
        reference = _reference_se(pairs)
        assert ratio_se([t for t, _ in pairs], [s for _, s in pairs]) == pytest.approx(
            reference, rel=1e-12
        )
        assert w.tau_walk_se == pytest.approx(reference, rel=1e-9)
        assert w.tau_walk == pytest.approx(
            sum(t for t, _ in pairs) / sum(s for _, s in pairs), rel=1e-12
        )
    # one record has no spread to measure; identical ratios have none at all
    assert ratio_se([10.0], [5.0]) is None
    assert ratio_se([10.0, 20.0, 30.0], [5.0, 10.0, 15.0]) == pytest.approx(0.0, abs=1e-12)
    same = compute_windows(
        pl.DataFrame(
            {"step": [1, 2, 3], "walk_tokens": [10.0, 20.0, 30.0], "walk_steps": [5.0, 10.0, 15.0]}
        ),
        size=10,
    )[0]
    assert same.walk_n == 3
    assert same.tau_walk_se == pytest.approx(0.0, abs=1e-9)


def test_the_walk_leads_only_on_enough_records_within_the_threshold():
    assert walk_held_back(3.0, 0.1, 5) is None
    assert walk_held_back(3.0, 0.1, 2) == "walk too thin to lead: 2 records, 3 needed"
    noisy = walk_held_back(3.51, 0.85, 5)
    assert noisy is not None
    assert noisy.startswith("walk too noisy to lead: ±24% over 5 records")
    limit = defaults.WALK_MAX_REL_SE
    assert walk_held_back(2.0, 2.0 * limit * 0.99, 3) is None
    assert walk_held_back(2.0, 2.0 * limit * 1.01, 3) is not None


def _walk_log(walk_ratio, *, steps: int = 100, walk_every: int = 5, measured: float = 2.0) -> bytes:
    """A log whose every ``walk_every``-th record walks 20 steps at ``walk_ratio(i)`` tokens per
    step (i: the walked record's number); accept_pos gives a harmonic estimate near 1.9."""
    block = 8
    survival = [0.6, 0.4, 0.25, 0.15, 0.08, 0.04, 0.02]
    records: list[dict] = [
        {
            "event": "run_start",
            "schema": 1,
            "script": "pipeline",
            "block_size": block,
            "schedule": {"kind": "constant", "peak_lr": 1e-3},
        }
    ]
    walked = 0
    for step in range(1, steps + 1):
        record = {
            "step": step,
            "time": float(step),
            "loss": 2.0 - step / 1000,
            "acc": 0.3 + step / 3000,
            "lr": 1e-3,
            "tok_per_sec": 1000.0,
            "n_tokens": 1000,
            "n_blocks": 10,
            "n_pred": 100,
            "accept_pos": survival,
            "acc_pos": survival,
        }
        if step % walk_every == 0:
            record |= {"walk_tokens": round(20 * walk_ratio(walked), 6), "walk_steps": 20}
            walked += 1
        records.append(record)
    records.append({"event": "eval", "step": steps, "tau": measured, "n_prompts": 4})
    return dumps(records)


def test_a_consistent_walk_leads_with_its_standard_error(tmp_path):
    path = tmp_path / "steady.jsonl"
    path.write_bytes(_walk_log(lambda i: 2.0 + 0.05 * (-1) ** i))
    a = as_json("converge", path, "-f", "json")["acceptance"]
    walk = next(e for e in a["estimates"] if e["name"] == "walk")
    assert walk["se"] is not None
    assert 0 < walk["se"] / walk["tau"] <= defaults.WALK_MAX_REL_SE
    # the latest 8 of the 10 walked records of the last window's length (recent_walk)
    assert walk["basis"].endswith("latest records, steps 65-100, 8 records")
    assert a["calibration"]["estimator"] == "walk"  # the walk would have led at the eval's step
    no_eval = tmp_path / "steady_no_eval.jsonl"
    no_eval.write_bytes(
        b"\n".join(line for line in path.read_bytes().splitlines() if b'"eval"' not in line)
    )
    a = as_json("converge", no_eval, "-f", "json")["acceptance"]
    assert a["estimator"] == "walk"
    assert a["tau"] == pytest.approx(walk["tau"])
    text = cli("converge", no_eval).stdout
    assert f"* walk      {walk['tau']:.2f} ± {walk['se']:.2f}  walk_tokens / walk_steps" in text


def test_a_noisy_walk_is_listed_but_the_harmonic_estimate_leads(tmp_path):
    # all-or-nothing walks, as on looping data: per-record tau 1.5 or 6.5
    path = tmp_path / "noisy.jsonl"
    path.write_bytes(_walk_log(lambda i: 6.5 if i % 3 == 0 else 1.5, measured=1.0))
    a = as_json("converge", path, "-f", "json")["acceptance"]
    walk = next(e for e in a["estimates"] if e["name"] == "walk")
    assert walk["se"] / walk["tau"] > defaults.WALK_MAX_REL_SE
    assert "walk too noisy to lead: ±" in walk["basis"]
    assert "over 10 records" in walk["basis"]
    assert a["estimator"] == "measured"
    assert a["calibration"]["estimator"] == "harmonic"
    # the mismatch warning compares with the estimate that may lead: harmonic, not the noisy walk
    harmonic = next(e for e in a["estimates"] if e["name"] == "harmonic")
    assert len(a["warnings"]) == 1
    assert f"imply tau {harmonic['tau']:.2f} (harmonic)" in a["warnings"][0]
    no_eval = tmp_path / "noisy_no_eval.jsonl"
    no_eval.write_bytes(
        b"\n".join(line for line in path.read_bytes().splitlines() if b'"eval"' not in line)
    )
    a = as_json("converge", no_eval, "-f", "json")["acceptance"]
    assert a["estimator"] == "harmonic"
    assert a["tau"] == pytest.approx(harmonic["tau"])
    text = cli("converge", no_eval).stdout
    assert "walk too noisy to lead: ±" in text
    assert "* harmonic" in text
    assert f"  walk      {walk['tau']:.2f} ± {walk['se']:.2f}  " in text


def test_a_thin_walk_does_not_lead(tmp_path):
    path = tmp_path / "thin.jsonl"
    path.write_bytes(_walk_log(lambda i: 2.0 + 0.01 * i, walk_every=25))
    lines = [json.loads(line) for line in path.read_bytes().splitlines() if b'"eval"' not in line]
    path.write_bytes(dumps(lines))
    a = as_json("converge", path, "-f", "json")["acceptance"]
    walk = next(e for e in a["estimates"] if e["name"] == "walk")
    assert walk["basis"].endswith("walk too thin to lead: 2 records, 3 needed")
    assert a["estimator"] == "harmonic"
