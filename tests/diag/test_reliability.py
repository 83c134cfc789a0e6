"""No traceback on any input, bounded memory (issue 13, items 1-6): one test per class of fault,
through the real commands (CliRunner) and the real reader."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import tracemalloc

import pytest
from typer.testing import CliRunner

from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.cli import app
from dflash_diag.read import files
from dflash_diag.read.files import OVERLONG_LINE, LineStats, line_chunks
from dflash_diag.read.jsonl import load_log, parse_records
from dflash_diag.watch import LiveLog, WatchConfig, build_view

runner = CliRunner()

BIG = "1" + "0" * 400  # an integer far beyond the float range (1e400)


def run(*args):
    """Run the CLI; the result, after checking it ended by an exit code, not an exception."""
    result = runner.invoke(app, [*map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert result.exit_code in (0, 1, 2), result.output
    return result


def every_command(path):
    """One result per command on one log."""
    return [
        run("converge", path, "-f", "json"),
        run("converge", path, "-f", "text"),
        run("compare", path, "-f", "json"),
        run("watch", path, "--once"),
    ]


def clean_records(n=40):
    return "".join(
        json.dumps({"step": s, "loss": 3 - s / 100, "acc": s / 200, "lr": 1e-3, "time": float(s)})
        + "\n"
        for s in range(1, n + 1)
    )


def one_line_error(result):
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    return lines[0]


# -- 1. deep nesting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "[" * 1000,  # the issue's example
        "[" * 100_000,
        '{"step": 5, "loss": 1, "extra": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"event": "run_start", "config": ' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
        '{"event": "eval", "step": 3, "tau": 2, "x": ' + "[" * 990 + "]" * 990 + "}",
        '{"step": 1, "loss": NaN, "x": ' + "[" * 990 + "]" * 990 + "}",  # the NaN rewrite path
    ],
)
def test_deep_nesting_is_a_malformed_line_never_a_recursion_error(tmp_path, line):
    path = tmp_path / "deep.jsonl"
    path.write_text(clean_records() + line + "\n" + clean_records(5))
    for result in every_command(path):
        assert result.exit_code == 0, result.output
    assert json.loads(run("converge", path, "-f", "json").stdout)["skipped_lines"] <= 1


def test_deep_nesting_in_a_rank_log_and_its_header(tmp_path):
    rank = tmp_path / "train.rank1.jsonl"
    rank.write_text("[" * 5000 + "\n" + clean_records())
    header = tmp_path / "other.jsonl"
    header.write_text('{"event": "run_start", "rank": ' + "[" * 5000 + "\n" + clean_records())
    result = run("converge", header, rank, "-f", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["ranks"]["n"] == 1


# -- 2. integers beyond the float range ----------------------------------------------------------


@pytest.mark.parametrize(
    ("record", "expect"),
    [
        ('{"step": 41, "loss": BIG, "acc": 0.3}', "nonfinite"),
        ('{"step": 41, "loss": 1, "acc_pos": [BIG, 0.5], "accept_pos": [-BIG]}', "nonfinite"),
        ('{"step": BIG, "loss": 1, "acc": 0.3}', "bad_step"),
        ('{"step": -BIG, "loss": 1, "acc": 0.3}', "bad_step"),
        ('{"event": "eval", "step": 30, "tau": BIG}', "ignored"),
        ('{"event": "eval", "step": BIG, "tau": 2.5}', "ignored"),
        (
            (
                '{"event": "run_start", "block_size": BIG, "steps_per_epoch": BIG, "schedule": {"kind": '
                '"cosine", "peak_lr": BIG, "warmup_steps": BIG, "total_steps": -BIG}}'
            ),
            "ignored",
        ),
    ],
)
def test_huge_integers_are_counted_never_an_overflow_error(tmp_path, record, expect):
    path = tmp_path / "huge.jsonl"
    path.write_text(record.replace("BIG", BIG) + "\n" + clean_records())
    for result in every_command(path):
        assert result.exit_code == 0, result.output
    log = load_log(path, lists=True)  # the lists too: their values are counted
    if expect == "nonfinite":
        assert log.issues.nonfinite_total >= 1
    elif expect == "bad_step":
        assert log.issues.bad_step == 1
        assert log.issues.bad_step_lines == [(0, 1)]
        assert "out of range" in run("converge", path, "-f", "text").stdout


def test_steps_at_2_pow_63_are_counted_and_noted_not_wrapped(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text(
        clean_records()
        + "".join(
            json.dumps({"step": s, "loss": 1, "acc": 0.9}) + "\n"
            for s in (2**63, -(2**63) - 1, 2**63 - 1, 2**53, float("nan"))
        )
    )
    report = json.loads(run("converge", path, "-f", "json").stdout)
    assert all(0 < w["start"] <= 40 for w in report["windows"])  # no wrapped-around window
    assert load_log(path).issues.bad_step == 5
    text = run("converge", path, "-f", "text").stdout
    assert "5 record(s) with a step out of range" in text
    compare = run("compare", path, "-f", "text").stdout
    assert "step out of range" in compare
    only_bad = tmp_path / "only_bad.jsonl"
    only_bad.write_text(json.dumps({"step": 2**64, "loss": 1}) + "\n")
    assert "out of range" in one_line_error(run("converge", only_bad))


# -- 3. damaged and endless compressed input -----------------------------------------------------


def test_damaged_gzip_is_one_line_exit_2(tmp_path):
    data = gzip.compress(clean_records(3000).encode())
    cases = {
        "truncated_first_line.gz": gzip.compress(b'{"step": 1, "loss": 2.0}\n' * 10)[:15],
        "truncated_later.gz": data[: len(data) // 2],
        "corrupt_deflate.gz": data[:200] + bytes(b ^ 0xA5 for b in data[200:300]) + data[300:],
        "bad_method.gz": b"\x1f\x8b\x09" + bytes(40),
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        for command in (["converge", path], ["compare", path]):
            line = one_line_error(run(*command))
            assert "compressed data" in line, (name, line)
            assert name in line, (name, line)
    stdin = runner.invoke(app, ["converge", "-"], input=cases["corrupt_deflate.gz"])
    assert (
        stdin.exit_code == 2 and "standard input" in stdin.stderr
    ) or "compressed" in stdin.stderr


def _zeros_bomb(path, members, member_bytes=2**20):
    """A gzip of ``members * member_bytes`` zero bytes: one endless line, tiny on disk."""
    member = gzip.compress(bytes(member_bytes), 9)
    with open(path, "wb") as out:
        out.write(gzip.compress(clean_records(30).encode()))
        out.writelines(member for _ in range(members))
        out.write(gzip.compress(b"\n" + "".join(clean_records(60).splitlines(True)[30:]).encode()))


def test_overlong_line_is_skipped_while_streaming_in_bounded_memory():
    """64 MiB of zeros with no newline, read in 1 MiB chunks with a 1 MiB line limit: Python's
    peak allocation stays a few chunks (the unbounded reader held the whole line)."""
    member = gzip.compress(bytes(2**20), 9)
    data = gzip.compress(b'{"step": 1}\n') + member * 64 + gzip.compress(b'\n{"step": 2}\n')
    handle = gzip.GzipFile(fileobj=io.BytesIO(data))
    stats = LineStats()
    tracemalloc.start()
    try:
        texts = [text for text, _ in line_chunks(handle, 2**20, max_line_bytes=2**20, stats=stats)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20, peak
    assert b"".join(texts) == b'{"step": 1}\n' + OVERLONG_LINE + b'\n{"step": 2}\n'
    assert stats.overlong == 1
    assert stats.consumed == 12 + 64 * 2**20 + 13


def test_a_small_gzip_bomb_is_one_malformed_line(tmp_path):
    """24 MiB of zeros (24 KiB on disk), past the 16 MiB line limit: one malformed line, the
    records around it read, line numbers right."""
    path = tmp_path / "bomb.jsonl.gz"
    _zeros_bomb(path, members=24)
    log = load_log(path)
    assert log.issues.malformed == 1
    assert log.issues.malformed_lines == [(0, 31)]
    assert log.metrics["step"].to_list()[:3] == [1, 2, 3]
    strict = run("converge", path, "--strict")
    assert "longer than the reader's line limit" in one_line_error(strict)


def test_an_overlong_line_in_a_plain_file_keeps_line_numbers_and_lists(tmp_path):
    """The pread fast path hands a long line to the streaming reader; the chunk offsets stay the
    file's, so the per-position lists of the last window are still found."""
    path = tmp_path / "long.jsonl"
    records = [
        json.dumps({"step": s, "loss": 2.0, "acc": 0.2, "acc_pos": [0.5, 0.25]})
        for s in range(1, 201)
    ]
    records.insert(100, "x" * (3 * 2**20))
    path.write_text("\n".join(records) + "\n")
    log = load_log(path, lists=False)
    assert log.issues.malformed_lines == [(0, 101)]
    from dflash_diag.read.jsonl import fetch_lists

    rows = fetch_lists(log, log.metrics.tail(3))
    assert rows["acc_pos"].to_list() == [[0.5, 0.25]] * 3


# -- 4. control characters on stderr -------------------------------------------------------------


def test_error_messages_escape_control_characters(tmp_path):
    evil = "x\x1b]0;PWNED\x07\x9b31m.jsonl"
    cases = [
        ["converge", str(tmp_path / evil)],
        ["compare", str(tmp_path / evil)],
        ["watch", str(tmp_path / evil), "--once"],
        ["converge", str(tmp_path / ("*" + evil))],  # a glob matching nothing
    ]
    (tmp_path / "empty\x1b[2J.jsonl").write_text("")
    cases.append(["converge", str(tmp_path / "empty\x1b[2J.jsonl")])
    # two logs claiming one rank: the message quotes both paths as given
    header = '{"event": "run_start", "rank": 0}\n' + clean_records()
    (tmp_path / "r\x1b]0;A\x07.jsonl").write_text(header)
    (tmp_path / "other.jsonl").write_text(header)
    cases.append(["converge", str(tmp_path / "r\x1b]0;A\x07.jsonl"), str(tmp_path / "other.jsonl")])
    for args in cases:
        result = run(*args)
        assert result.exit_code == 2
        for stream in (result.stdout, result.stderr):
            assert "\x1b" not in stream, args
            assert "\x07" not in stream, args
            assert "\x9b" not in stream, args
        assert "\\x1b" in result.stderr, args


# -- 5. option and field-map values ---------------------------------------------------------------

BAD_OPTIONS = [
    ["converge", "-w", "99999999999999999999"],
    ["converge", "--from-step", str(-(10**23))],
    ["converge", "--to-step", str(10**23)],
    ["converge", "--rows", str(10**30)],
    ["converge", "--block-size", str(10**30)],
    ["converge", "--threshold", "nan"],
    ["converge", "--threshold", "inf"],
    ["converge", "--loss-threshold", "inf"],
    ["converge", "--target-tau", "nan"],
    ["compare", "-w", "99999999999999999999"],
    ["compare", "--k", "99999999999999999999"],
    ["watch", "--threshold", "nan", "--once"],
    ["watch", "-w", "99999999999999999999", "--once"],
    ["watch", "--history", str(10**25), "--once"],
    ["watch", "--stall", "inf", "--once"],
]
BAD_FIELDS = [
    ["--field", "acc=step"],
    ["--field", "step=_line"],
    ["--field", "acc=lr", "--field", "loss=lr"],
    ["--field", "step=event"],
    ["--field", "acc=loss"],
]


@pytest.mark.parametrize("args", BAD_OPTIONS)
def test_out_of_range_options_are_one_line_usage_errors(tmp_path, args):
    path = tmp_path / "ok.jsonl"
    path.write_text(clean_records())
    result = run(args[0], path, *args[1:])
    if "Usage:" in result.stderr:
        # typer's own range check (min=...) caught it first: its error box is made one line by
        # the shared CLI error handling, not here
        assert result.exit_code == 2
        assert args[1] in result.stderr
        return
    assert args[1] in one_line_error(result)


@pytest.mark.parametrize("command", [["converge"], ["compare"], ["watch", "--once"]])
@pytest.mark.parametrize("fields", BAD_FIELDS)
def test_field_maps_that_lose_or_clash_are_one_line_usage_errors(tmp_path, command, fields):
    path = tmp_path / "ok.jsonl"
    path.write_text(clean_records())
    line = one_line_error(run(command[0], path, *command[1:], *fields))
    assert "--field" in line


def test_a_field_swap_is_allowed(tmp_path):
    path = tmp_path / "swapped.jsonl"
    path.write_text(
        clean_records()
        .replace('"loss"', '"tmp"')
        .replace('"acc"', '"loss"')
        .replace('"tmp"', '"acc"')
    )
    report = json.loads(
        run("converge", path, "--field", "acc=loss", "--field", "loss=acc", "-f", "json").stdout
    )
    # 40 steps: 10 windows of 4 (the auto rule's for a short log)
    assert report["windows"][0]["acc"] == pytest.approx(sum(s / 200 for s in range(1, 5)) / 4)


# -- 6. encodings, deleted logs, pipes, links ----------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_a_utf16_log_is_named_as_such(tmp_path, encoding):
    path = tmp_path / "u16.jsonl"
    path.write_bytes(clean_records().encode(encoding))
    for args in (["converge", path], ["compare", path], ["watch", path, "--once"]):
        assert "UTF-16" in one_line_error(run(*args))
    gz = tmp_path / "u16.jsonl.gz"
    gz.write_bytes(gzip.compress(clean_records().encode(encoding)))
    assert "UTF-16" in one_line_error(run("converge", gz))


def test_watch_flags_a_deleted_log(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(clean_records())
    live = LiveLog(path, WatchConfig(analysis=DiagnosisConfig(window=10)), clock=lambda: 100.0)
    live.refresh()
    assert not [a for a in build_view(live).alerts if a.kind == "missing"]
    os.remove(path)
    live.refresh()
    view = build_view(live)
    assert [a.kind for a in view.alerts if a.kind == "missing"] == ["missing"]
    assert view.total_records == 40  # what was read is still shown
    path.write_text(clean_records(3))
    live.refresh()
    assert not [a for a in build_view(live).alerts if a.kind == "missing"]


def test_a_fifo_without_writer_does_not_block(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "FIFO_WAIT_SECONDS", 0.2)
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    assert "named pipe" in one_line_error(run("converge", fifo))
    assert "named pipe" in one_line_error(run("compare", fifo))
    assert "not a regular file" in one_line_error(run("watch", fifo, "--once"))


def test_a_fifo_with_a_writer_is_read_once_lists_included(tmp_path):
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    records = "".join(
        json.dumps({"step": s, "loss": 2.0, "acc": 0.2, "acc_pos": [0.5, 0.5]}) + "\n"
        for s in range(1, 61)
    )
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer open without blocking
    writer = os.open(fifo, os.O_WRONLY)
    os.write(writer, records.encode())
    os.close(writer)
    try:
        report = json.loads(run("converge", fifo, "-f", "json").stdout)
    finally:
        os.close(reader)
    assert report["acceptance"]["estimator"] == "chain"


def test_symlink_loop_and_broken_link_have_their_own_messages(tmp_path):
    loop = tmp_path / "loop.jsonl"
    os.symlink(loop, loop)
    broken = tmp_path / "broken.jsonl"
    os.symlink(tmp_path / "nowhere", broken)
    for command in (["converge"], ["compare"], ["watch"]):
        assert "symlink loop" in one_line_error(run(command[0], loop, *command[1:]))
        assert "broken symlink" in one_line_error(run(command[0], broken, *command[1:]))


def test_parse_records_survives_every_fault_class_in_one_buffer():
    data = (
        (
            "[" * 2000
            + "\n"
            + '{"step": BIG, "loss": 1}\n'
            + '{"step": 1, "loss": BIG}\n'
            + "\x00" * 100
            + "\n"
            + '{"step": 2, "loss": 1.5}\n'
        )
        .replace("BIG", BIG)
        .encode()
    )
    log = parse_records(data)
    assert log.metrics["step"].to_list() == [1, 2]
    assert log.issues.malformed == 2
    assert log.issues.bad_step == 1
    assert log.issues.nonfinite == {"loss": 1}


# -- the line limit itself, against a reference ----------------------------------------------------


def _reference(data: bytes, limit: int) -> bytes:
    """What line_chunks must hand out: every line over ``limit`` bytes (newline excluded) replaced
    by the marker; a torn last line kept as it is unless it is over the limit."""
    pieces = data.split(b"\n")
    out = [OVERLONG_LINE if len(p) > limit else p for p in pieces[:-1]]
    tail = pieces[-1]
    text = b"".join(p + b"\n" for p in out)
    if tail:
        text += OVERLONG_LINE + b"\n" if len(tail) > limit else tail
    return text


@pytest.mark.parametrize("seed", range(12))
def test_line_chunks_match_the_reference_on_files_and_streams(tmp_path, seed):
    import random

    rng = random.Random(seed)
    chunk = rng.choice([8, 64, 256])
    limit = rng.choice([chunk, chunk * 2, chunk * 5])
    lines = [
        b"y"
        * rng.choice(
            [
                0,
                1,
                5,
                chunk - 1,
                chunk,
                chunk + 1,
                limit,
                limit + 1,
                3 * limit,
                rng.randrange(1, 4 * limit),
            ]
        )
        for _ in range(40)
    ]
    data = b"\n".join(lines) + rng.choice([b"", b"\n", b"tail", b"z" * (limit + 3)])
    path = tmp_path / "lines.bin"
    path.write_bytes(data)
    expected = _reference(data, max(limit, chunk))
    with open(path, "rb") as handle:  # the pread fast path
        stats = LineStats()
        assert (
            b"".join(t for t, _ in line_chunks(handle, chunk, max_line_bytes=limit, stats=stats))
            == expected
        )
        assert stats.consumed == len(data)
    stats = LineStats()
    stream = io.BytesIO(data)  # the streaming path
    assert (
        b"".join(t for t, _ in line_chunks(stream, chunk, max_line_bytes=limit, stats=stats))
        == expected
    )
    assert stats.consumed == len(data)
    assert stats.overlong == expected.count(OVERLONG_LINE)


@pytest.mark.parametrize(
    ("kind", "compress", "tool"),
    [
        ("bz2", bz2.compress, "bunzip2"),
        ("xz", lzma.compress, "unxz"),
        ("zip", lambda b: b"PK\x03\x04" + b"\x00" * 26 + b, "unzip"),
    ],
)
def test_other_compressions_are_named_not_guessed(tmp_path, kind, compress, tool):
    path = tmp_path / f"train.jsonl.{kind}"
    path.write_bytes(compress(clean_records().encode()))
    for result in every_command(path):
        line = one_line_error(result)
        assert f"is {kind}-compressed" in line, line
        assert tool in line, line
