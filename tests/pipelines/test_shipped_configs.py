"""The TOML files shipped in pipelines/configs parse into valid configs."""

from pathlib import Path

import pytest

from pipelines.config import PipelineConfig, TrainConfig, build_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "pipelines" / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("cls", [TrainConfig, PipelineConfig])
def test_shipped_config_is_valid_for_both_programs(path, cls):
    cfg = build_config(cls, path)
    assert cfg.drafter["block_size"] == 16


def test_cpu_file_spells_out_the_defaults():
    path = next(p for p in CONFIGS if p.name == "cpu.toml")
    assert build_config(PipelineConfig, path) == PipelineConfig()
    assert build_config(TrainConfig, path) == TrainConfig()


def test_each_program_reads_its_own_table(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("max_steps = 5\n[sync]\nmax_steps = 7\n[pipeline]\ngrad_accum = 2\n")
    assert build_config(TrainConfig, f).max_steps == 7
    cfg = build_config(PipelineConfig, f)
    assert (cfg.max_steps, cfg.grad_accum) == (5, 2)


def test_pipeline_keys_at_top_level_are_rejected_by_sync_with_a_hint(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("grad_accum = 2\n")
    with pytest.raises(ValueError, match=r"grad_accum.*\[pipeline\] table"):
        build_config(TrainConfig, f)
