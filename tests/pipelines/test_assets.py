"""The committed tiny target and its data: load offline, generate, match each other."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from dflash.data import DEFAULT_DATA_DIR, DEFAULT_TARGET_DIR, load_dataset, load_eval_prompts
from pipelines.make_data import DataRecipe
from pipelines.make_target import (
    EOS_TOKEN,
    MASK_TOKEN,
    PAD_TOKEN,
    TargetRecipe,
    corpus_files,
    split_corpus,
)


@pytest.fixture(scope="module")
def target():
    # A local directory: transformers reads it without any network access.
    torch.set_num_threads(1)
    tok = transformers.AutoTokenizer.from_pretrained(DEFAULT_TARGET_DIR)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        DEFAULT_TARGET_DIR, dtype=torch.float32
    ).eval()
    return tok, model


def test_target_files_are_small_and_complete():
    names = {p.name for p in DEFAULT_TARGET_DIR.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "make_target.json"} <= names
    total = sum(p.stat().st_size for p in DEFAULT_TARGET_DIR.iterdir())
    assert total < 20e6
    meta = json.loads((DEFAULT_TARGET_DIR / "make_target.json").read_text())
    # The committed weights learned something: well below the uniform loss ln(4096) = 8.3.
    assert meta["held_out_loss"] < 6.0


def test_tokenizer_special_tokens(target):
    tok, model = target
    assert tok.eos_token == EOS_TOKEN
    assert tok.pad_token == PAD_TOKEN
    assert tok.mask_token == MASK_TOKEN
    ids = {tok.eos_token_id, tok.pad_token_id, tok.mask_token_id}
    assert len(ids) == 3
    assert model.config.vocab_size == len(tok)
    text = "def f(x):\n    return x + 1\n"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_target_architecture(target):
    _, model = target
    cfg = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert cfg.num_hidden_layers >= 5
    assert cfg.tie_word_embeddings
    assert 1e6 < sum(p.numel() for p in model.parameters()) < 20e6


def test_target_generates_greedily(target):
    tok, model = target
    ids = tok("import os\n\ndef ", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
        again = model.generate(
            ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id
        )
    assert out.shape[1] > ids.shape[1]
    assert torch.equal(out, again)


def test_bundled_data_is_the_targets_greedy_output(target):
    """A stored response is exactly what the target says greedily after the stored prompt."""
    tok, model = target
    ds = load_dataset(DEFAULT_DATA_DIR)
    assert ds.meta["pad_token_id"] == tok.pad_token_id
    assert ds.meta["mask_token_id"] == tok.mask_token_id
    ex = ds[0]
    prompt = ex.input_ids[: ex.response_start][None]
    n_check = 8  # a short prefix keeps the test fast; float drift over long runs is not at issue
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=n_check,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
    assert (
        out[0, ex.response_start :].tolist()
        == ex.input_ids[ex.response_start : ex.response_start + n_check].tolist()
    )


def test_corpus_split_is_disjoint_and_deterministic():
    files = corpus_files()
    train, held = split_corpus(files)
    assert not set(train) & set(held)
    assert len(train) + len(held) == len(files)
    assert split_corpus(corpus_files()) == (train, held)


def test_recipes_validate():
    with pytest.raises(ValueError, match="num_hidden_layers must be >= 5"):
        TargetRecipe(num_hidden_layers=4)
    with pytest.raises(ValueError, match="prompt_len_max must be >= prompt_len_min"):
        DataRecipe(prompt_len_min=64, prompt_len_max=32)


SMALL = DataRecipe(n_train=6, n_eval=2, new_tokens=5, batch_size=4, threads=1)


def test_make_data_round_trips(tmp_path):
    """A small regeneration: loadable, prompt lengths in range, responses of the asked size."""
    from pipelines.make_data import make_data

    meta = make_data(str(DEFAULT_TARGET_DIR), tmp_path, SMALL, log=lambda _: None)
    assert meta["n_examples"] == 6
    ds = load_dataset(tmp_path)
    for i in range(len(ds)):
        ex = ds[i]
        assert SMALL.prompt_len_min <= ex.response_start <= SMALL.prompt_len_max
        assert 1 <= ex.input_ids.numel() - ex.response_start <= SMALL.new_tokens
    # one prompt length per generation batch
    assert ds[0].response_start == ds[3].response_start
    assert len(load_eval_prompts(tmp_path)) == 2


@pytest.mark.slow
def test_make_data_is_deterministic(tmp_path):
    from pipelines.make_data import make_data

    for name in ("a", "b"):
        make_data(str(DEFAULT_TARGET_DIR), tmp_path / name, SMALL, log=lambda _: None)
    for f in ("train.safetensors", "eval_prompts.jsonl"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
