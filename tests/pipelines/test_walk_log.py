"""The walked tau in the pipeline's log: when it is written, what it holds, how it is validated."""

from __future__ import annotations

import pytest

from dflash.data import load_dataset
from pipelines.async_pipeline import run_pipeline
from pipelines.log_schema import validate_record
from pipelines.run_setup import longest_response

from .test_programs import metrics_of, read_log


def test_every_walk_every_th_record_carries_the_walk(make_cfg, tmp_path):
    res = run_pipeline(make_cfg(max_steps=4, log_every=1, walk_every=2, walk_seqs=2))
    assert res.exit_code == 0
    m = metrics_of(read_log(tmp_path / "train.jsonl"))
    walked = [r["step"] for r in m if "walk_tokens" in r]
    assert walked == [2, 4]
    for r in m:
        if "walk_tokens" in r:
            # eval_new_tokens = 6 in the fixture: two sequences of 5 walked tokens each.
            assert r["walk_tokens"] == 2 * (6 - 1)
            assert len(r["walk_hist"]) == 4 and sum(r["walk_hist"]) == r["walk_steps"]
            assert 1 <= r["walk_tokens"] / r["walk_steps"] <= 4


def test_walk_counts_intervals_of_log_every_and_can_be_off(make_cfg, tmp_path):
    run_pipeline(make_cfg(max_steps=4, log_every=2, walk_every=2, eval_new_tokens=None,
                          dtype="bfloat16"))
    m = metrics_of(read_log(tmp_path / "train.jsonl"))
    assert [(r["step"], "walk_steps" in r) for r in m] == [(2, False), (4, True)]
    run_pipeline(make_cfg(max_steps=6, log_every=1, walk_every=0, resume=str(tmp_path / "ck" /
                                                                          "step-000004")))
    m = metrics_of(read_log(tmp_path / "train.jsonl"))
    assert not any("walk_steps" in r for r in m[2:])


def test_eval_horizon_defaults_to_the_longest_training_response(make_cfg, tiny_assets, tmp_path):
    _, data = tiny_assets
    horizon = longest_response(load_dataset(data))
    cfg = make_cfg(max_steps=2, eval_every=2, eval_new_tokens=None, eval_prompts=2, walk_every=1)
    run_pipeline(cfg)
    records = read_log(tmp_path / "train.jsonl")
    ev = next(r for r in records if r.get("event") == "eval")
    assert ev["new_tokens"] == 2 * horizon  # two prompts decoded to the horizon (no stop token)
    walk = metrics_of(records)[-1]
    assert walk["walk_tokens"] <= cfg.walk_seqs * (horizon - 1)  # each walked row: H - 1 tokens


def _record(**walk):
    rec = {"step": 1, "time": 0.0, "epoch": 0.0, "loss": 1.0, "acc": 0.5, "lr": 1e-3,
           "tok_per_sec": 1.0, "n_tokens": 10, "n_blocks": 2, "n_pred": 6,
           "acc_pos": [0.5, 0.5, 0.5], "accept_pos": [0.5, 0.2, 0.1], "tau_train": 1.8,
           "grad_norm": 1.0, "stage_busy": {}, "queue_fill": {}}
    return {**rec, **walk}


def test_validator_accepts_a_consistent_walk():
    assert validate_record(_record(walk_tokens=9, walk_steps=4, walk_hist=[1, 1, 2, 0])) == "metrics"


@pytest.mark.parametrize("walk", [
    {"walk_tokens": 9, "walk_steps": 4},                              # not all three
    {"walk_tokens": 9, "walk_steps": 4, "walk_hist": [1, 1, 2]},      # hist length != B
    {"walk_tokens": 8, "walk_steps": 4, "walk_hist": [1, 1, 2, 0]},   # tokens do not add up
    {"walk_tokens": 9, "walk_steps": 5, "walk_hist": [1, 1, 2, 0]},   # steps do not add up
    {"walk_tokens": 9, "walk_steps": 4, "walk_hist": [1.0, 1, 2, 0]},  # not counts
    {"walk_tokens": 9.0, "walk_steps": 4, "walk_hist": [1, 1, 2, 0]},  # not an int
])
def test_validator_rejects_bad_walk_fields(walk):
    with pytest.raises(ValueError, match="walk"):
        validate_record(_record(**walk))


def test_walk_fields_need_the_pipeline_record():
    legacy = {"step": 1, "time": 0.0, "epoch": 0.0, "loss": 1.0, "acc": 0.5, "lr": 1e-3}
    with pytest.raises(ValueError, match="walk"):
        validate_record({**legacy, "walk_tokens": 1, "walk_steps": 1, "walk_hist": [1, 0, 0, 0]})
