"""The console reader's column-wise path gives the line by line path's long frame, row for row.

Real corpus console lines (``shared/wild``, ``shared/wild_heldout``) with their numbers varied
are written to a log and read both ways: blocks read column-wise (``COLUMN_MIN_BYTES = 0``, small
blocks so that shapes, state and wrapped records cross block boundaries) and every line read by
the parser. Generated lines cover what the corpus lacks: number forms at the edge of the exact
arithmetic, steps beyond 2^53, undecodable bytes, colour codes and rich records inside a block.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_diag.read.formats import canonical, console, console_columns

from .test_console_shapes import LINES, needs_corpus, varied_lines


def read_both(
    data: bytes, monkeypatch, chunk: int = 1 << 12, idle: int = 0, piece: int = 7
) -> tuple[pl.DataFrame, int]:
    """The log's frame, the same both ways; and how many lines the columns read (records or
    not)."""
    read = 0
    real = console_columns.long_piece

    def counting(base, shapes, *args):
        nonlocal read
        read += sum(columns.lines.size for columns in shapes)
        return real(base, shapes, *args)

    monkeypatch.setattr(console_columns, "long_piece", counting)
    monkeypatch.setattr(console, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(console, "_IDLE_BLOCKS", idle)
    # small pieces, so that the collector cuts the columns' frames where it cuts its own
    monkeypatch.setattr(canonical.RowCollector, "PIECE_VALUES", piece)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.log"
        path.write_bytes(data)
        monkeypatch.setattr(console, "COLUMN_MIN_BYTES", 0)
        columns = console.read_console(path)
        monkeypatch.setattr(console, "COLUMN_MIN_BYTES", 1 << 62)
        lines = console.read_console(path)
    assert columns.frame.schema == lines.frame.schema
    # repr: NaNs and -0.0 compare too
    assert repr(columns.frame.rows()) == repr(lines.frame.rows())
    assert columns.issues.lines == lines.issues.lines
    # the same chunks too: polars sums chunk by chunk (a mean's last bits)
    chunks = [[c.chunk_lengths() for c in f.frame.get_columns()] for f in (columns, lines)]
    assert chunks[0] == chunks[1]
    return columns.frame, read


@needs_corpus
@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    varied_lines(),
    st.integers(1, 4),
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.integers(200, 3000),
)
def test_columns_read_varied_corpus_lines_as_the_parser(monkeypatch, lines, repeat, end, chunk):
    # each line a few times in a row, so that its shape is learnt within a block
    text = end.join(line for line in lines for _ in range(repeat)) + end
    read_both(text.encode(), monkeypatch, chunk)


@needs_corpus
def test_corpus_lines_in_order_and_repeated_are_read_by_their_columns(monkeypatch):
    text = "\n".join(line for line in LINES for _ in range(3)) + "\n"
    frame, read = read_both(text.encode(), monkeypatch, 1 << 14)
    assert frame.height > 1000
    assert read > 0.3 * 3 * len(LINES)


#: Number texts at the edges of the exact reading (a mantissa of 2^53, 10^22), forms that
#: ``_NUMBER`` reads (``1.``, ``.5``, ``+3``, exponents) and values Python reads otherwise.
NUMBERS = [
    "0.0006", "2.0013", "-0.0", "+0.5", "1.", ".5", "-.25", "7", "007.100",
    "1e5", "1E-5", "2.5e+3", "3.e2", ".5e-3", "-1.5e22", "1e22", "1e23", "1e-22", "1e-23",
    "9007199254740992", "9007199254740993", "0.9007199254740993", "123456789012345678",
    "1234567890123456789012", "0.1234567890123456789", "1e99", "1e400", "0e400",
    "00000000000000000000000001.5", "nan", "inf", "-inf", "4.35", "0.3", "2.675",
]  # fmt: skip


def test_number_forms_read_as_python_reads_them(monkeypatch):
    lines = [f"step {i} loss={number} acc: {number}" for i, number in enumerate(NUMBERS)]
    lines += [f"[step {i}] avg_loss={n} acc={n}" for i, n in enumerate(NUMBERS * 3)]
    frame, read = read_both(("\n".join(lines) + "\n").encode(), monkeypatch)
    assert read > len(NUMBERS)
    assert frame.filter(pl.col("key") == "avg_loss").height == 3 * len(NUMBERS)


@st.composite
def number_texts(draw) -> str:
    digits = st.text("0123456789", min_size=0, max_size=22)
    whole, fraction = draw(digits), draw(digits)
    if not whole and not fraction:
        whole = "0"
    text = draw(st.sampled_from(["", "-", "+"])) + whole
    if fraction or draw(st.booleans()):
        text += "." + fraction
    if draw(st.booleans()):
        text += draw(st.sampled_from(["e", "E"])) + draw(st.sampled_from(["", "-", "+"]))
        text += draw(st.text("0123456789", min_size=1, max_size=3))
    return text


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(number_texts(), min_size=1, max_size=40))
def test_a_number_read_from_its_digit_runs_is_pythons_float_or_goes_to_the_parser(numbers):
    by_form: dict[str, list[str]] = {}
    for number in numbers:
        by_form.setdefault(console._DIGITS.sub("0", number), []).append(number)
    for numbers_of_form in by_form.values():
        lines = [f"step 1 loss={n}" for n in numbers_of_form]
        parts = console._DIGITS.split(lines[0])
        plan = console_columns.shape_plan(console._learn(lines[0], parts), parts)
        assert plan is not None, lines[0]
        at = np.arange(len(lines))
        rest, columns = console_columns.read_shape(plan, pl.Series(lines), at)
        assert rest.size == 0
        computed = dict(zip(columns.lines.tolist(), columns.values[:, 0].tolist(), strict=True))
        for i, number in enumerate(numbers_of_form):
            if i in computed:
                # the same double, bit for bit (repr tells -0.0 from 0.0)
                assert repr(computed[i]) == repr(float(number)), number
            else:
                assert i in columns.slow.tolist()


def test_steps_beyond_2_53_and_undecodable_bytes_go_the_line_way(monkeypatch):
    lines = [f"step {s} loss=0.5".encode() for s in (1, 2, 2**53 - 1, 2**53, 2**64, 10**30, 3)]
    lines += [b"step 4 loss=0.\xe2\x82", b"\xff step 5 loss=0.25", b"step 6 loss=0.125 \xc3\xa9"]
    lines += [b"step 7 loss=0.5\xc2\xa0", b"\xe3\x80\x80step 8 loss=0.5", b"step 9 loss=0.5"]
    read_both(b"\n".join(lines * 3) + b"\n", monkeypatch, 64)


def test_colour_codes_and_sources_in_a_block(monkeypatch):
    lines = ["step 1 loss=0.5", "step 2 loss=0.25"] * 4
    lines += ["\x1b[32mstep 3 loss=0.5\x1b[0m", "step 4 trainer.py:12 loss=0.5"] * 2
    lines += ["12: loss=0.5", "12: loss=0.5", "step 7 loss=0.5"] * 3
    read_both(("\n".join(lines) + "\n").encode(), monkeypatch, 1 << 12)


def test_a_rich_record_wrapped_onto_the_next_lines_is_one_logical_line(monkeypatch):
    # no colour code in the block: the record's head alone says its lines are joined
    head = ["[16:10:05] INFO     step 5 trainer", "           loss=0.75 acc=0.5"]
    lines = ["step 1 loss=0.5", "step 2 loss=0.25"] * 4 + head * 3 + ["step 6 loss=0.5"] * 3
    frame, _ = read_both(("\n".join(lines) + "\n").encode(), monkeypatch, 1 << 12)
    assert frame.filter(pl.col("key") == "acc").height == 3


def test_digits_in_keys_are_text_of_the_shape(monkeypatch):
    lines = [f"step {i} top1_acc: 0.{i}" for i in range(1, 6)]
    lines += [f"step {i} top5_acc: 0.{i}" for i in range(6, 9)]
    frame, read = read_both(("\n".join(lines) + "\n").encode(), monkeypatch)
    assert read >= 5
    assert frame.filter(pl.col("key") == "top5_acc").height == 3


def test_state_lines_between_column_lines_keep_their_order(monkeypatch):
    # epoch counters and bars move the parser's state; the plain step lines between them are
    # read by their columns, and the records stay in line order
    lines = []
    for epoch in range(1, 4):
        for step in range(1, 6):
            lines.append(f"Epoch {epoch} Step {step}/5 loss={step / 8}")
            lines.append(f"[step {step}] avg_loss=0.{step} acc=0.{epoch}")
            lines.append(f"{step * 20}%|##   | {step}/5 [00:0{step}<00:10, 1.2it/s]")
            lines.append(f"{{'loss': 0.{step}, 'epoch': {epoch}}}")
    frame, read = read_both(("\n".join(lines) + "\n").encode(), monkeypatch, 1 << 10)
    assert read >= 10
    assert frame["row"].is_sorted()


def test_blocks_read_line_by_line_after_a_block_of_state_lines(monkeypatch):
    # a block of epoch counters (read by the parser) makes the next blocks line by line; then
    # the step lines are read by their columns again, cut into the same pieces
    lines = [f"Epoch 1 Step {s}/400 loss={s / 8}" for s in range(1, 401)]
    lines += [f"[step {s}] avg_loss=0.{s} acc=0.5" for s in range(401, 1201)]
    frame, read = read_both(("\n".join(lines) + "\n").encode(), monkeypatch, 1 << 11, idle=3)
    assert 0 < read < 800
    assert frame.height == 400 + 2 * 800


def test_a_plan_that_misreads_its_first_line_is_not_kept(monkeypatch):
    real = console_columns.number_plan

    def off_by_ten(span, parts):
        plan = real(span, parts)
        if plan is None or plan.fraction is None:
            return plan
        return console_columns.NumberPlan(integer=plan.fraction)  # the decimals alone

    monkeypatch.setattr(console_columns, "number_plan", off_by_ten)
    assert console._column_plan(["step 3 loss=0.5"]) is None
    _, read = read_both(b"step 3 loss=0.5\nstep 4 loss=0.25\n" * 3, monkeypatch)
    assert read == 0


@pytest.mark.parametrize(
    "line",
    [
        "step 1 loss=0.5",
        "[step 7] avg_loss=-0.0006 acc=0.9533",
        "Train Loss: 1.6, Test Acc: 59.9, step 4",
        "step 2 top1_acc: 0.5 top5_acc: 0.7",
        "Epoch 3/35, Train Loss: 1.63",
    ],
)
def test_lines_without_state_are_planned(line):
    assert console._column_plan([line]) is not None


@pytest.mark.parametrize(
    "line",
    [
        "Epoch 1 Step 10/30 loss=0.5",  # the epoch offset is state
        " 50%|#####     | 5/10 [00:05<00:05, 1.0it/s] loss=0.5",  # the bar's count is state
        "{'loss': 0.5, 'epoch': 1}",  # a dict literal: the lines' count is state
        "step 1: {'loss': 0.5}",  # a dict literal's reading depends on its digits
    ],
)
def test_lines_with_state_are_not_planned(line):
    assert console._column_plan([line]) is None
