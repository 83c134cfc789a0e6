"""The held-out walk split: sequences the drafter never trains on, walked between evals.

The walked tau (:mod:`dflash.walk`) reads the drafter's teacher-forced predictions on some
sequences as greedy decoding would. Walked on the step's own training batch it is out of sample
only in the first epoch: from the second epoch on the drafter has trained on those very
sequences, and the walk drifts above the measured tau as it memorises them (on a held-out
pipeline run of 6.8 epochs: 4.47 walked against 3.70 measured, +21%). So a run holds out a small
split of its training data, fixed at its start (a seeded draw, :func:`dflash.data.held_out_indices`),
never trained on, and walks only those sequences: an unbiased tau series in every epoch. The
split is named in the log's ``run_start`` header (``walk_held_out``) and kept in checkpoints, so
a resumed run holds out the same examples.

Where the split comes from (``walk_source``): by default the data's eval-prompt file, the prompts
the periodic eval does not use, each with the target's greedy continuation over the horizon
(generated once at the run's start), so that the walk reads the eval's own population. Training
examples held out of the data (``walk_source = "data"``, the only split before) are never trained
on, but they are windows of the target's own training text while the eval prompts come from text
it never saw: measured on a 160-step pipeline run (constant lr 5e-4, seed 8, 6.5 epochs), greedy
speculative decoding gave 1.707 +- 0.112 on its 32 held-out training sequences (the walk: the same
1.707, sequence for sequence) against 1.487 +- 0.081 on the 32 eval-file prompts at step 160
(+15%; +3..+6% at steps 32-48), and 1.653 on 32 trained sequences: no memorisation of the split,
a gap between the two texts that widens with training.

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
from dflash_diag import logschema

#: At most this share of the data is held out (a small dataset keeps most of its examples).
MAX_HELD_OUT_SHARE = 1 / 8

#: ``walk_source`` values, the header's ``walk_held_out.source``: the eval-file prompts the eval
#: does not use, with the target's greedy continuations; or training examples held out.
EVAL_PROMPTS, DATA = logschema.WALK_HELD_OUT_SOURCES


@dataclass
class HeldOutWalk:
    """The held-out split of one run and how it is walked."""

    examples: Dataset
    """The held-out examples, in index order."""
    indices: list[int]
    """Their indices in the full dataset (``source`` data) or in the eval-prompt file."""
    seed: int
    of: int
    """Examples in the full dataset, or prompts in the eval-prompt file."""
    source: str = DATA
    """Where they come from: :data:`DATA` or :data:`EVAL_PROMPTS`."""
    eval_indices: list[int] | None = None
    """The eval file's prompts the eval measures when a seeded split drew them (None: its first
    ``eval_prompts``)."""

    def to_header(self) -> dict[str, Any]:
        """The ``walk_held_out`` object of the ``run_start`` header and of ``state.json``."""
        out: dict[str, Any] = {
            "examples": len(self.indices),
            "seed": self.seed,
            "of": self.of,
            "indices": list(self.indices),
            "source": self.source,
        }
        if self.eval_indices is not None:
            out["eval_indices"] = list(self.eval_indices)
        return out

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


@torch.no_grad()
def greedy_continuations(
    target, prompts: list[list[int]], horizon: int, layer_ids: list[int]
) -> list[list[int]]:
    """The target's greedy continuation of each prompt, ``horizon`` tokens (the prefill token
    included), decoded as the periodic eval decodes: no stop token, KV cache, one forward per
    token. Prompts of one length go in one batch (no padding, so a row never depends on its
    neighbours)."""
    out: dict[int, list[int]] = {}
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    for rows in by_length.values():
        ids = torch.tensor([prompts[i] for i in rows], dtype=torch.long, device=target.device)
        res = target.forward(ids, layer_ids, use_cache=True)
        tokens = [res.logits[:, -1].argmax(-1)]
        while len(tokens) < horizon:
            res = target.forward(tokens[-1][:, None], layer_ids, cache=res.cache)
            tokens.append(res.logits[:, -1].argmax(-1))
        gen = torch.stack(tokens, dim=1).tolist()
        for i, row in zip(rows, gen, strict=True):
            out[i] = row
    return [out[i] for i in range(len(prompts))]


def prompt_walk(
    target,
    all_prompts: list[list[int]],
    indices: list[int],
    horizon: int,
    layer_ids: list[int],
    meta: dict[str, Any],
    seed: int,
    eval_indices: list[int] | None = None,
) -> HeldOutWalk:
    """The walk split of eval-file prompts ``indices`` (of ``all_prompts``, the whole file),
    each with the target's greedy continuation over ``horizon`` tokens; ``eval_indices``: the
    eval's prompts of a seeded split, named with it.

    Raises:
        ValueError: an index outside the file (a resumed run whose eval file shrank).
    """
    bad = [i for i in [*indices, *(eval_indices or [])] if not 0 <= i < len(all_prompts)]
    if bad:
        raise ValueError(
            f"the walk's eval prompts {bad} are not in the eval-prompt file "
            f"({len(all_prompts)} prompts)"
        )
    prompts = [all_prompts[i] for i in indices]
    responses = greedy_continuations(target, prompts, horizon, layer_ids)
    examples = Dataset.from_examples(list(zip(prompts, responses, strict=True)), dict(meta))
    return HeldOutWalk(
        examples=examples,
        indices=list(indices),
        seed=seed,
        of=len(all_prompts),
        source=EVAL_PROMPTS,
        eval_indices=None if eval_indices is None else list(eval_indices),
    )


def spare_prompts(n_prompts: int, eval_uses: int, requested: int) -> list[int]:
    """Indices of the eval-file prompts the walk takes: after the ``eval_uses`` the periodic eval
    measures, at most ``requested`` (empty when the file holds no more)."""
    return list(range(eval_uses, min(n_prompts, eval_uses + requested)))


def seeded_prompt_split(
    n_prompts: int, eval_uses: int, requested: int, seed: int
) -> tuple[list[int], list[int]]:
    """(the eval's prompts, the walk's) of a seeded split of the eval file, each sorted: the
    first ``eval_uses`` of a seeded permutation, then at most ``requested`` more (empty when
    the file holds no more). A pure function of its arguments, so a run and its report agree.

    The order of the file is itself a seeded draw, so its first prompts are as good a sample
    as any; but a fixed split gives every run the same eval prompts, and whatever they differ
    by from the walk's (measured on one 160-step run: the first 8 read 1-8% above the other
    24 at steps 48-160) is then the same in every run. A split drawn per run makes it an
    independent draw in each, zero in expectation."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + 999_979)
    order = torch.randperm(n_prompts, generator=gen).tolist()
    evals = sorted(order[: min(eval_uses, n_prompts)])
    walk = sorted(order[eval_uses : eval_uses + requested])
    return evals, walk


def split_for_walk(
    dataset: Dataset, requested: int, seed: int, saved: dict[str, Any] | None = None
) -> tuple[Dataset, HeldOutWalk | None]:
    """The training examples and the held-out walk split of a run (``source`` data).

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
