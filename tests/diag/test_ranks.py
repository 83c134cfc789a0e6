"""Per-rank throughput skew (dflash_diag.read.ranks) and the CLI's rank-log handling (globs, JSON key)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.rank_skew import rank_skew
from dflash_diag.cli import app
from dflash_diag.errors import DiagError
from dflash_diag.read.files import expand_log_args, split_rank_logs
from dflash_diag.read.ranks import header_rank, parse_rank_records, rank_from_name

from .make_sample_log import generate
from .test_cli_converge import JSON_KEYS

runner = CliRunner()


def rank_records(
    rank: int, world: int, steps: range, tokens: int, own_s: float, wait_s: float
) -> list[dict]:
    """A rank log as the trainer writes it: a header with ``rank``, then one record per step."""
    head = {
        "event": "run_start",
        "schema": 1,
        "script": "pipeline",
        "time": 0.0,
        "config": {},
        "schedule": {},
        "block_size": 4,
        "steps_per_epoch": None,
        "world_size": world,
        "resumed_from": None,
        "rank": rank,
    }
    out = [head]
    for s in steps:
        out.append(
            {
                "step": s,
                "time": float(s),
                "epoch": 0.0,
                "loss": 2.0,
                "acc": 0.25,
                "lr": 1e-4,
                "tok_per_sec": tokens / own_s,
                "n_tokens": tokens,
                "step_time": own_s + wait_s,
                "sync_wait": wait_s,
            }
        )
    return out


def write_log(path: Path, records: list[dict], torn: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + torn)
    return path


def test_rank_is_recognised_by_name_or_header():
    assert rank_from_name("logs/train.rank12.jsonl") == 12
    assert rank_from_name("train.rank3.jsonl.gz") == 3
    assert rank_from_name("logs/train.jsonl") is None
    assert rank_from_name("-") is None
    assert rank_from_name("rank3.jsonl") is None  # the stem must precede .rank{N}
    assert header_rank('{"event": "run_start", "rank": 2}') == 2
    assert header_rank('{"event": "run_start", "world_size": 2}') is None
    assert header_rank('{"step": 1, "rank": 2}') is None
    lines = [json.dumps(r) for r in rank_records(5, 8, range(1, 3), 100, 1.0, 0.0)]
    # The header's rank wins over the name; a file without either is not a rank log.
    assert parse_rank_records("x.rank1.jsonl", lines).rank == 5
    assert parse_rank_records("plain.jsonl", lines[1:]) is None


def test_restarted_steps_keep_the_later_record_and_torn_lines_are_skipped():
    recs = rank_records(0, 2, range(1, 4), 100, 1.0, 0.0)
    again = dict(recs[2], n_tokens=999)
    lines = [json.dumps(r) for r in [*recs, again]] + ['{"step": 4, "n_tok']
    log = parse_rank_records("t.rank0.jsonl", lines)
    assert sorted(log.steps) == [1, 2, 3]
    assert log.steps[2]["n_tokens"] == 999


def logs_of(specs: dict[int, tuple[range, int, float, float]]):
    return [
        parse_rank_records(
            f"t.rank{r}.jsonl", [json.dumps(x) for x in rank_records(r, len(specs), *spec)]
        )
        for r, spec in specs.items()
    ]


def test_skew_uses_own_time_over_common_steps():
    # Rank 2 computes slowest (no wait); the others wait for it. Rank 1 also logged extra steps.
    logs = logs_of(
        {
            0: (range(1, 11), 1000, 0.5, 0.3),
            1: (range(1, 15), 1200, 0.4, 0.4),
            2: (range(1, 11), 900, 0.8, 0.0),
        }
    )
    skew = rank_skew(logs)
    assert (skew.first_step, skew.last_step, skew.common_steps) == (1, 10, True)
    by = {s.rank: s for s in skew.ranks}
    assert [s.steps for s in skew.ranks] == [10, 10, 10]
    assert by[0].tok_per_sec == pytest.approx(2000)
    assert by[1].tok_per_sec == pytest.approx(3000)
    assert by[2].tok_per_sec == pytest.approx(1125)
    assert by[0].wait_fraction == pytest.approx(0.3 / 0.8)
    assert by[2].wait_fraction == 0
    assert by[1].step_time == pytest.approx(0.8)
    assert (skew.slowest, skew.fastest) == (2, 1)
    assert skew.skew == pytest.approx(3000 / 1125)
    assert skew.slowest_vs_median == pytest.approx(statistics.median([2000, 3000, 1125]) / 1125)
    bounded = rank_skew(logs, from_step=3, to_step=5)
    assert (bounded.first_step, bounded.last_step) == (3, 5)
    assert {s.steps for s in bounded.ranks} == {3}


def test_without_timing_fields_the_mean_rate_is_used_and_no_common_step_falls_back():
    a = parse_rank_records(
        "a.rank0.jsonl",
        [json.dumps({"step": s, "tok_per_sec": v}) for s, v in [(1, 100.0), (2, 300.0)]],
    )
    b = parse_rank_records(
        "b.rank1.jsonl",
        [json.dumps({"step": s, "tok_per_sec": 50.0, "n_tokens": 5}) for s in (7, 8)],
    )
    skew = rank_skew([a, b])
    assert not skew.common_steps
    assert (skew.first_step, skew.last_step) == (1, 8)
    assert [s.tok_per_sec for s in skew.ranks] == [200.0, 50.0]
    assert skew.ranks[0].wait_fraction is None
    assert skew.slowest == 1
    assert skew.skew == 4.0


def test_no_rate_at_all_gives_no_slowest_and_duplicate_ranks_are_an_error():
    a = parse_rank_records("a.rank0.jsonl", [json.dumps({"step": 1, "loss": 1.0})])
    skew = rank_skew([a])
    assert skew.slowest is None
    assert skew.skew is None
    assert skew.ranks[0].tok_per_sec is None
    with pytest.raises(DiagError, match="rank 0 appears twice"):
        rank_skew([a, parse_rank_records("b.rank0.jsonl", [])])


def test_glob_expansion_natural_order_and_errors(tmp_path):
    for r in (10, 2, 0):
        write_log(tmp_path / f"train.rank{r}.jsonl", rank_records(r, 11, range(1, 3), 10, 1.0, 0.0))
    main = write_log(tmp_path / "train.jsonl", [])
    got = expand_log_args([str(tmp_path / "train.rank*.jsonl"), str(main)])
    assert [Path(p).name for p in got] == [
        "train.rank0.jsonl",
        "train.rank2.jsonl",
        "train.rank10.jsonl",
        "train.jsonl",
    ]
    assert expand_log_args(["-", "missing.jsonl"]) == ["-", "missing.jsonl"]  # reader reports it
    with pytest.raises(DiagError, match="no file matches"):
        expand_log_args([str(tmp_path / "nothing*.jsonl")])
    logs, ranks, note = split_rank_logs(got)
    assert logs == [str(main)]
    assert [r.rank for r in ranks] == [0, 2, 10]
    assert note is None
    logs, ranks, note = split_rank_logs(got[:3])
    assert logs == [got[0]]
    assert "rank 0's own view" in note


@pytest.fixture
def run_dir(tmp_path):
    """A global log plus two rank logs (rank 1 waits for rank 0, which sets the pace)."""
    main = tmp_path / "train.jsonl"
    main.write_bytes(generate(seed=1))
    steps = range(1, 401)
    write_log(tmp_path / "train.rank0.jsonl", rank_records(0, 2, steps, 1000, 0.5, 0.0))
    write_log(
        tmp_path / "train.rank1.jsonl",
        rank_records(1, 2, steps, 1000, 0.4, 0.1),
        torn='{"step": 401, "tok',
    )
    return tmp_path


def test_converge_reads_a_glob_of_rank_logs(run_dir):
    glob = str(run_dir / "train.rank*.jsonl")
    plain = runner.invoke(app, ["converge", str(run_dir / "train.jsonl"), "--format", "json"])
    with_ranks = runner.invoke(
        app, ["converge", str(run_dir / "train.jsonl"), glob, "--format", "json"]
    )
    assert plain.exit_code == 0, with_ranks.output
    assert with_ranks.exit_code == 0, with_ranks.output
    a, b = json.loads(plain.stdout), json.loads(with_ranks.stdout)
    assert set(a) == JSON_KEYS
    assert set(b) == JSON_KEYS | {"ranks"}
    # The rank logs feed the skew only: the analysis of the global log is unchanged.
    assert {k: v for k, v in b.items() if k != "ranks"} == a
    r = b["ranks"]
    assert (r["n"], r["slowest"], r["fastest"], r["first_step"], r["last_step"]) == (
        2,
        0,
        1,
        1,
        400,
    )
    assert r["skew"] == pytest.approx(2500 / 2000)
    assert r["per_rank"][1]["wait_fraction"] == pytest.approx(0.2)
    assert math.isclose(r["slowest_vs_median"], 2250 / 2000)
    text = runner.invoke(
        app, ["converge", str(run_dir / "train.jsonl"), glob, "-f", "text"], env={"COLUMNS": "200"}
    )
    assert "slowest rank 0 (2,000 tok/s) sets the pace · fastest/slowest 1.25x" in text.stdout
    md = runner.invoke(app, ["converge", str(run_dir / "train.jsonl"), glob, "-f", "markdown"])
    assert "**ranks**: 2 rank logs" in md.stdout


def test_compare_reports_the_skew_and_keeps_its_keys(run_dir):
    glob = str(run_dir / "train.rank*.jsonl")
    res = runner.invoke(app, ["compare", str(run_dir / "train.jsonl"), glob, "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"regimes", "boundaries", "notes", "ranks"} <= set(data)
    assert data["ranks"]["slowest"] == 0
    text = runner.invoke(app, ["compare", str(run_dir / "train.jsonl"), glob, "-f", "text"])
    assert "slowest rank 0" in text.stdout
    assert "rank 1: 2,500 tok/s" in text.stdout
    bad = runner.invoke(app, ["compare", str(run_dir / "nope*.jsonl")])
    assert bad.exit_code == 2
    assert "no file matches" in bad.output
