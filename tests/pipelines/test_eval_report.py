"""dflash-train eval: the horizon, tau with an interval over prompts, benchmarks, histogram, JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipelines.checkpoints import step_dir
from pipelines.cli import main
from pipelines.config import TrainConfig
from pipelines.eval_report import EvalReport, PromptResult, bootstrap_ci, ratio_tau, render_text
from pipelines.log_records import validate_record

from .test_cli import write_toml


def prompt(benchmark: str, hist: list[int], new_tokens: int = 32) -> PromptResult:
    return PromptResult(benchmark=benchmark, hist=hist, new_tokens=new_tokens)


def test_tau_is_the_ratio_of_sums_and_the_interval_brackets_it():
    ps = [
        prompt("a", [10, 0, 0, 0]),
        prompt("a", [2, 2, 2, 2]),
        prompt("b", [0, 0, 0, 4]),
        prompt("b", [5, 5, 0, 0]),
    ]
    # (10 + 20 + 16 + 15) gained / (10 + 8 + 4 + 10) steps
    assert ratio_tau(ps) == pytest.approx(61 / 32)
    lo, hi = bootstrap_ci(ps)
    assert lo < 61 / 32 < hi
    assert lo >= 1.0
    assert hi <= 4.0
    assert bootstrap_ci(ps) == (lo, hi)  # seeded: the same interval every time
    assert all(math.isnan(x) for x in bootstrap_ci(ps[:1]))
    same = [prompt("a", [3, 3, 0, 0])] * 5
    assert bootstrap_ci(same) == pytest.approx((1.5, 1.5))  # no spread between prompts


def test_text_states_the_horizon_splits_benchmarks_and_hides_empty_rows():
    report = EvalReport(
        step=120,
        horizon=32,
        temperature=0.0,
        prompts=[
            prompt("mt-bench", [10, 4, 0, 0, 0, 0, 0, 1], 30),
            prompt("mt-bench", [8, 6, 0, 0, 0, 0, 0, 0], 32),
            prompt("gsm8k", [12, 2, 0, 0, 0, 0, 0, 0], 16),
        ],
    )
    text = render_text(report)
    assert text[0].startswith("step 120: tau = 1.442 (95% CI ")
    assert text[1] == (
        "3 prompts x up to 32 new tokens each (horizon 32; 78 generated, 43 verify steps), greedy"
    )
    table = text[text.index("benchmark  prompts  tau     95% CI") + 1 :][:2]
    assert table[0].startswith("mt-bench         2  1.586")
    assert table[1].startswith("gsm8k")
    hist = text[text.index("accepted  steps   share") + 1 :]
    assert [row.split()[0] for row in hist[:-1]] == ["1", "2", "8"]  # 3..7 never happened
    assert hist[-1] == "(5 of the 8 lengths never occurred)"
    doc = report.to_json()
    assert doc["horizon"] == 32
    assert doc["new_tokens"] == 78
    assert doc["n_prompts"] == 3
    assert [b["name"] for b in doc["benchmarks"]] == ["mt-bench", "gsm8k"]
    assert doc["tau_hist"] == [30, 12, 0, 0, 0, 0, 0, 1]
    assert len(doc["prompts"]) == 3


def test_one_benchmark_no_table():
    report = EvalReport(step=1, horizon=8, temperature=0.0, prompts=[prompt("held-out", [4, 2])])
    text = render_text(report)
    assert "no interval from one prompt" in text[0]
    assert (
        text[1]
        == "1 prompt x up to 8 new tokens each (horizon 8; 32 generated, 6 verify steps), greedy"
    )
    assert not any(line.startswith("benchmark") for line in text)
    assert report.to_json()["tau_ci"] == [None, None]


def test_eval_cli_json_and_benchmarks(tmp_path, tiny_assets, capsys):
    target, data = tiny_assets
    cfg = write_toml(tmp_path / "c.toml", tiny_assets, tmp_path)
    assert main(["sync", "--config", str(cfg), "--max-steps", "2"]) == 0
    prompts = [json.loads(x) for x in (Path(data) / "eval_prompts.jsonl").read_text().splitlines()]
    (tmp_path / "code.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prompts[:2]))
    (tmp_path / "mixed.jsonl").write_text(
        "".join(json.dumps({**p, "benchmark": "math"}) + "\n" for p in prompts[2:4])
    )
    capsys.readouterr()
    ck = str(step_dir(tmp_path / "ck", 2))
    assert (
        main(
            [
                "eval",
                "--drafter",
                ck,
                "--target",
                target,
                "--new-tokens",
                "5",
                "--prompts-file",
                str(tmp_path / "code.jsonl"),
                "--prompts-file",
                str(tmp_path / "mixed.jsonl"),
                "-f",
                "json",
                "--log",
                str(tmp_path / "train.jsonl"),
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["step"] == 2
    assert doc["horizon"] == 5
    assert doc["n_prompts"] == 4
    assert [(b["name"], b["n_prompts"]) for b in doc["benchmarks"]] == [("code", 2), ("math", 2)]
    assert all(p["new_tokens"] <= 5 for p in doc["prompts"])
    assert doc["new_tokens"] == sum(p["new_tokens"] for p in doc["prompts"])
    assert doc["tau_ci"][0] <= doc["tau"] <= doc["tau_ci"][1]
    rec = json.loads((tmp_path / "train.jsonl").read_text().splitlines()[-1])
    assert validate_record(rec) == "eval"
    assert rec["tau_hist"] == doc["tau_hist"]
    # text: the per-prompt horizon, not the total, and the default prompt count from the config
    assert main(["eval", "--drafter", ck, "--target", target, "--data", data]) == 0
    out = capsys.readouterr().out.splitlines()
    from dflash.data import load_dataset
    from pipelines.run_setup import longest_response

    n = min(TrainConfig().eval_prompts, len(prompts))
    horizon = TrainConfig().eval_new_tokens or longest_response(load_dataset(data))
    assert out[1].startswith(f"{n} prompts x up to {horizon} new tokens each (horizon {horizon}; ")


def test_eval_bad_inputs_are_one_line(tmp_path, capsys):
    (tmp_path / "ck").mkdir()
    assert main(["eval", "--drafter", str(tmp_path / "ck"), "-f", "yaml"]) == 2
    assert "--format must be text or json" in capsys.readouterr().err
    assert main(["eval", "--drafter", str(tmp_path / "ck"), "--prompts-file", "/nope.jsonl"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--prompts-file: no file at /nope.jsonl" in err[0]
