"""Text from a log is shown literally: rich markup and ANSI escapes cannot style the terminal."""

from __future__ import annotations

import io

from rich.console import Console

from dflash_diag import (
    build_converge_report,
    parse_records,
    render_markdown,
    render_rich,
    render_text,
)
from dflash_diag.text import visible

from .logs import dumps, original_analysis

EVIL_SCRIPT = "[bold red]pwned[/bold red]"
EVIL_PATH = "ckpt/\x1b[31mRED\x1b[0m\x1b]0;title\x07[link=http://x]here[/link]"


def _report():
    records = original_analysis(legacy=False)
    header = records[0]
    header["script"] = "pipeline"
    header["resumed_from"] = {"path": EVIL_PATH, "step": "[blink]15000[/blink]"}
    records.insert(1, {"event": "eval", "step": 15000, "tau": 3.0, "n_prompts": 4})
    report = build_converge_report(parse_records(dumps(records)))
    report.sources = [EVIL_SCRIPT + "\x1b[2J.jsonl"]
    return report


def test_visible_escapes_control_characters():
    assert visible("a\x1b[31mb\x07\n") == "a\\x1b[31mb\\x07\\x0a"
    assert visible("tab\tkept") == "tab\tkept"
    assert visible("\u202eevil") == "\\u202eevil"


def test_rich_output_shows_markup_literally_and_no_raw_escapes():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=200)
    render_rich(_report(), console)
    out = buffer.getvalue()
    assert "[bold red]pwned[/bold red]" in out
    assert "[blink]15000[/blink]" in out
    assert "[link=http://x]here[/link]" in out
    assert "\\x1b[31mRED" in out
    # rich's own styling uses ESC, but none of the log's sequences get through
    assert "\x1b[31mRED" not in out
    assert "\x1b]0;title" not in out
    assert "\x1b[2J" not in out
    assert "\x07" not in out


def test_plain_and_markdown_outputs_are_escape_free():
    for out in (render_text(_report()), render_markdown(_report())):
        assert "\x1b" not in out
        assert "\x07" not in out
        assert "pwned" in out
