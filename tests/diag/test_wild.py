"""The real-log harness in the suite: a fast subset of the corpus (``fast = true`` entries of
tests/diag/wild_expectations.toml, and the first log of each kind) through converge and its
JSON, compare of the log with itself and its JSON, watch --once and its JSON, each checked
against its recorded expectation, and watch's and compare's answers against converge's.
``benchmarks/bench_wild.py`` runs every log."""

from __future__ import annotations

import pytest

from tests.diag.wild_harness import ROOT, load_expectations, problems, run_item, tomllib

WILD = ROOT / "shared" / "wild"
EXPECTATIONS = load_expectations()


def _fast_subset() -> list[str]:
    chosen, kinds = [], set()
    for path, expectation in sorted(EXPECTATIONS.items()):
        name = path.rsplit("/", 1)[-1]
        kind = (
            expectation.expect,
            name.rsplit(".", 1)[-1] if "." in name else "folder",
            "eval" if any(m.startswith("eval_") for m in expectation.metrics) else "",
        )
        if expectation.fast or kind not in kinds:
            chosen.append(path)
            kinds.add(kind)
    return chosen


pytestmark = [
    pytest.mark.skipif(not WILD.is_dir(), reason="the real-log corpus shared/wild is absent"),
    pytest.mark.skipif(tomllib is None, reason="the expectations are TOML (Python 3.11+)"),
]


def test_every_expectation_names_a_corpus_log():
    missing = [p for p in EXPECTATIONS if not (WILD / p).exists()]
    assert not missing


@pytest.mark.parametrize("item", _fast_subset())
def test_corpus_log_gets_its_recorded_outcome(item):
    result = run_item(WILD, item, timeout=120)
    assert problems(EXPECTATIONS[item], result) == []


def test_every_corpus_log_reads_its_recorded_metrics():
    """The readers alone (no analysis) on every recorded log: the metrics of a log that reads,
    the one clear error of one that does not."""
    from dflash_diag.errors import DiagError
    from tests.diag.wild_harness import metrics_read

    wrong = []
    for path, expectation in sorted(EXPECTATIONS.items()):
        try:
            metrics = metrics_read(WILD / path)
        except DiagError as exc:
            if expectation.expect == "read" or (expectation.error or "") not in str(exc):
                wrong.append(f"{path}: {exc}")
            continue
        if expectation.expect != "read" or set(metrics) != set(expectation.metrics):
            wrong.append(f"{path}: read {list(metrics)}, expected {expectation}")
    assert not wrong, "\n".join(wrong)
