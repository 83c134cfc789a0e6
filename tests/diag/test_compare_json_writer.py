"""compare's JSON writes the aligned windows itself: byte for byte the indenting encoder's text."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from dflash_diag.compare.align import AlignedWindow, RunAlignment
from dflash_diag.render.json import compare_json, dump_json, render_compare_json


def _window(rng: random.Random, i: int) -> AlignedWindow:
    def value() -> float | None:
        return rng.choice([None, math.nan, math.inf, -math.inf, rng.uniform(-5, 5), 1e-7, 3.0])

    return AlignedWindow(
        start=float(1 + 50 * i) if i % 3 else 1 + 50 * i,  # an int where a float is expected
        end=float(51 + 50 * i),
        n_a=rng.choice([0, 50, 12345]),
        n_b=rng.choice([0, 7]),
        loss_a=value(),
        loss_b=value(),
        loss_diff=value(),
        acc_a=value(),
        acc_b=value(),
        acc_diff=value(),
    )


def _alignment(n: int, seed: int = 0) -> RunAlignment:
    rng = random.Random(seed)
    return RunAlignment(
        x="step",
        width=50.0,
        names=("a «run».jsonl", "b"),
        windows=[_window(rng, i) for i in range(n)],
        tokens_source=(None, "n_tokens"),
    )


@pytest.mark.parametrize("n", [0, 1, 2, 300])
def test_windows_are_the_indenting_encoders_text(n):
    alignment = _alignment(n)
    assert render_compare_json([], alignment) == dump_json(compare_json([], alignment))


def test_no_alignment_is_the_plain_dump():
    assert render_compare_json([]) == dump_json(compare_json([]))


def test_a_window_holding_a_container_is_left_to_the_encoder():
    alignment = _alignment(5)
    odd = dataclasses.replace(alignment.windows[2], loss_a=[1.0, 2.0])  # type: ignore[arg-type]
    alignment = dataclasses.replace(alignment, windows=[*alignment.windows[:2], odd])
    assert render_compare_json([], alignment) == dump_json(compare_json([], alignment))
