"""The plain compare tables: a long table's rows drawn from a probe are rich's own drawing."""

from __future__ import annotations

import random

import pytest
from rich.console import Console

from dflash_diag.render.rich import (
    PROBE_ROWS,
    _drawn,
    _plain_table,
    _rich_table,
    _TableSpec,
    plain_console,
)

HEAD = ["steps", "n A", "n B", "loss A", "loss B", "Δloss", "acc A", "acc B", "Δacc"]


def _console(width: int) -> Console:
    return plain_console(width)


def _rows(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        start = 1 + 50 * i
        rows.append(
            [
                f"{start}-{start + 49}",
                str(rng.choice([1, 50, 500])),
                str(rng.choice([7, 50, 12345])),
                f"{rng.uniform(0, 30):.4f}",
                rng.choice(["—", f"{rng.uniform(0, 3):.4f}"]),
                f"{rng.uniform(-1, 1):+.4f}",
                f"{rng.random():.4f}",
                f"{rng.random():.4f}",
                f"{rng.uniform(-1, 1):+.6f}",
            ]
        )
    return rows


def _rich(spec: _TableSpec, width: int) -> list[str]:
    return _drawn(_console(width), _rich_table(spec))


@pytest.mark.parametrize("width", [200, 80, 60, 40])
@pytest.mark.parametrize("n", [PROBE_ROWS + 1, 500])
def test_long_table_is_drawn_as_rich_draws_it(width, n):
    spec = _TableSpec("two runs, windows of 50 steps", HEAD, _rows(n), "alignment", width)
    assert _plain_table(_console(width), spec) == _rich(spec, width)


def test_widest_cells_anywhere_and_wide_characters():
    rows = _rows(300, seed=1)
    rows[150][0] = "1000001-2000000"  # the widest label, in the middle
    rows[299][4] = "12345.6789"
    rows[7][3] = "界界界"  # two cells wide each
    spec = _TableSpec("t", HEAD, rows, "alignment", 120)
    assert _plain_table(_console(120), spec) == _rich(spec, 120)


def test_a_first_column_wider_than_the_terminal_is_left_to_rich():
    # rich folds the label: the probe's drawing is not one line per row, so rich draws it all
    rows = _rows(200, seed=2)
    rows[3][0] = "x" * 50
    spec = _TableSpec("t", HEAD[:2], [r[:2] for r in rows], "alignment", 30)
    lines = _plain_table(_console(30), spec)
    assert lines == _rich(spec, 30)
    assert any(line.strip() == "x" * 19 or line.startswith("  xxxx") for line in lines)


@pytest.mark.parametrize("cell", ["a\tb", "two\nlines", " padded", "end "])
def test_cells_rich_would_reshape_are_left_to_rich(cell):
    rows = _rows(200, seed=3)
    rows[100][0] = cell
    spec = _TableSpec("t", HEAD, rows, "alignment", 100)
    assert _plain_table(_console(100), spec) == _rich(spec, 100)
