"""The walked tau in the pipeline's log: when it is written, what it holds, how it is validated."""

from __future__ import annotations

import json

import pytest

from dflash.data import load_dataset
from pipelines.async_pipeline import run_pipeline
from pipelines.log_records import validate_record
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
            assert len(r["walk_hist"]) == 4
            assert sum(r["walk_hist"]) == r["walk_steps"]
            assert 1 <= r["walk_tokens"] / r["walk_steps"] <= 4


def test_walk_counts_intervals_of_log_every_and_can_be_off(make_cfg, tmp_path):
    run_pipeline(
        make_cfg(max_steps=4, log_every=2, walk_every=2, eval_new_tokens=None, dtype="bfloat16")
    )
    m = metrics_of(read_log(tmp_path / "train.jsonl"))
    assert [(r["step"], "walk_steps" in r) for r in m] == [(2, False), (4, True)]
    run_pipeline(
        make_cfg(
            max_steps=6, log_every=1, walk_every=0, resume=str(tmp_path / "ck" / "step-000004")
        )
    )
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
    rec = {
        "step": 1,
        "time": 0.0,
        "epoch": 0.0,
        "loss": 1.0,
        "acc": 0.5,
        "lr": 1e-3,
        "tok_per_sec": 1.0,
        "n_tokens": 10,
        "n_blocks": 2,
        "n_pred": 6,
        "acc_pos": [0.5, 0.5, 0.5],
        "accept_pos": [0.5, 0.2, 0.1],
        "tau_train": 1.8,
        "grad_norm": 1.0,
        "stage_busy": {},
        "queue_fill": {},
    }
    return {**rec, **walk}


def test_validator_accepts_a_consistent_walk():
    assert (
        validate_record(_record(walk_tokens=9, walk_steps=4, walk_hist=[1, 1, 2, 0])) == "metrics"
    )


@pytest.mark.parametrize(
    "walk",
    [
        {"walk_tokens": 9, "walk_steps": 4},  # not all three
        {"walk_tokens": 9, "walk_steps": 4, "walk_hist": [1, 1, 2]},  # hist length != B
        {"walk_tokens": 8, "walk_steps": 4, "walk_hist": [1, 1, 2, 0]},  # tokens do not add up
        {"walk_tokens": 9, "walk_steps": 5, "walk_hist": [1, 1, 2, 0]},  # steps do not add up
        {"walk_tokens": 9, "walk_steps": 4, "walk_hist": [1.0, 1, 2, 0]},  # not counts
        {"walk_tokens": 9.0, "walk_steps": 4, "walk_hist": [1, 1, 2, 0]},  # not an int
    ],
)
def test_validator_rejects_bad_walk_fields(walk):
    with pytest.raises(ValueError, match="walk"):
        validate_record(_record(**walk))


def test_walk_fields_need_the_pipeline_record():
    legacy = {"step": 1, "time": 0.0, "epoch": 0.0, "loss": 1.0, "acc": 0.5, "lr": 1e-3}
    with pytest.raises(ValueError, match="walk"):
        validate_record({**legacy, "walk_tokens": 1, "walk_steps": 1, "walk_hist": [1, 0, 0, 0]})


# -- the held-out walk split -----------------------------------------------------------------------


def test_the_walk_walks_a_held_out_split_never_trained_on(
    make_cfg, tiny_assets, tmp_path, monkeypatch
):
    """The split is fixed at the start (named in the header), no trained batch holds any of its
    sequences, each walked record walks the next walk_seqs of them, and a resumed run holds out
    the same examples (its checkpoint keeps the split)."""

    from dflash.data import held_out_indices

    _, data = tiny_assets
    full = load_dataset(data)
    trained: list[tuple[int, ...]] = []

    def spy(stage, i, item):
        if stage == "drafter":
            ids, mask = item.batch["input_ids"], item.batch["attention_mask"].bool()
            trained.extend(tuple(ids[r][mask[r]].tolist()) for r in range(ids.shape[0]))

    from pipelines.walk_split import HeldOutWalk

    walked_rows: list[list[int]] = []
    real_walk = HeldOutWalk.walk

    def walk(self, *args, record, n, **kw):
        walked_rows.append(self.rows_for(record, n))
        return real_walk(self, *args, record=record, n=n, **kw)

    monkeypatch.setattr(HeldOutWalk, "walk", walk)
    cfg = make_cfg(
        max_steps=4, walk_every=1, walk_seqs=2, walk_holdout=6, ckpt_every=2, walk_source="data"
    )
    assert run_pipeline(cfg, inject=spy).exit_code == 0
    assert walked_rows == [[0, 1], [2, 3], [4, 5], [0, 1]]  # the next two, in turn
    records = read_log(tmp_path / "train.jsonl")
    split = records[0]["walk_held_out"]
    assert split == {
        "examples": 6,
        "seed": 0,
        "of": len(full),
        "indices": held_out_indices(len(full), 6, 0),
        "source": "data",
    }
    held = {tuple(full[i].input_ids.tolist()) for i in split["indices"]}
    assert trained
    assert not held & set(trained)
    walks = [r for r in metrics_of(records) if "walk_tokens" in r]
    assert len(walks) == 4
    assert all(r["walk_steps"] > 0 for r in walks)
    # the held-out examples' response lengths bound each record's walked tokens (2 sequences)
    assert all(r["walk_tokens"] <= 2 * (6 - 1) for r in walks)

    resumed = make_cfg(
        max_steps=5,
        walk_every=1,
        walk_seqs=2,
        walk_holdout=3,
        seed=0,
        resume=str(tmp_path / "ck" / "step-000004"),
    )
    assert run_pipeline(resumed).exit_code == 0
    header = [r for r in read_log(tmp_path / "train.jsonl") if r.get("event") == "run_start"][-1]
    assert header["walk_held_out"] == split  # the checkpoint's, not walk_holdout = 3

    # a checkpoint written before the walk had a source held out training examples: resumed
    # (under the eval-prompt default), it keeps walking them, not the eval file's prompts
    state_path = tmp_path / "ck" / "step-000004" / "state.json"
    state = json.loads(state_path.read_text())
    del state["walk_held_out"]["source"]
    state_path.write_text(json.dumps(state))
    again = make_cfg(max_steps=5, walk_every=1, walk_seqs=2, seed=0, resume=str(state_path.parent))
    assert again.walk_source == "eval_prompts"
    assert run_pipeline(again).exit_code == 0
    header = [r for r in read_log(tmp_path / "train.jsonl") if r.get("event") == "run_start"][-1]
    assert header["walk_held_out"] == split


def test_by_default_the_walk_walks_the_eval_prompts_the_eval_does_not_use(
    make_cfg, tiny_assets, tmp_path
):
    """walk_source eval_prompts (the default): the split is the eval file's prompts after the
    eval's own, every training example is trained on, and a resume keeps the split."""
    from dflash.data import load_eval_prompts

    _, data = tiny_assets
    n_prompts = len(load_eval_prompts(data))
    cfg = make_cfg(max_steps=2, walk_every=1, walk_seqs=2, eval_prompts=1, ckpt_every=2)
    assert run_pipeline(cfg).exit_code == 0
    records = read_log(tmp_path / "train.jsonl")
    split = records[0]["walk_held_out"]
    assert split == {
        "examples": n_prompts - 1,
        "seed": 0,
        "of": n_prompts,
        "indices": list(range(1, n_prompts)),
        "source": "eval_prompts",
    }
    walks = [r for r in metrics_of(records) if "walk_tokens" in r]
    assert [r["walk_tokens"] for r in walks] == [2 * (6 - 1)] * 2  # 2 prompts, horizon 6
    resumed = make_cfg(
        max_steps=3, walk_every=1, eval_prompts=2, resume=str(tmp_path / "ck" / "step-000002")
    )
    assert run_pipeline(resumed).exit_code == 0
    header = [r for r in read_log(tmp_path / "train.jsonl") if r.get("event") == "run_start"][-1]
    assert header["walk_held_out"] == split  # the checkpoint's, though the eval now uses 2


def test_the_eval_prompt_walk_equals_speculative_decoding_on_those_prompts():
    """The walk of eval-file prompts with the target's greedy continuations reproduces greedy
    speculative decoding on the same prompts exactly (histogram, tokens, steps): it measures
    the eval's own population. The bundled target and eval prompts, a drafter partly trained
    on those continuations (a spread of acceptance lengths)."""
    import torch

    from dflash import (
        DFlashConfig,
        DFlashDraftModel,
        TargetModel,
        compute_loss_and_metrics,
        evaluate_tau,
    )
    from dflash.data import DEFAULT_TARGET_DIR, collate, load_eval_prompts
    from pipelines.walk_split import prompt_walk

    target = TargetModel.from_pretrained(str(DEFAULT_TARGET_DIR))
    prompts = load_eval_prompts()
    cfg = DFlashConfig.for_target(target.config, block_size=8, num_draft_layers=1, num_anchors=32)
    layers, horizon, rows = list(cfg.target_layer_ids), 24, [0, 1, 2, 3]
    split = prompt_walk(target, prompts, rows, horizon, layers, load_dataset().meta, 0)
    assert split.to_header()["source"] == "eval_prompts"
    torch.manual_seed(0)
    drafter = DFlashDraftModel(cfg)
    batch = collate([split.examples[i] for i in range(len(rows))], split.examples.pad_token_id)
    feats = target.forward(batch["input_ids"], layers, batch["attention_mask"]).features
    opt = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    for i in range(25):
        out = compute_loss_and_metrics(
            drafter, target, batch, torch.Generator().manual_seed(i), features=feats
        )
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    walked = split.walk(drafter, target, layers, horizon, 0, len(rows), "cpu")
    measured = evaluate_tau(target, drafter, [prompts[i] for i in rows], max_new_tokens=horizon)
    assert walked["walk_hist"] == measured.tau_hist
    assert walked["walk_steps"] == measured.n_steps
    assert walked["walk_tokens"] == len(rows) * (horizon - 1)
    assert walked["walk_tokens"] / walked["walk_steps"] > 1.2  # a non-trivial case


def test_without_a_split_the_header_names_none_and_the_walk_reads_the_batch(make_cfg, tmp_path):
    assert run_pipeline(make_cfg(max_steps=2, walk_every=1, walk_holdout=0)).exit_code == 0
    records = read_log(tmp_path / "train.jsonl")
    assert "walk_held_out" not in records[0]
    assert all("walk_tokens" in r for r in metrics_of(records))


def test_the_split_is_a_seeded_draw_and_a_small_share():
    from dflash.data import held_out_indices
    from pipelines.walk_split import split_for_walk

    a = held_out_indices(2048, 32, 0)
    assert a == held_out_indices(2048, 32, 0)
    assert a != held_out_indices(2048, 32, 1)
    assert a == sorted(set(a))
    assert a != list(range(32))
    with pytest.raises(ValueError, match="cannot hold out 10 of 10 examples"):
        held_out_indices(10, 10, 0)
    full = load_dataset()  # the bundled data: 2048 examples
    train, split = split_for_walk(full, 32, 0)
    assert len(train) == len(full) - 32
    assert split.indices == a
    small, split = split_for_walk(full.subset(list(range(40))), 32, 0)
    assert len(split.indices) == 5
    assert len(small) == 35
    assert split.rows_for(0, 2) == [0, 1]
    assert split.rows_for(2, 2) == [4, 0]


def test_a_seeded_split_draws_the_evals_prompts_and_names_them(make_cfg, tiny_assets, tmp_path):
    """eval_split seeded: the eval measures a seeded draw of the eval file, the walk takes its
    own draw from the rest, both named in the header; the eval records carry each prompt's
    tokens and steps; a resume keeps both draws whatever the config asks."""
    import torch

    from dflash import evaluate_tau
    from dflash.checkpoint import load_drafter
    from dflash.data import load_eval_prompts
    from pipelines.run_setup import load_target
    from pipelines.walk_split import seeded_prompt_split

    _, data = tiny_assets
    every = load_eval_prompts(data)
    cfg = make_cfg(
        max_steps=2,
        walk_every=1,
        walk_seqs=2,
        eval_prompts=3,
        eval_every=2,
        walk_holdout=4,
        eval_split="seeded",
        seed=5,
        ckpt_every=2,
    )
    assert run_pipeline(cfg).exit_code == 0
    records = read_log(tmp_path / "train.jsonl")
    split = records[0]["walk_held_out"]
    evals, walk = seeded_prompt_split(len(every), 3, 4, 5)
    assert split["eval_indices"] == evals
    assert split["indices"] == walk
    assert evals != [0, 1, 2]  # not the file's first prompts (seed 5)
    ev = next(r for r in records if r.get("event") == "eval")
    assert validate_record(ev) == "eval"
    assert len(ev["prompt_tokens"]) == len(ev["prompt_steps"]) == 3
    assert sum(ev["prompt_steps"]) == sum(ev["tau_hist"])
    assert ev["tau"] == sum(ev["prompt_tokens"]) / sum(ev["prompt_steps"])
    # the eval measured the drawn prompts: decode them again with the step-2 checkpoint
    target = load_target(cfg.target, "cpu", torch.float32)
    drafter = load_drafter(str(tmp_path / "ck" / "step-000002"), device="cpu")
    again = [
        evaluate_tau(target, drafter, [every[i]], max_new_tokens=cfg.eval_new_tokens).n_steps
        for i in evals
    ]
    assert again == ev["prompt_steps"]

    resumed = make_cfg(
        max_steps=3, walk_every=1, eval_prompts=2, resume=str(tmp_path / "ck" / "step-000002")
    )
    assert resumed.eval_split == "first"
    assert run_pipeline(resumed).exit_code == 0
    header = [r for r in read_log(tmp_path / "train.jsonl") if r.get("event") == "run_start"][-1]
    assert header["walk_held_out"] == split


def test_the_seeded_split_is_a_pure_disjoint_draw():
    from pipelines.walk_split import seeded_prompt_split

    evals, walk = seeded_prompt_split(32, 8, 24, 3)
    assert seeded_prompt_split(32, 8, 24, 3) == (evals, walk)
    assert len(evals) == 8
    assert sorted(evals + walk) == list(range(32))
    assert seeded_prompt_split(32, 8, 24, 4)[0] != evals
    assert seeded_prompt_split(8, 8, 24, 3) == (list(range(8)), [])  # nothing left to walk
    assert len(seeded_prompt_split(256, 64, 192, 0)[1]) == 192
