"""Train the bundled tiny target: a byte-level BPE tokenizer and a small Qwen3 model.

The corpus is the Python standard library's own top-level source files, which every machine with
Python has, so the whole thing is reproducible offline. The output directory loads with
``AutoTokenizer.from_pretrained(dir)`` and ``AutoModelForCausalLM.from_pretrained(dir)`` and is
committed under ``pipelines/assets/tiny_target/``, so nobody has to run this to use the project.

    python -m pipelines.make_target                 # writes pipelines/assets/tiny_target/
    python -m pipelines.make_target --steps 50 --out /tmp/t   # a quick smoke run

Determinism: the same Python version (the corpus is its stdlib), seed, step count and thread count
give the same tokenizer and, on the same CPU kind, the same weights.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
DEFAULT_OUT = ASSETS_DIR / "tiny_target"

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = [EOS_TOKEN, PAD_TOKEN, MASK_TOKEN]

# Every HELD_OUT_EVERY-th corpus file (by sorted name) is never trained on: the drafter's eval
# prompts come from these, so evaluation measures text that neither model has seen.
HELD_OUT_EVERY = 10
HELD_OUT_PHASE = 7


@dataclass
class TargetRecipe:
    """Everything that determines the bundled target; written next to the weights."""

    seed: int = 0
    vocab_size: int = 4096
    hidden_size: int = 256
    num_hidden_layers: int = 6  # >= 5 so that DFlash's context layers 1..L-3 exist
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 640
    max_position_embeddings: int = 1024
    seq_len: int = 128
    batch_size: int = 16
    steps: int = 420
    peak_lr: float = 3e-3
    warmup_steps: int = 20
    weight_decay: float = 0.01
    threads: int = 2

    def __post_init__(self) -> None:
        if self.num_hidden_layers < 5:
            raise ValueError("num_hidden_layers must be >= 5 (DFlash reads layers 1..L-3)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        for name in ("vocab_size", "seq_len", "batch_size", "steps", "threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


def corpus_files() -> list[Path]:
    """The stdlib's top-level ``*.py`` files, sorted by name (a deterministic list per Python)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    if not files:
        raise RuntimeError(f"no Python source files found under {stdlib}")
    return files


def split_corpus(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """Split the corpus into (train files, held-out files) by position in the sorted list."""
    train = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY != HELD_OUT_PHASE]
    held = [f for i, f in enumerate(files) if i % HELD_OUT_EVERY == HELD_OUT_PHASE]
    return train, held


def read_text(path: Path) -> str:
    # A few stdlib files hold latin-1 bytes in comments; replace rather than skip them so the
    # corpus is the same on every machine.
    return path.read_text(encoding="utf-8", errors="replace")


def train_tokenizer(texts: list[str], vocab_size: int):
    """Train a byte-level BPE tokenizer and wrap it as a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        mask_token=MASK_TOKEN,
        bos_token=None,
        model_max_length=1 << 20,
    )


def encode_corpus(tokenizer, texts: list[str]) -> torch.Tensor:  # noqa: F821
    """One flat token stream: every file followed by ``<|endoftext|>``."""
    import torch

    ids: list[int] = []
    for text in texts:
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step: int, recipe: TargetRecipe) -> float:
    """Linear warmup then cosine decay to 10% of peak."""
    if step < recipe.warmup_steps:
        return recipe.peak_lr * (step + 1) / recipe.warmup_steps
    frac = (step - recipe.warmup_steps) / max(1, recipe.steps - recipe.warmup_steps)
    return recipe.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def build_model(recipe: TargetRecipe, tokenizer):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads,
        head_dim=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        rope_theta=10000.0,
        attn_implementation="sdpa",
    )
    return Qwen3ForCausalLM(config)


def train(recipe: TargetRecipe, out: Path, log=print) -> dict:
    """Train tokenizer and model, write both to ``out``, return the metadata written."""
    import torch

    t0 = time.time()
    torch.manual_seed(recipe.seed)
    torch.set_num_threads(recipe.threads)
    train_files, held_files = split_corpus(corpus_files())
    texts = [read_text(f) for f in train_files]
    tokenizer = train_tokenizer(texts, recipe.vocab_size)
    stream = encode_corpus(tokenizer, texts)
    t_tok = time.time() - t0
    log(
        f"tokenizer: {len(tokenizer)} tokens, corpus {len(train_files)} files, "
        f"{stream.numel()} tokens ({t_tok:.1f}s)"
    )

    model = build_model(recipe, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f}M parameters")
    opt = torch.optim.AdamW(
        model.parameters(), lr=recipe.peak_lr, betas=(0.9, 0.95), weight_decay=recipe.weight_decay
    )
    gen = torch.Generator().manual_seed(recipe.seed)
    n_windows = stream.numel() - recipe.seq_len - 1
    curve: list[tuple[int, float]] = []
    ema = None
    model.train()
    t_train = time.time()
    for step in range(recipe.steps):
        starts = torch.randint(0, n_windows, (recipe.batch_size,), generator=gen)
        batch = torch.stack([stream[s : s + recipe.seq_len + 1] for s in starts.tolist()])
        for group in opt.param_groups:
            group["lr"] = lr_at(step, recipe)
        loss = model(input_ids=batch[:, :-1], labels=batch[:, :-1].clone()).loss
        # labels are shifted inside the model; passing the input as labels is the HF convention.
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = loss.item()
        ema = value if ema is None else 0.95 * ema + 0.05 * value
        if step % 25 == 0 or step == recipe.steps - 1:
            curve.append((step, round(ema, 4)))
            rate = (step + 1) / (time.time() - t_train)
            log(
                f"step {step:5d}  loss {value:.3f}  ema {ema:.3f}  lr {lr_at(step, recipe):.2e}"
                f"  {rate:.2f} step/s"
            )
    train_seconds = time.time() - t_train

    model.eval()
    held_loss = held_out_loss(model, tokenizer, held_files, recipe)
    log(f"held-out loss {held_loss:.3f} (train ema {ema:.3f}); train {train_seconds:.0f}s")

    out.mkdir(parents=True, exist_ok=True)
    # bf16 halves the committed size; the tiny model's quality is unaffected at this scale and
    # consumers upcast on load (torch_dtype=float32) for CPU work.
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    meta = {
        "made_by": "python -m pipelines.make_target",
        "recipe": asdict(recipe),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "corpus": {
            "stdlib": str(Path(sysconfig.get_paths()["stdlib"])),
            "train_files": len(train_files),
            "held_out_files": len(held_files),
            "train_tokens": int(stream.numel()),
        },
        "n_params": n_params,
        "final_train_loss_ema": round(ema, 4),
        "held_out_loss": round(held_loss, 4),
        "loss_curve": curve,
        "seconds": {
            "tokenizer": round(t_tok, 1),
            "train": round(train_seconds, 1),
            "total": round(time.time() - t0, 1),
        },
    }
    (out / "make_target.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def held_out_loss(model, tokenizer, files: list[Path], recipe: TargetRecipe) -> float:
    """Mean next-token loss over the first windows of the held-out files (never trained on)."""
    import torch

    stream = encode_corpus(tokenizer, [read_text(f) for f in files])
    n = min(32, stream.numel() // (recipe.seq_len + 1))
    batch = stream[: n * recipe.seq_len].view(n, recipe.seq_len)
    with torch.no_grad():
        return float(model(input_ids=batch, labels=batch).loss)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument("--steps", type=int, default=TargetRecipe.steps)
    parser.add_argument("--seed", type=int, default=TargetRecipe.seed)
    parser.add_argument("--threads", type=int, default=TargetRecipe.threads)
    args = parser.parse_args(argv)
    try:
        recipe = TargetRecipe(seed=args.seed, steps=args.steps, threads=args.threads)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    meta = train(recipe, args.out)
    print(f"wrote {args.out} ({meta['seconds']['total']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
