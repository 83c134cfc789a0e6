"""`dflash-diag watch` through typer's CliRunner (not a terminal: plain snapshots)."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.cli.watch import run_watch
from dflash_diag.errors import DiagError
from dflash_diag.watch import LiveLog, WatchConfig

from .test_watch import HEADER, rising

runner = CliRunner()


def _log(tmp_path, text: str | None = None):
    path = tmp_path / "train.jsonl"
    path.write_text(text if text is not None else json.dumps(HEADER) + "\n" + rising(15000, 15300))
    return path


def test_once_prints_one_plain_frame(tmp_path):
    result = runner.invoke(app, ["watch", str(_log(tmp_path)), "--once"])
    assert result.exit_code == 0, result.output
    assert "\x1b[" not in result.output  # not a terminal: no escape sequences
    assert result.output.count("dflash-diag watch") == 1
    assert "step 15299" in result.output
    assert "verdict:" in result.output
    assert "loss " in result.output
    assert "█" in result.output
    # a plain frame is text for a pipe: the table's cell padding leaves no trailing spaces
    lines = result.output.splitlines()
    assert any("Δacc" in line for line in lines)
    assert [line for line in lines if line != line.rstrip()] == []


def test_once_with_plot(tmp_path):
    result = runner.invoke(app, ["watch", str(_log(tmp_path)), "--once", "--plot"])
    assert result.exit_code == 0, result.output
    assert "┤" in result.output
    assert "15000.0" not in result.output
    assert "15250" in result.output


def test_plain_snapshot_per_refresh_shows_the_update(tmp_path):
    path = _log(tmp_path)
    live = LiveLog(path, WatchConfig(interval=0.01))
    out = io.StringIO()
    console = Console(file=out, width=100, color_system=None)

    class AppendBetweenRefreshes:
        """The waiter: instead of sleeping, the trainer writes 50 more steps."""

        def __init__(self) -> None:
            self.next = 15300

        def wait(self, seconds: float) -> bool:
            with open(path, "a") as f:
                f.write(rising(self.next, self.next + 50))
            self.next += 50
            return False

    assert run_watch(live, console, waiter=AppendBetweenRefreshes(), max_refreshes=3) == 0
    frames = out.getvalue().split("dflash-diag watch")[1:]
    assert len(frames) == 3
    assert "step 15299" in frames[0]
    assert "step 15349" in frames[1]
    assert "15300-15349" in frames[1]
    assert "step 15399" in frames[2]
    assert "15350-15399" in frames[2]


def test_quit_key_ends_the_loop(tmp_path):
    live = LiveLog(_log(tmp_path), WatchConfig())
    console = Console(file=io.StringIO(), width=100, color_system=None)

    class PressQ:
        def wait(self, seconds: float) -> bool:
            return True

    assert run_watch(live, console, waiter=PressQ()) == 0
    assert console.file.getvalue().count("dflash-diag watch") == 1


def test_missing_file_is_one_line_and_exit_2(tmp_path):
    result = runner.invoke(app, ["watch", str(tmp_path / "nope.jsonl"), "--once"])
    assert result.exit_code == 2
    assert "no such file" in result.output
    assert "Traceback" not in result.output


def test_bad_options_exit_2(tmp_path):
    path = str(_log(tmp_path))
    for args in (["--interval", "0"], ["--stall", "-5"], ["--window", "0"]):
        result = runner.invoke(app, ["watch", path, "--once", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def test_compressed_log_is_refused(tmp_path):
    path = tmp_path / "train.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"step": 1}\n'))
    result = runner.invoke(app, ["watch", str(path), "--once"])
    assert result.exit_code == 2
    assert "compressed" in result.output


def test_gzip_data_without_gz_name_is_refused_like_gz(tmp_path):
    """Told by its magic bytes, as converge tells it (it used to be '0 records · 12 malformed
    lines', exit 0, where converge reads every record); also when it appears after watch began."""
    records = b"".join(
        json.dumps({"step": s, "loss": 3 - s / 100, "acc": s / 200}).encode() + b"\n"
        for s in range(1, 201)
    )
    path = tmp_path / "train.jsonl"
    path.write_bytes(gzip.compress(records))
    result = runner.invoke(app, ["watch", str(path), "--once"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "gzip data" in lines[0]
    later = tmp_path / "later.jsonl"
    live = LiveLog(later, WatchConfig())
    live.refresh()  # not there yet
    later.write_bytes(gzip.compress(records))
    with pytest.raises(DiagError, match="gzip data"):
        live.refresh()


def test_header_facts_use_singular_and_plural(tmp_path):
    """One NaN, one malformed line, one restart: singular nouns; more of each: plural ones."""
    records = [json.loads(line) for line in rising(15000, 15300).splitlines()]
    records[50]["loss"] = float("nan")
    lines = [json.dumps(HEADER)] + [json.dumps(r) for r in records[:200]]
    lines += ["{not json"] + [json.dumps(r) for r in records[150:]]  # steps 15150.. logged twice
    one = runner.invoke(app, ["watch", str(_log(tmp_path, "\n".join(lines) + "\n")), "--once"])
    assert one.exit_code == 0, one.output
    head = " ".join(one.output.split())  # the facts line may wrap at the runner's width
    assert "1 NaN/Inf value ·" in head, head
    assert "1 malformed line skipped ·" in head, head
    assert "restart at 15150" in head, head
    records[60]["acc"] = float("nan")
    lines = [json.dumps(HEADER)] + [json.dumps(r) for r in records[:200]] + ["{", "{"]
    lines += [json.dumps(r) for r in records[150:200]] + [json.dumps(r) for r in records[100:]]
    two = runner.invoke(app, ["watch", str(_log(tmp_path, "\n".join(lines) + "\n")), "--once"])
    head = " ".join(two.output.split())
    assert "2 NaN/Inf values" in head, head
    assert "2 malformed lines skipped" in head, head
    assert "restarts at " in head, head


def test_more_than_three_restarts_are_counted(tmp_path):
    """Four runs from step 1 in one file (k-fold): the facts line says 4, shows the latest 3."""
    fold = [json.dumps({"step": s, "loss": 2.0 - s / 100}) for s in range(1, 61)]
    log = _log(tmp_path, "\n".join(fold * 5) + "\n")
    out = runner.invoke(app, ["watch", str(log), "--once"])
    assert out.exit_code == 0, out.output
    assert "4 restarts, the latest at 1, 1, 1" in " ".join(out.output.split()), out.output


def test_nothing_selected_says_what_is_missing(tmp_path):
    """Records exist but --from-step (or --phase) selects none: not "no metric records yet"."""
    path = _log(tmp_path)
    result = runner.invoke(app, ["watch", str(path), "--once", "--from-step", "99999"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "no records at or after step 99999 yet (the log's last step is 15299)" in text, text
    assert "no metric records yet" not in text
    result = runner.invoke(app, ["watch", str(_log(tmp_path, json.dumps(HEADER) + "\n")), "--once"])
    assert "no metric records yet" in result.output


def test_no_record_yet_shows_the_last_write_not_a_last_record(tmp_path):
    """Only malformed lines: '0 records · last write ... ago', never '0 records · last record'."""
    path = _log(tmp_path, '{"step": 10, "loss": 2.9\n{"step": 20, "loss"\n')
    result = runner.invoke(app, ["watch", str(path), "--once"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "0 records · last write" in text, text
    assert "last record" not in text, text
    assert "2 malformed lines skipped" in text, text


def test_every_plot_frame_has_the_same_three_panels(tmp_path):
    """Frames drawn one after another (live refreshes) keep three panels: plotext's last active
    subplot nested the next frame's panels inside it."""
    path = _log(tmp_path)
    frames = [
        runner.invoke(app, ["watch", str(path), "--once", "--plot"], env={"COLUMNS": "150"}).output
        for _ in range(2)
    ]
    tops = [next(line for line in f.splitlines() if "┌" in line) for f in frames]
    assert tops[0].count("┌") == 3, tops
    assert tops[1] == tops[0], tops
