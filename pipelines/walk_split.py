"""The held-out walk split: training sequences the drafter never trains on, walked between evals.

The walked tau (:mod:`dflash.walk`) reads the drafter's teacher-forced predictions on some
sequences as greedy decoding would. Walked on the step's own training batch it is out of sample
only in the first epoch: from the second epoch on the drafter has trained on those very
sequences, and the walk drifts above the measured tau as it memorises them (on a held-out
pipeline run of 6.8 epochs: 4.47 walked against 3.70 measured, +21%). So a run holds out a small
split of its training data, fixed at its start (a seeded draw, :func:`dflash.data.held_out_indices`),
never trained on, and walks only those sequences: an unbiased tau series in every epoch. The
split is named in the log's ``run_start`` header (``walk_held_out``) and kept in checkpoints, so
a resumed run holds out the same examples.

Each walked record walks ``walk_seqs`` of the held-out sequences, the next ones in turn, so that a
window of records covers the whole split; a record costs one no-gradient target forward and one
drafter pass on those few sequences.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dflash import walk_batch
from dflash.data import Dataset, collate, held_out_indices

#: At most this share of the data is held out (a small dataset keeps most of its examples).
MAX_HELD_OUT_SHARE = 1 / 8


@dataclass
class HeldOutWalk:
    """The held-out split of one run and how it is walked."""

    examples: Dataset
    """The held-out examples, in index order."""
    indices: list[int]
    """Their indices in the full dataset."""
    seed: int
    of: int
    """Examples in the full dataset."""

    def to_header(self) -> dict[str, Any]:
        """The ``walk_held_out`` object of the ``run_start`` header and of ``state.json``."""
        return {
            "examples": len(self.indices),
            "seed": self.seed,
            "of": self.of,
            "indices": list(self.indices),
        }

    def rows_for(self, record: int, n: int) -> list[int]:
        """The held-out rows walked by walked record number ``record``: ``n`` of them, taking
        up where the previous record stopped (wrapping around)."""
        size = len(self.indices)
        return [(record * n + j) % size for j in range(min(n, size))]

    @torch.no_grad()
    def walk(
        self,
        drafter: torch.nn.Module,
        target,
        layer_ids: list[int],
        horizon: int,
        record: int,
        n: int,
        device: str,
    ) -> dict[str, object]:
        """The walked tau of record number ``record`` on its held-out rows, as the metric
        record's ``walk_*`` fields (the target forward included: these rows are in no batch)."""
        batch = collate(
            [self.examples[i] for i in self.rows_for(record, n)], self.examples.pad_token_id
        )
        batch = {k: v.to(device) for k, v in batch.items()}
        ids = batch["input_ids"].to(target.device)
        mask = batch["attention_mask"].to(target.device)
        features = target.forward(ids, layer_ids, mask, logits=False).features.to(device)
        return walk_batch(drafter, target, batch, features, horizon=horizon).to_log_dict()


def split_for_walk(
    dataset: Dataset, requested: int, seed: int, saved: dict[str, Any] | None = None
) -> tuple[Dataset, HeldOutWalk | None]:
    """The training examples and the held-out walk split of a run.

    Args:
        dataset: every example of the data directory.
        requested: ``walk_holdout`` of the config (0: none, the walk reads training batches).
        seed: the run's seed (the split is a pure function of it and the sizes).
        saved: a resumed checkpoint's ``walk_held_out`` (its split is kept, whatever the config
            asks, since its data cursor counts the examples of its own training split); an
            empty dict is a checkpoint written before splits existed: no split.

    Returns:
        (training examples, the split or None).
    """
    if saved is not None:
        if not saved:
            return dataset, None
        n, seed = int(saved["examples"]), int(saved["seed"])
    else:
        n = min(requested, int(len(dataset) * MAX_HELD_OUT_SHARE))
    if n <= 0:
        return dataset, None
    held = held_out_indices(len(dataset), n, seed)
    chosen = set(held)
    train = dataset.subset([i for i in range(len(dataset)) if i not in chosen])
    return train, HeldOutWalk(
        examples=dataset.subset(held), indices=held, seed=seed, of=len(dataset)
    )
