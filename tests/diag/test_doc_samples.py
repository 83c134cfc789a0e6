"""The output samples in README.md and docs/ are what the commands print today."""

from __future__ import annotations

import pytest

from tests import doc_samples

SAMPLES = doc_samples.all_samples()


def test_every_sampled_page_has_its_samples():
    # a marker lost in an edit would silently stop checking its block
    pages = {s.path.relative_to(doc_samples.ROOT).as_posix() for s in SAMPLES}
    assert {"README.md", "docs/diagnostics.md", "docs/compare_watch.md"} <= pages
    assert len(SAMPLES) >= 4


@pytest.mark.parametrize(
    "sample", SAMPLES, ids=[f"{s.path.name}:{s.command.split()[2]}" for s in SAMPLES]
)
def test_sample_matches_the_command(sample):
    want = doc_samples.comparable(doc_samples.expected(sample))
    got = doc_samples.comparable(sample.body)
    assert got == want, (
        f"{sample.path.name}: the sample of `{sample.command}` is stale; "
        "regenerate with `python -m tests.doc_samples --write`"
    )


def test_a_stale_sample_is_found_and_rewritten(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "intro\n\n<!-- sample: COLUMNS=100 dflash-diag converge sample_logs/train.jsonl"
        ' · from "accuracy " to "target " -->\n```text\naccuracy     acc 0.9999\n```\nafter\n',
        encoding="utf-8",
    )
    (sample,) = doc_samples.samples(page)
    new = doc_samples.expected(sample)
    assert doc_samples.comparable(new) != doc_samples.comparable(sample.body)
    assert new.startswith("accuracy ")
    assert new.splitlines()[-1].startswith("target ")
    doc_samples.write([(sample, new)])
    (again,) = doc_samples.samples(page)
    assert again.body == new
    assert page.read_text(encoding="utf-8").endswith("```\nafter\n")


def test_ages_are_compared_as_ages():
    a = "step 410  ·  last record 11 h 50 min ago\n! no new record for 11 h 50 min (--stall 300 s)"
    b = "step 410  ·  last record 1 d 2 h ago\n! no new record for 1 d 2 h (--stall 300 s)"
    assert doc_samples.comparable(a) == doc_samples.comparable(b)
    assert doc_samples.comparable("loss 1.5478") != doc_samples.comparable("loss 1.5479")
