"""Make a larger eval-prompt file from the same source as the bundled one (issue 22).

The bundled data's ``eval_prompts.jsonl`` holds 32 prompts: 64-token windows of the stdlib files
the bundled target never saw, drawn by ``python -m pipelines.make_data`` after its training
prompts from one seeded generator. This script replays those draws (no model runs: the training
prompts are drawn and dropped) and keeps drawing, so its first 32 prompts ARE the bundled file
(checked) and the rest are further windows of the same held-out text:

    python benchmarks/make_eval_prompts.py 256 benchmarks/eval_data/eval_prompts.jsonl

An 8-prompt eval's standard error between prompts is 8-11% of tau on the committed runs; 64
prompts bring it to about 4% (``benchmarks/README.md``). The corpus is the running Python's
stdlib, so another Python version may draw other windows: the file is committed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def draw_eval_prompts(n_eval: int) -> list[list[int]]:
    """The first ``n_eval`` eval prompts ``make_data``'s default recipe would draw."""
    import torch
    from transformers import AutoTokenizer

    from dflash.data import DEFAULT_TARGET_DIR
    from pipelines.make_data import DataRecipe, sample_prompts, token_stream
    from pipelines.make_target import corpus_files, split_corpus

    r = DataRecipe()
    tokenizer = AutoTokenizer.from_pretrained(DEFAULT_TARGET_DIR)
    eos = tokenizer.eos_token_id
    train_files, held_files = split_corpus(corpus_files())
    gen = torch.Generator().manual_seed(r.seed)
    # The same draws in the same order as make_data: batch lengths, training prompts, eval prompts.
    batches = (r.n_train + r.batch_size - 1) // r.batch_size
    lengths = torch.randint(
        r.prompt_len_min, r.prompt_len_max + 1, (batches,), generator=gen
    ).tolist()
    sample_prompts(
        token_stream(tokenizer, train_files),
        r.n_train,
        lambda i: lengths[i // r.batch_size],
        gen,
        eos,
    )
    return sample_prompts(
        token_stream(tokenizer, held_files), n_eval, lambda i: r.prompt_len_max, gen, eos
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", type=int, help="prompts to draw (at least the bundled file's 32)")
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    from dflash.data import DEFAULT_DATA_DIR, load_eval_prompts

    bundled = load_eval_prompts(DEFAULT_DATA_DIR)
    if args.n < len(bundled):
        p.error(f"n must be at least the bundled file's {len(bundled)} prompts")
    prompts = draw_eval_prompts(args.n)
    if prompts[: len(bundled)] != bundled:
        print(
            "error: the replayed draws do not reproduce the bundled eval prompts "
            "(another Python's stdlib?)",
            file=sys.stderr,
        )
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w") as f:
        f.writelines(json.dumps({"input_ids": ids}) + "\n" for ids in prompts)
    print(
        f"wrote {len(prompts)} prompts to {args.out} (the first {len(bundled)}: the bundled file)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
