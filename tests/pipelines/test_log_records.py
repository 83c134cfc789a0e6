"""One schema definition: every field the writer can emit is declared in dflash_diag.logschema,
the module the reader takes its field names from."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from dflash_diag import logschema
from dflash_diag.read import schema as reader_schema
from pipelines.log_records import (
    CheckpointRecord,
    EvalRecord,
    Metrics,
    NonFiniteRecord,
    RunStart,
    StopRecord,
    validate_record,
)

SCHEDULE = {
    "kind": "cosine",
    "peak_lr": 6e-4,
    "warmup_steps": 10,
    "total_steps": 100,
    "min_lr": 6e-5,
}


def _every_record() -> list[object]:
    """One record of each kind the writer has, with every optional field set."""
    return [
        RunStart(
            script="pipeline",
            time=1.0,
            config={"lr": 6e-4},
            schedule={**SCHEDULE, "start_step": 10},
            block_size=16,
            steps_per_epoch=12.5,
            world_size=2,
            resumed_from={"path": "ckpt/step-10", "step": 10},
            rank=1,
            resume_schedule="restart",
            walk_held_out={
                "examples": 2,
                "seed": 0,
                "of": 64,
                "indices": [3, 40],
                "source": "eval_prompts",
                "eval_indices": [0, 7],
            },
        ),
        Metrics(
            step=11,
            time=2.0,
            epoch=0.9,
            loss=2.5,
            acc=0.3,
            lr=5e-4,
            tok_per_sec=4000.0,
            n_tokens=4096,
            n_blocks=256,
            n_pred=3840,
            acc_pos=[0.5] * 15,
            accept_pos=[0.4] * 15,
            tau_train=2.1,
            grad_norm=0.8,
            stage_busy={"forward": 0.6},
            queue_fill={"batches": 0.5},
            step_time=0.9,
            sync_wait=0.1,
            walk_tokens=9,
            walk_steps=4,
            walk_hist=[1, 1, 2] + [0] * 13,
        ),
        EvalRecord(
            step=20,
            time=3.0,
            tau=2.0,
            tau_hist=[0, 3, 1],
            n_prompts=4,
            new_tokens=64,
            temperature=0.0,
            prompt_tokens=[4, 2, 2, 1],
            prompt_steps=[1, 1, 1, 1],
        ),
        CheckpointRecord(step=20, time=3.5, path="ckpt/step-20"),
        NonFiniteRecord(step=21, time=4.0, loss=math.nan, grad_norm=math.inf, consecutive=1),
        StopRecord(step=21, time=5.0, reason="error", error="RuntimeError: boom"),
    ]


def undeclared(record: dict[str, object]) -> set[str]:
    """Keys of a written record that the shared schema does not declare for its kind."""
    kind = logschema.record_kind(record)
    if kind not in logschema.RECORD_KINDS:
        return set(record)
    return set(record) - set(logschema.record_fields(kind))


def test_writer_emits_only_declared_fields():
    kinds = set()
    for rec in _every_record():
        # through JSON, as the log holds it
        written = json.loads(json.dumps(rec.to_json()))
        kind = validate_record(written)
        kinds.add(kind)
        assert undeclared(written) == set(), kind
        # every optional field was set, so the record holds every declared field
        assert set(written) == set(logschema.record_fields(kind)), kind
    assert kinds == set(logschema.RECORD_KINDS)  # a new kind needs a record here too


def test_dataclass_fields_are_the_declared_ones():
    for rec in _every_record():
        kind = logschema.record_kind(rec.to_json())
        names = {f.name for f in dataclasses.fields(rec)}
        assert names == set(logschema.record_fields(kind)), kind


def test_an_undeclared_field_is_caught():
    @dataclasses.dataclass
    class Extended(Metrics):
        new_metric: float | None = None

    rec = Extended(step=1, time=0.0, epoch=0.0, loss=1.0, acc=0.1, lr=1e-4, new_metric=3.0)
    assert undeclared(rec.to_json()) == {"new_metric"}
    with pytest.raises(ValueError, match="unexpected field 'new_metric'"):
        validate_record(rec.to_json())
    assert undeclared({"event": "surprise", "step": 1}) == {"event", "step"}


def test_reader_takes_its_fields_from_the_shared_schema():
    metric_fields = set(logschema.record_fields("metrics"))
    event_fields = {
        name for kind in logschema.EVENT_KINDS for name in logschema.record_fields(kind)
    }
    assert reader_schema.METRIC_NUMBERS is logschema.METRIC_NUMBERS
    assert reader_schema.METRIC_LISTS is logschema.METRIC_LISTS
    assert (
        set(logschema.METRIC_NUMBERS) | set(logschema.METRIC_LISTS) | set(logschema.WALK_LISTS)
    ) <= metric_fields
    assert set(logschema.EVENT_FIELDS) <= event_fields
    schema, _ = reader_schema.read_schema()
    assert set(schema) == {
        *logschema.METRIC_NUMBERS,
        *logschema.METRIC_LISTS,
        *logschema.WALK_LISTS,
        "event",
    }
    # the walk's histogram is read even when the per-position lists are left for later
    schema, _ = reader_schema.read_schema(lists=False)
    assert set(schema) == {*logschema.METRIC_NUMBERS, *logschema.WALK_LISTS, "event"}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"resume_schedule": "again"}, "resume_schedule 'again'"),
        ({"resume_schedule": "continue", "resumed_from": None}, "in a resumed launch only"),
        ({"schedule": {**SCHEDULE, "start": 3}}, "schedule fields"),
    ],
)
def test_resume_schedule_and_start_step_are_checked(change, match):
    header = _every_record()[0].to_json()
    with pytest.raises(ValueError, match=match):
        validate_record({**header, **change})


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"prompt_steps": None}, "come together"),
        ({"prompt_tokens": [4, 2, 3]}, r"prompt_tokens must hold n_prompts \(4\)"),
        ({"prompt_steps": [1, 1, 1, 1.0]}, "prompt_steps must hold"),
        ({"prompt_steps": [2, 1, 1, 1]}, "add up to 5, tau_hist to 4"),
    ],
)
def test_an_evals_per_prompt_results_are_checked(change, match):
    record = _every_record()[2].to_json()
    assert validate_record(record) == "eval"
    changed = {k: v for k, v in {**record, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        validate_record(changed)


def test_an_eval_without_per_prompt_results_is_written_as_before():
    rec = EvalRecord(step=1, time=0.0, tau=1.0, tau_hist=[2], n_prompts=2, new_tokens=4)
    assert "prompt_tokens" not in rec.to_json()
    assert validate_record(rec.to_json()) == "eval"
