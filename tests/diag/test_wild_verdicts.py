"""The verdicts a person judged correct on real public logs (tests/diag/wild_verdicts.toml) hold.

Each entry was read against its data once (issue 18); the harness keeps the judgement. The default
suite checks the entries marked ``fast`` (every verdict that changed with issue 18 and a few of
each status), in-process; ``-m slow`` checks them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli, the same parser
    import tomli as tomllib

from dflash_diag.converge.report import build_converge_report
from dflash_diag.read.jsonl import load_log

ROOT = Path(__file__).resolve().parents[2]
WILD = ROOT / "shared" / "wild"
EXPECTED = tomllib.loads((Path(__file__).with_name("wild_verdicts.toml")).read_text())["log"]


def _verdict(path: Path):
    return build_converge_report(load_log([str(path)], lists=False)).verdict


def _params(entries):
    return [pytest.param(e, id=e["path"]) for e in entries]


def _check(entry):
    path = WILD / entry["path"]
    if not WILD.is_dir():
        pytest.skip("the real-log corpus (shared/wild/) is not in this checkout")
    assert path.exists(), f"{entry['path']} is listed in wild_verdicts.toml but not in shared/wild/"
    verdict = _verdict(path)
    assert verdict.status == entry["status"], (
        f"{entry['path']}: {verdict.status} ({verdict.reason}); judged {entry['status']}: {entry['why']}"
    )


def test_the_expectations_are_well_formed():
    statuses = {"converging", "plateau", "diverging", "overfitting", "broken", "not enough data"}
    paths = [e["path"] for e in EXPECTED]
    assert len(paths) == len(set(paths))
    for entry in EXPECTED:
        assert entry["status"] in statuses, entry
        assert entry["why"], entry
    # every status issue 18 introduced is exercised on real data
    assert {"overfitting", "broken"} <= {e["status"] for e in EXPECTED}


@pytest.mark.parametrize("entry", _params([e for e in EXPECTED if e.get("fast")]))
def test_judged_verdict_holds(entry):
    _check(entry)


@pytest.mark.slow
@pytest.mark.parametrize("entry", _params([e for e in EXPECTED if not e.get("fast")]))
def test_judged_verdict_holds_on_every_log(entry):
    _check(entry)
