"""Regenerate the drafter's training data with the target itself, as the DFlash paper does.

Prompts are windows of the corpus (the stdlib sources the bundled target was trained on); each
response is the target's own GREEDY continuation, so the drafter learns exactly what the target
would say and the teacher-forced acceptance on this data is the acceptance speculative decoding
gets. Evaluation prompts come from the held-out files the target never saw.

    python -m pipelines.make_data                          # bundled target -> pipelines/assets/tiny_data/
    python -m pipelines.make_data --target Qwen/Qwen3-8B --device cuda:0 --out data_cache/qwen3-8b

Deterministic: the same target, seed, sizes, batch size and thread count give the same files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from dflash.data import DEFAULT_DATA_DIR, DEFAULT_TARGET_DIR, Dataset, load_dataset, save_dataset
from pipelines.data_stats import dataset_stats
from pipelines.make_target import corpus_files, read_text, split_corpus


@dataclass
class DataRecipe:
    """Sizes and seed of one generated dataset; written next to it."""

    n_train: int = 2048
    n_eval: int = 32
    prompt_len_min: int = 32
    prompt_len_max: int = 64
    new_tokens: int = 80
    batch_size: int = 64
    seed: int = 0
    threads: int = 2

    def __post_init__(self) -> None:
        for name in ("n_train", "n_eval", "prompt_len_min", "new_tokens", "batch_size", "threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.prompt_len_max < self.prompt_len_min:
            raise ValueError("prompt_len_max must be >= prompt_len_min")


def token_stream(tokenizer, files: list[Path]) -> list[int]:
    """The files' tokens, each file followed by the end-of-text token."""
    ids: list[int] = []
    for f in files:
        ids.extend(tokenizer(read_text(f), add_special_tokens=False)["input_ids"])
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
    return ids


def sample_prompts(
    stream: list[int], n: int, length_of, gen, eos_id: int | None
) -> list[list[int]]:
    """``n`` windows of ``stream`` at seeded random starts; ``length_of(i)`` gives prompt i's
    length. Windows that contain an end-of-text (they straddle two files) are redrawn."""
    import torch

    prompts: list[list[int]] = []
    while len(prompts) < n:
        length = length_of(len(prompts))
        start = int(torch.randint(0, len(stream) - length, (1,), generator=gen))
        window = stream[start : start + length]
        if eos_id is not None and eos_id in window:
            continue
        prompts.append(window)
    return prompts


def greedy_continuations(
    model, prompts: list[list[int]], new_tokens: int, eos_id: int | None, pad_id: int, device: str
) -> list[list[int]]:
    """The target's greedy continuation of each prompt; all prompts in the list have one length
    (so no padding, and each row's result does not depend on its neighbours' lengths). A
    continuation stops after its first end-of-text token."""
    import torch

    ids = torch.tensor(prompts, dtype=torch.long, device=device)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=1,
            do_sample=False,
            num_beams=1,
            eos_token_id=eos_id,
            pad_token_id=pad_id,
            use_cache=True,
        )
    responses = []
    for row in out[:, ids.shape[1] :].tolist():
        if eos_id is not None and eos_id in row:
            row = row[: row.index(eos_id) + 1]
        responses.append(row)
    return responses


def make_data(target: str, out: Path, recipe: DataRecipe, device: str = "cpu", log=print) -> dict:
    """Generate and write the dataset; return the metadata written."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    torch.set_num_threads(recipe.threads)
    tokenizer = AutoTokenizer.from_pretrained(target)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype).to(device).eval()
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_id
    if pad_id is None:
        raise ValueError(f"target {target} has neither a pad nor an eos token")

    train_files, held_files = split_corpus(corpus_files())
    gen = torch.Generator().manual_seed(recipe.seed)
    # One prompt length per generation batch: batches need no padding, lengths still vary.
    lengths = torch.randint(
        recipe.prompt_len_min,
        recipe.prompt_len_max + 1,
        ((recipe.n_train + recipe.batch_size - 1) // recipe.batch_size,),
        generator=gen,
    ).tolist()
    train_prompts = sample_prompts(
        token_stream(tokenizer, train_files),
        recipe.n_train,
        lambda i: lengths[i // recipe.batch_size],
        gen,
        eos_id,
    )
    eval_prompts = sample_prompts(
        token_stream(tokenizer, held_files),
        recipe.n_eval,
        lambda i: recipe.prompt_len_max,
        gen,
        eos_id,
    )

    examples = []
    for b, lo in enumerate(range(0, recipe.n_train, recipe.batch_size)):
        batch = train_prompts[lo : lo + recipe.batch_size]
        responses = greedy_continuations(model, batch, recipe.new_tokens, eos_id, pad_id, device)
        examples.extend(zip(batch, responses, strict=True))
        if b % 8 == 0:
            log(f"generated {len(examples)}/{recipe.n_train} ({time.time() - t0:.0f}s)")
    seconds = round(time.time() - t0, 1)
    response_lens = [len(r) for _, r in examples]
    meta = {
        "made_by": "python -m pipelines.make_data",
        # The bundled target by its repository path, so the file does not depend on the clone.
        "target": (
            "pipelines/assets/tiny_target"
            if Path(target).expanduser().resolve() == DEFAULT_TARGET_DIR
            else str(target)
        ),
        "recipe": asdict(recipe),
        "pad_token_id": int(pad_id),
        "eos_token_id": None if eos_id is None else int(eos_id),
        "mask_token_id": tokenizer.mask_token_id,
        "vocab_size": len(tokenizer),
        "n_examples": len(examples),
        "n_tokens": sum(len(p) + len(r) for p, r in examples),
        "mean_response_len": round(sum(response_lens) / len(response_lens), 2),
    }
    # The timing goes to the side file only, so the data files are byte-identical across runs.
    save_dataset(out, Dataset.from_examples(examples, meta), eval_prompts)
    meta = {**meta, "seconds": seconds}
    (out / "make_data.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--target",
        default=str(DEFAULT_TARGET_DIR),
        help="local directory or HF id of the target (default: the bundled one)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_DATA_DIR, help="output directory")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--stats",
        type=Path,
        metavar="DIR",
        help="only print the data statistics of the dataset in DIR",
    )
    for name, default in asdict(DataRecipe()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args(argv)
    if args.stats is not None:
        try:
            print(f"{args.stats}: {dataset_stats(load_dataset(args.stats)).line()}")
        except (OSError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        recipe = DataRecipe(**{k: getattr(args, k) for k in asdict(DataRecipe())})
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.target.startswith(("/", ".", "~")) and not Path(args.target).expanduser().is_dir():
        print(f"error: target directory {args.target} does not exist", file=sys.stderr)
        return 2
    try:
        meta = make_data(args.target, args.out, recipe, device=args.device)
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"wrote {meta['n_examples']} examples, {meta['n_tokens']} tokens to {args.out} "
        f"({meta['seconds']:.0f}s)"
    )
    print(f"data statistics: {dataset_stats(load_dataset(args.out)).line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
