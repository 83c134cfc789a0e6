"""The live view's state, view model, alerts and rendering (no terminal needed)."""

from __future__ import annotations

import io
import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from dflash_diag.analysis.diagnosis import DiagnosisConfig
from dflash_diag.errors import DiagError
from dflash_diag.watch import (
    LiveLog,
    WatchConfig,
    build_view,
    format_duration,
    loss_spikes,
    render_view,
    stall_alert,
)

T0 = 1_700_000_000.0
HEADER = {
    "event": "run_start",
    "schema": 1,
    "script": "pipeline",
    "time": T0,
    "config": {"token_budget": 65536, "grad_accum": 4},
    "schedule": {"kind": "cosine", "peak_lr": 6e-4, "warmup_steps": 20000, "total_steps": 100000},
    "block_size": 16,
    "world_size": 1,
}


def record(step: int, acc: float, loss: float = 3.0, **extra) -> str:
    rec = {
        "step": step,
        "time": T0 + step,
        "loss": loss,
        "acc": acc,
        "lr": 6e-4 * step / 20000,
        "tok_per_sec": 16000.0,
        "n_pred": 30000,
    }
    rec.update(extra)
    return json.dumps(rec) + "\n"


def rising(start: int, stop: int, slope: float = 1e-4) -> str:
    """Pipeline records whose acc rises ``slope`` per step (loss falls), noise-free."""
    return "".join(
        record(s, 0.15 + slope * (s - 15000), 3.1 - slope * (s - 15000)) for s in range(start, stop)
    )


def append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15300))
    return path


def test_refresh_parses_only_the_appended_lines(log):
    clock = FakeClock(T0 + 15300)
    live = LiveLog(log, WatchConfig(), clock=clock)
    first = live.refresh()
    assert (first.new_lines, first.new_records) == (301, 300)
    assert live.total_records == 300
    assert live.last_step == 15299

    assert live.refresh().new_lines == 0  # nothing appended: nothing parsed
    append(log, rising(15300, 15350))
    second = live.refresh()
    assert (second.new_lines, second.new_records, second.reset) == (50, 50, False)
    assert live.total_records == 350
    assert live.last_step == 15349
    view = build_view(live)
    assert view.windows[-1].start == 15300
    assert view.windows[-1].n == 50


def test_a_torn_line_is_counted_once_complete(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    line = record(15300, 0.2)
    append(log, line[:20])
    assert live.refresh().new_records == 0
    assert live.issues.malformed == 0  # held back, not a malformed line
    append(log, line[20:])
    assert live.refresh().new_records == 1
    assert live.last_step == 15300


def test_state_stays_the_size_of_the_view(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 20000, slope=1e-5))
    config = WatchConfig(history=10, analysis=DiagnosisConfig(window=50))
    live = LiveLog(path, config)
    live.refresh()
    assert live.total_records == 5000
    assert live.log.metrics.height <= (config.history + 1) * config.analysis.window
    view = build_view(live)
    assert len(view.series[0].values) == config.history
    assert view.windows[-1].end == 19999
    assert view.schedule.peak == 6e-4
    assert view.schedule.peak_source == "header"


def test_series_carry_the_window_means_of_lr_and_tok_per_sec(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15100))
    live = LiveLog(path, WatchConfig(analysis=DiagnosisConfig(window=50)))
    live.refresh()
    series = {s.name: s.values for s in build_view(live).series}
    # lr rises linearly: each window's mean is its middle step's lr
    assert series["lr"] == pytest.approx([6e-4 * 15024.5 / 20000, 6e-4 * 15074.5 / 20000])
    assert series["tok/s"] == [16000.0, 16000.0]
    legacy = tmp_path / "legacy.jsonl"  # the old script logged no tok_per_sec: no tok/s row
    legacy.write_text(
        "".join(record(s, 0.15).replace('"tok_per_sec": 16000.0, ', "") for s in range(100))
    )
    live = LiveLog(legacy, WatchConfig(analysis=DiagnosisConfig(window=50)))
    live.refresh()
    names = [s.name for s in build_view(live).series]
    assert "lr" in names
    assert "tok/s" not in names


def test_header_numbers_out_of_float_range_are_ignored(tmp_path):
    """``1e999`` decodes to inf and ``10**400`` overflows a float: neither is a usable setting."""
    header = json.dumps(dict(HEADER, block_size=1)).replace(
        '"block_size": 1', '"block_size": 1e999, "steps_per_epoch": 1' + "0" * 400
    )
    path = tmp_path / "train.jsonl"
    path.write_text(header + "\n" + rising(15000, 15100))
    live = LiveLog(path, WatchConfig())
    live.refresh()
    assert live.headers()[0]["block_size"] == math.inf
    view = build_view(live)
    assert view.acceptance.block_size == 16  # the default, not the header's inf
    assert view.schedule.epoch is None


def test_a_backlog_is_parsed_in_pieces_with_the_same_result(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 17000, slope=1e-5))
    config = WatchConfig(history=10, analysis=DiagnosisConfig(window=50))
    whole = LiveLog(path, config, max_chunk_bytes=None)
    pieces = LiveLog(path, config, max_chunk_bytes=4096)  # about 25 lines per piece
    assert whole.refresh().new_records == pieces.refresh().new_records == 2000
    assert pieces.tail.backlog_bytes == 0
    # pruned after each piece: never more than the view plus one piece
    assert pieces.log.metrics.height <= (config.history + 1) * config.analysis.window
    a, b = build_view(whole), build_view(pieces)
    assert [w.acc for w in a.windows] == [w.acc for w in b.windows]
    assert a.series[0].values == b.series[0].values


@pytest.mark.parametrize("rewound_to", [16900, 16300])
def test_the_forecast_reads_the_pruned_records_as_converge_does(tmp_path, rewound_to):
    """A backlog parsed in pieces, then records appended over refreshes (a restart rewinding
    into the pruned windows among them): the forecast and the verdict are converge's on the
    same file, every time, though watch keeps 10 windows of records; the restart is one (the
    superseded records kept, each prune moved it: 16100, 16150, ... 16400). Rewound by more
    than the records after it (16100 to 16300 after 17400), the pruned windows past 16300 are
    superseded too (kept, the verdict judged them)."""
    from dflash_diag.analysis.diagnosis import diagnose
    from dflash_diag.read.jsonl import load_log

    def noisy(start: int, stop: int) -> str:
        return "".join(
            record(
                s,
                0.6 - 0.4 * math.exp(-(s - 15000) / 800) + 0.01 * math.sin(s),
                1.0 + 2.0 * math.exp(-(s - 15000) / 800) + 0.03 * math.cos(s / 3),
            )
            for s in range(start, stop)
        )

    path = tmp_path / "grow.jsonl"
    header = dict(HEADER, schedule=None)  # no planned end: the horizon is the log's span
    path.write_text(json.dumps(header) + "\n" + noisy(15000, 17000))
    config = WatchConfig(history=10, analysis=DiagnosisConfig(window=50))
    live = LiveLog(path, config, max_chunk_bytes=4096)
    for more in ("", noisy(17000, 17030), noisy(17030, 17400), noisy(16100, rewound_to)):
        with open(path, "a") as f:
            f.write(more)
        live.refresh()
        view = build_view(live)
        assert live.earlier_records() is not None
        assert live.log is not None
        assert live.log.metrics.height <= 1100  # not the 3,200 records: they stay pruned
        expected = diagnose(load_log(str(path)), config.analysis)
        assert view.diagnosis is not None
        assert view.diagnosis.forecast == expected.forecast
        assert view.diagnosis.verdict == expected.verdict
    assert view.restarts == [16100]


@pytest.mark.parametrize("chunk", [2048, 1 << 24])
def test_restarts_to_one_step_are_each_one_as_in_converge(tmp_path, chunk):
    """k-fold runs, each from step 1, then a resume from the middle: watch lists every restart
    in file order, as converge does (it kept one per step, in step order: [1, 120])."""
    from dflash_diag.analysis.diagnosis import diagnose
    from dflash_diag.read.jsonl import load_log

    path = tmp_path / "folds.jsonl"
    folds = [rising(1, 301) for _ in range(3)]
    path.write_text(json.dumps(HEADER) + "\n" + "".join(folds) + rising(120, 400))
    config = WatchConfig(history=4, analysis=DiagnosisConfig(window=25))
    live = LiveLog(path, config, max_chunk_bytes=chunk)
    live.refresh()
    view = build_view(live)
    expected = diagnose(load_log(str(path)), config.analysis)
    assert [r.step for r in expected.restarts] == [1, 1, 120]
    assert view.restarts == [1, 1, 120]
    assert view.diagnosis is not None
    # what the outputs show (a segment's number counts the segments watch still holds)
    shown = [
        [(r.step, r.previous_step, r.seq) for r in d.restarts] for d in (view.diagnosis, expected)
    ]
    assert shown[0] == shown[1]


def test_truncation_rebuilds_the_state(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    log.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15100))
    stats = live.refresh()
    assert stats.reset
    assert live.total_records == 100
    assert live.last_step == 15099
    view = build_view(live)
    assert any(a.kind == "reset" for a in view.alerts)


def test_rotation_rebuilds_the_state(log, tmp_path):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    os.rename(log, tmp_path / "train.jsonl.1")
    log.write_text(json.dumps(HEADER) + "\n" + rising(15300, 15700))
    assert live.refresh().reset
    assert live.total_records == 400
    assert live.last_step == 15699


def test_restart_is_reported_and_the_later_entries_win(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    # resumed from a step-15200 checkpoint: steps 15200+ logged again, with another acc
    append(log, "".join(record(s, 0.5) for s in range(15200, 15260)))
    live.refresh()
    view = build_view(live)
    assert view.restarts == [15200]
    assert view.windows[-1].start == 15250
    assert view.windows[-1].acc == pytest.approx(0.5)
    assert view.windows[-1].n == 10


def test_windows_realign_when_the_pipeline_phase_starts(tmp_path):
    path = tmp_path / "migrating.jsonl"
    legacy = "".join(
        json.dumps({"step": s, "time": T0 + s, "loss": 1.57, "acc": 0.15, "lr": 1e-4}) + "\n"
        for s in range(14963, 15000)
    )
    path.write_text(legacy)
    live = LiveLog(path, WatchConfig())
    live.refresh()
    first = build_view(live).windows[0]  # no pipeline yet: all entries, windows from the first
    assert (first.start - 14963) % (first.end - first.start + 1) == 0
    append(path, json.dumps(HEADER) + "\n" + rising(15000, 15100))
    live.refresh()
    view = build_view(live)
    # 100 pipeline steps: the auto rule's 10 windows from the pipeline's first step (the view
    # shows the newest)
    starts = [w.start for w in view.windows]
    assert starts == list(range(15100 - 10 * len(starts), 15100, 10))
    assert "pipeline entries" in view.selection


def test_stall_alert_uses_the_injected_clock(log):
    clock = FakeClock(T0 + 15299 + 299)
    live = LiveLog(log, WatchConfig(stall=300), clock=clock)
    live.refresh()
    view = build_view(live)
    assert view.since_last_record == pytest.approx(299)
    assert not any(a.kind == "stall" for a in view.alerts)
    clock.now += 2
    view = build_view(live)
    stall = [a for a in view.alerts if a.kind == "stall"]
    assert len(stall) == 1
    assert "5 min 01 s" in stall[0].message


def test_nan_alert(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    assert not any(a.kind == "nonfinite" for a in build_view(live).alerts)
    append(log, record(15300, 0.2, loss=math.nan))  # json writes the bare NaN token
    append(log, record(15301, 0.2, grad_norm=math.inf))
    append(log, record(15302, 0.2, acc_pos=[0.5, math.nan, 0.1]))
    live.refresh()
    view = build_view(live)
    (alert,) = [a for a in view.alerts if a.kind == "nonfinite"]
    assert alert.step == 15302
    assert "acc_pos (last at step 15302)" in alert.message
    assert "loss (last at step 15300)" in alert.message
    assert "grad_norm (last at step 15301)" in alert.message
    assert view.nonfinite == 3


def test_diverging_verdict_alert(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15500, slope=-1e-4))
    live = LiveLog(path, WatchConfig())
    live.refresh()
    view = build_view(live)
    assert view.verdict.status == "diverging"
    assert any(a.kind == "diverging" for a in view.alerts)


def test_loss_spike_alert(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    append(log, "".join(record(s, 0.18, loss=9.0) for s in range(15300, 15350)))
    live.refresh()
    spikes = [a for a in build_view(live).alerts if a.kind == "loss_spike"]
    assert len(spikes) == 1
    assert spikes[0].step == 15300


def test_loss_spikes_pure():
    flat = [3.0, 3.01, 2.99, 3.0, 3.02, 2.98, 3.0]
    assert loss_spikes(flat) == []
    assert loss_spikes([*flat[:3], 4.5, *flat[3:]]) == [3]
    assert loss_spikes([*flat, 6.0]) == [7]  # the newest window, with earlier neighbours only
    assert loss_spikes([3.0, 2.9, 2.8, 2.7, 2.6]) == []  # a falling curve is not a spike
    assert loss_spikes([3.0, None, math.nan, 3.0]) == []
    assert loss_spikes([1.0, 9.0]) == []  # too few neighbours to judge
    # Early training with 1-step windows: a steep fall, no spike (the first two were flagged).
    assert loss_spikes([10.478, 7.283, 5.156, 4.882, 4.896, 4.727]) == []
    assert loss_spikes([10.5, 7.3, 5.2, 9.0, 4.9, 4.8, 4.7]) == [3]  # a real one on the way down


def test_durations_and_stall_threshold():
    assert format_duration(42) == "42 s"
    assert format_duration(303) == "5 min 03 s"
    assert format_duration(2 * 3600 + 7 * 60) == "2 h 07 min"
    assert format_duration(3 * 86400 + 4 * 3600) == "3 d 4 h"
    assert stall_alert(None, 300) is None
    assert stall_alert(299.9, 300) is None
    assert stall_alert(300, 300).kind == "stall"


def test_waiting_for_a_log_that_does_not_exist_yet(tmp_path):
    live = LiveLog(tmp_path / "later.jsonl", WatchConfig())
    assert live.refresh().missing
    view = build_view(live)
    assert view.waiting
    assert view.windows == []
    assert "waiting" in _text(view)


def test_rejects_compressed_logs_and_stdin(tmp_path):
    with pytest.raises(DiagError, match="compressed"):
        LiveLog(tmp_path / "x.jsonl.gz")
    with pytest.raises(DiagError, match="standard input"):
        LiveLog("-")


def test_config_validation():
    with pytest.raises(ValueError, match="--interval"):
        WatchConfig(interval=0)
    with pytest.raises(ValueError, match="--stall"):
        WatchConfig(stall=-1)
    with pytest.raises(ValueError, match="history"):
        WatchConfig(history=1)
    with pytest.raises(ValueError, match="legacy"):
        WatchConfig(analysis=DiagnosisConfig(phase="legacy"))


def _text(view, **kw) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_view(view, **kw))
    return console.file.getvalue()


def test_render_shows_sparklines_arrows_schedule_and_verdict(tmp_path):
    log = tmp_path / "train.jsonl"
    log.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15300, slope=2e-4))
    live = LiveLog(log, WatchConfig(), clock=FakeClock(T0 + 15300))
    live.refresh()
    text = _text(build_view(live))
    assert "step 15299" in text
    assert "300 records" in text
    assert "last record 1 s ago" in text
    spark = next(line for line in text.splitlines() if line.startswith("acc "))
    assert "▁" in spark
    assert "█" in spark
    assert spark.index("▁") < spark.index("█")
    last_row = next(line for line in text.splitlines() if "15250-15299" in line)
    assert "+0.0100" in last_row
    assert last_row.rstrip().endswith("↑")
    assert "of peak 6.00e-04 (header)" in text
    assert "warmup" in text
    assert "verdict: converging" in text
    assert "tau (linear)" in text


def test_render_shows_a_path_literally(tmp_path):
    path = tmp_path / "[bold red]x\x1b[2J.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15100))
    live = LiveLog(path, WatchConfig())
    live.refresh()
    text = _text(build_view(live)).replace("\n", "")  # a long path wraps
    assert "[bold red]x" in text
    assert "\x1b" not in text
    assert "\\x1b[2J" in text


def test_plot_adds_line_charts(log):
    live = LiveLog(log, WatchConfig())
    live.refresh()
    text = _text(build_view(live), plot=True, width=100)
    assert "┤" in text  # plotext axes
    assert text.count("loss") >= 2
    assert any(c in text for c in "⠁⠂⠄⡀⢀⠈⠐⠠")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.binary(max_size=120), max_size=4), st.integers(0, 2**32))
def test_any_appended_bytes_never_crash_the_view(tmp_path, chunks, seed):
    """A writer appending garbage, torn JSON, restarts or NaNs: every refresh still draws."""
    import random

    rng = random.Random(seed)
    path = tmp_path / f"fuzz-{seed}.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + rising(15000, 15120))
    live = LiveLog(path, WatchConfig(history=5, analysis=DiagnosisConfig(window=10)))
    live.refresh()
    pieces = [
        record(rng.randrange(14990, 15200), rng.random(), loss=rng.choice([1.0, math.nan])).encode()
        for _ in range(2)
    ]
    for chunk in chunks + pieces:
        with open(path, "ab") as f:
            f.write(chunk + (b"\n" if rng.random() < 0.5 else b""))
        live.refresh()
        view = build_view(live)
    _text(view)  # rendering the last state (each render costs ~20 ms on this machine)


def test_a_long_diagnosis_line_wraps_under_its_label_with_its_styles():
    from rich.text import Text

    from dflash_diag.watch.render import _hung

    line = Text("verdict: ")
    line.append("converging", style="bold green")
    line.append("  acc +0.76/1k steps, p=0.024, target reached")
    line.append(" · over 6 windows (all of them, as converge)", style="dim")
    hung = _hung(line, 60)
    lines = hung.plain.split("\n")
    assert len(lines) == 2
    assert all(len(x) <= 60 for x in lines)
    assert lines[1].startswith("  ")
    assert lines[1].strip() in line.plain
    # each style on the same characters, the break's space now a newline and the hang
    styled = {str(s.style): hung.plain[s.start : s.end].replace("\n  ", " ") for s in hung.spans}
    assert styled == {
        "bold green": "converging",
        "dim": " · over 6 windows (all of them, as converge)",
    }
    assert _hung(line, 200) is line  # short enough: untouched


def test_a_long_watch_keeps_its_pruned_state_in_few_chunks(tmp_path):
    """300 refreshes, each pruning a few windows: the pruned windows and records are
    rechunked as they grow (a chunk a prune would make every refresh's queries slower)."""
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(HEADER) + "\n")
    live = LiveLog(path, WatchConfig(history=4, analysis=DiagnosisConfig(window=10)))
    for start in range(15000, 15000 + 300 * 20, 20):
        with path.open("a") as f:
            f.write(rising(start, start + 20))
        live.refresh()
    assert len(live.earlier_windows()) > 500
    assert live.earlier_windows().frame.n_chunks() <= 65
    earlier = live.earlier_records()
    assert earlier is not None
    assert earlier.n_chunks() <= 65


def test_the_auto_window_of_a_log_growing_past_250_steps_follows_converge(tmp_path):
    """A log written every step gets 10 windows while it is shorter than 250 steps, 50-step
    windows from there: watch must not fix the short log's size for the rest of the watch."""
    path = tmp_path / "growing.jsonl"
    path.write_text(rising(1, 101))
    live = LiveLog(path, WatchConfig())
    live.refresh()
    assert build_view(live).diagnosis.window.size == 10
    append(path, rising(101, 400))
    live.refresh()
    assert build_view(live).diagnosis.window.size == 50
