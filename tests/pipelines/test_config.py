"""Typed configs: defaults < TOML < flags, one-line errors."""

import pytest

from pipelines.config import PipelineConfig, TrainConfig, build_config


def test_toml_then_flags(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text(
        'max_steps = 7\nseed = 3\ntarget_devices = ["cpu", "cpu"]\n[drafter]\nblock_size = 8\n'
    )
    cfg = build_config(PipelineConfig, f, {"seed": 5, "token_budget": None})
    assert (cfg.max_steps, cfg.seed, cfg.token_budget) == (7, 5, TrainConfig.token_budget)
    assert cfg.target_devices == ["cpu", "cpu"]
    assert cfg.drafter == {"block_size": 8}
    assert cfg.schedule_total_steps == 7


def test_device_list_from_flag_string():
    cfg = build_config(
        PipelineConfig, None, {"target_devices": "cuda:1, cuda:2", "device": "cuda:0"}
    )
    assert cfg.target_devices == ["cuda:1", "cuda:2"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("max_stepz = 3\n", "unknown config key"),
        ("max_steps = 0\n", "max_steps must be an integer >= 1"),
        ("peak_lr = -1.0\n", "peak_lr"),
        ('device = "gpu"\n', "bad device"),
        ("[drafter]\nblock_size = 1\n", r"\[drafter\]: block_size"),
        ("[drafter]\nwidth = 1\n", r"\[drafter\]: unknown DFlashConfig"),
        ("max_steps = \n", "config file"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, text, match):
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        build_config(PipelineConfig, f)
    assert "\n" not in str(info.value)


def test_missing_file():
    with pytest.raises(ValueError, match="not found"):
        build_config(TrainConfig, "/nonexistent/c.toml")


def test_pipeline_splits_the_cores_between_its_cpu_stages():
    from pipelines.async_pipeline import cpu_threads_per_stage

    assert cpu_threads_per_stage(PipelineConfig(), cores=8) == 4  # target0 + drafter
    assert cpu_threads_per_stage(PipelineConfig(target_devices=["cpu"] * 3), cores=8) == 2
    assert cpu_threads_per_stage(PipelineConfig(target_devices=["cpu"] * 9), cores=8) == 1
