"""The console reader's shape cache gives the general parse's records and state, line for line.

Real corpus console lines (``shared/wild``, ``shared/wild_heldout``) with their numbers varied
are fed through the plain parser and the cached one; edge cases the corpus lacks (two equal
values deciding a parse, digits in a key, a full cache) are generated lines.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_diag.read.formats import console

ROOT = Path(__file__).resolve().parents[2]
INDEXES = [ROOT / "shared" / "wild" / "index.csv", ROOT / "shared" / "wild_heldout" / "index.csv"]


def _corpus_lines() -> list[str]:
    lines: list[str] = []
    for index in INDEXES:
        if not index.is_file():
            continue
        with index.open(newline="") as handle:
            rows = [
                row for row in csv.DictReader(handle) if row["format"] in ("console", "wandb_text")
            ]
        for row in rows:
            path = index.parent / row["path"]
            if path.is_dir():
                path = console.find_console_file(path) or path
            if not path.is_file():
                continue
            texts = re.split(rb"[\r\n]", path.read_bytes())
            lines += console.logical_lines(t.decode("utf-8", "replace") for t in texts)
    # each distinct line once, in a fixed order: the mixes are drawn from these
    return sorted({line for line in lines if line.strip()})


LINES = _corpus_lines()
DIGIT_RUN = re.compile(r"[0-9]+")
needs_corpus = pytest.mark.skipif(len(LINES) < 100, reason="the real-log corpus is absent")


def state(parser: console._Parser) -> tuple:
    return (
        sorted(parser.bar.items()),
        parser.n_dicts,
        parser.epoch,
        parser.offset,
        parser.last_local,
        parser.epoch_max,
        parser.epoch_total,
    )


def assert_same_parse(lines: list[str]) -> console._ShapeParser:
    plain, cached = console._Parser(), console._ShapeParser()
    for line in lines:
        # repr: the keys' order and a nan compare too
        assert repr(cached.parse(line)) == repr(plain.parse(line)), line
        assert state(cached) == state(plain), line
    return cached


#: Digit runs drawn from few digits, so that values at two places are often equal (a case the
#: parse decides by value) and counters go back (a new epoch's counter).
_digits = st.text(alphabet="0159", min_size=1, max_size=4)


@st.composite
def varied_lines(draw) -> list[str]:
    picks = draw(st.lists(st.sampled_from(LINES), min_size=1, max_size=60))
    out = []
    for line in picks:
        if draw(st.booleans()):
            out.append(line)  # as the corpus has it
            continue
        texts = DIGIT_RUN.split(line)
        runs = draw(st.lists(_digits, min_size=len(texts) - 1, max_size=len(texts) - 1))
        out.append("".join(t + d for t, d in zip(texts, [*runs, ""], strict=True)))
    return out


@needs_corpus
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(varied_lines())
def test_cached_parse_is_the_plain_parse_on_varied_corpus_lines(lines):
    assert_same_parse(lines)


@needs_corpus
def test_corpus_lines_in_order_parse_the_same_and_most_shapes_are_learnt():
    cached = assert_same_parse(LINES)
    learnt = sum(shape is not None for shape in cached.shapes.values())
    assert learnt > 0.9 * len(cached.shapes)


def test_equal_values_decide_as_in_the_plain_parse():
    # "loss: x ... train loss y": the plain loss is dropped only where x == y
    lines = [
        f"step {i} loss: {a} train loss {b}"
        for i, (a, b) in enumerate(
            [("1.5", "1.5"), ("1.5", "2.5"), ("2.5", "2.5"), ("0.1", "0.10"), ("3", "4")]
        )
    ]
    assert_same_parse(lines)
    assert_same_parse(lines[::-1])


def test_digits_in_keys_are_not_values():
    lines = ["step 1 top1_acc: 0.5 top5_acc: 0.7", "step 2 top1_acc: 0.5 top1_acc: 0.7"]
    lines += ["step 3 top5_acc: 0.5 top5_acc: 0.7", "step 4 top1_acc: 0.5 top5_acc: 0.7"]
    assert_same_parse(lines)


def test_epoch_counters_restarting_move_the_offset_alike():
    lines = [f"Epoch {e} Step {s}/30 loss={s / 10}" for e in (1, 2, 3) for s in (10, 20, 30)]
    lines += [f"Epoch {e} Step {s} loss={s / 10}" for e in (4, 5) for s in (5, 15)]
    cached = assert_same_parse(lines)
    assert cached.offset > 0
    # read by their shapes, not the general way
    assert all(shape is not None for shape in cached.shapes.values())


def test_bars_and_bare_dicts_share_the_state():
    lines = []
    for n in range(1, 6):
        lines.append(f"{n * 20}%|##   | {n}/5 [00:0{n}<00:10, 1.2it/s]")
        lines.append(f"{{'loss': {n / 7}, 'learning_rate': 1e-0{n}, 'epoch': 0.{n}}}")
    lines.append("{'loss': 01, 'epoch': 1}")  # no literal: the general way says no
    cached = assert_same_parse(lines)
    learnt = {key[0][:2]: shape is not None for key, shape in cached.shapes.items()}
    # the bar's lines by their shape; a dict literal's reading depends on its digits
    assert learnt == {"": True, "{'": False}


def test_a_wrong_shape_is_caught_on_its_first_line(monkeypatch):
    def wrong(line, parts):
        shape = console._Shape()
        shape.local = 1
        shape.pairs = [("loss", 5)]  # the decimals alone: 5.0, not 0.5
        return shape.finish()

    monkeypatch.setattr(console, "_learn", wrong)
    cached = assert_same_parse(["step 3 loss=0.5", "step 4 loss=0.25"])
    assert list(cached.shapes.values()) == [None]


def test_full_cache_parses_new_shapes_the_general_way(monkeypatch):
    monkeypatch.setattr(console, "MAX_SHAPES", 2)
    lines = [f"step {i} {name}={i / 3}" for i in range(4) for name in ("a", "b", "c", "loss")]
    cached = assert_same_parse(lines)
    assert len(cached.shapes) == 2


def test_a_span_within_a_digit_run_is_not_learnt():
    line = "step 12: loss=0.5"
    parts = console._DIGITS.split(line)
    assert console._learn(line, parts) is not None
    # a made-up split whose run holds the step and the colon's neighbour: no span fits it
    assert console._learn(line, ["step ", "12: loss=0", ".", "5", ""]) is None
