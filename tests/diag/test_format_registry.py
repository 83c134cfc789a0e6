"""The Format registry (dflash_diag.read.formats.registry): one record per input format feeds
detection, reading, the messages and the command line's help."""

from __future__ import annotations

import importlib

import pytest
from typer.testing import CliRunner

from dflash_diag.cli import app
from dflash_diag.errors import DiagError
from dflash_diag.read.formats import detect, registry
from dflash_diag.read.formats.registry import FORMATS, Format

#: the reader module of each format and the name it stamps on what it reads
MODULE_FORMAT = {
    "jsonl": ("foreign_jsonl", "FORMAT"),
    "tensorboard": ("tensorboard", "FORMAT"),
    "hf-trainer-state": ("trainer_state", "FORMAT"),
    "csv": ("csv_metrics", "FORMAT"),
    "mlflow": ("mlflow_store", "FORMAT_FILES"),
    "mlflow-sqlite": ("mlflow_store", "FORMAT_SQLITE"),
    "wandb": ("wandb_offline", "FORMAT"),
    "console": ("console", "FORMAT"),
    "table": ("numeric_table", "FORMAT"),
    "json-history": ("json_history", "FORMAT"),
}


@pytest.mark.parametrize("name", list(FORMATS))
def test_display_names_are_the_readers_own(name):
    module, constant = MODULE_FORMAT[name]
    reader = importlib.import_module(f"dflash_diag.read.formats.{module}")
    assert FORMATS[name].display == getattr(reader, constant)


def test_priorities_are_distinct():
    """Ties would make the order formats are tried depend on the table's order."""
    priorities = [f.priority for f in FORMATS.values()]
    assert len(set(priorities)) == len(priorities)


def test_the_help_lists_come_from_the_registry():
    runner = CliRunner()
    for command in ("converge", "compare", "watch"):
        text = " ".join(
            runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).stdout.split()
        )
        assert f"by content: {registry.supported()}." in text, command
    for command in ("converge", "watch"):
        text = " ".join(
            runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"}).stdout.split()
        )
        assert f"another trainer's {registry.described()} (" in text, command
    phrases = registry.described()
    for fmt in FORMATS.values():
        assert fmt.described is None or fmt.described in phrases


def test_adding_a_format_is_one_entry(monkeypatch, tmp_path):
    """A new record is detected (file and folder), accepted by --input-format and read."""
    read = []
    toy = Format(
        "toy",
        "toy log",
        read=lambda path: read.append(path) or "scalars",
        priority=5,  # before every other format
        described="toy log",
        sniff_file=lambda path, head: head.startswith(b"TOY"),
        sniff_folder=lambda path: (path / "run.toy").is_file(),
    )
    monkeypatch.setitem(FORMATS, "toy", toy)
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "run.toy").write_bytes(b"TOY 1 2 3\n")
    (folder / "trainer_state.json").write_text('{"log_history": [], "global_step": 0}')
    assert detect.detect_format(folder / "run.toy") == "toy"
    assert detect.folder_formats(folder) == ["toy", "hf-trainer-state"]
    assert detect.check_format("toy") == "toy"
    assert detect.read_scalars(folder / "run.toy", "toy") == "scalars"
    assert read == [folder / "run.toy"]
    assert registry.supported().endswith(", toy")
    assert registry.described().endswith(" or toy log")


def test_a_failing_reader_is_one_line_naming_the_display_name(monkeypatch, tmp_path):
    def broken(path):
        raise KeyError("deep inside")

    monkeypatch.setitem(FORMATS, "toy", Format("toy", "toy log", read=broken, priority=5))
    path = tmp_path / "x.toy"
    path.write_bytes(b"TOY")
    with pytest.raises(DiagError, match=r"cannot read as toy log \(KeyError"):
        detect.read_scalars(path, "toy")
