"""Property: random mutations of a log's bytes never crash the reader (or the analysis)."""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflash_diag import ConvergeConfig, DiagError, build_converge_report, parse_records
from dflash_diag.read.jsonl import ParsedLog

from .make_sample_log import generate

# A small but complete log: legacy records, a header, pipeline records with lists and a NaN,
# evals, a restart and a torn tail.
BASE = b"\n".join(generate(seed=3, pipeline_steps=60).split(b"\n")[-80:])

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, len(BASE) - 1), st.integers(0, 255)),
    st.tuples(st.just("insert"), st.integers(0, len(BASE)), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("delete"), st.integers(0, len(BASE) - 1), st.integers(1, 40)),
    st.tuples(
        st.just("insert"),
        st.integers(0, len(BASE)),
        st.sampled_from(
            [
                b"NaN",
                b"Infinity",
                b"-Infinity",
                b'"',
                b"\n",
                b"{",
                b"}",
                b"[",
                b",",
                b"\xff",
                b"\x00",
                b'"step":',
                b"1e999",
                b"true",
            ]
        ),
    ),
)


def mutate(data: bytes, edits) -> bytes:
    buffer = bytearray(data)
    for kind, position, value in edits:
        position = min(position, len(buffer))
        if kind == "flip" and position < len(buffer):
            buffer[position] = value
        elif kind == "insert":
            buffer[position:position] = value
        elif kind == "delete":
            del buffer[position : position + value]
    return bytes(buffer)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutation, min_size=1, max_size=6))
def test_mutated_logs_never_crash(edits):
    data = mutate(BASE, edits)
    log = parse_records(data)
    assert isinstance(log, ParsedLog)
    assert log.consumed_bytes <= len(data)
    assert log.issues.malformed + log.metrics.height <= log.issues.lines + 1
    # e.g. nothing left to select: a clean user error, not a crash
    with contextlib.suppress(DiagError):
        build_converge_report(log, ConvergeConfig(window=10))
