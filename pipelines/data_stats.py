"""How repetitive a drafter dataset is: the share of copyable response tokens, distinct tokens.

Acceptance on data that loops (a tiny target's greedy output repeats itself) is easy and bimodal,
and says little about real text; these two numbers tell such data from real text at a glance.

* copyable 4-gram share: the share of response tokens x_i whose 4-gram x_{i-3..i} already occurred
  earlier in the same sequence (prompt included), i.e. a prompt-lookup drafter could have copied
  x_i from the earlier occurrence of its 3-token context.
* distinct-token share: per response, distinct tokens / response length; the median over
  responses is reported.

Pure Python over token id lists (no torch): ``python -m pipelines.make_data --stats DIR`` prints
them for an existing dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

NGRAM = 4


@dataclass(frozen=True)
class DataStats:
    """Repetition statistics of a set of (prompt, response) examples."""

    n_examples: int
    response_tokens: int
    copyable_share: float
    """Response tokens whose 4-gram occurred earlier in the sequence / response tokens."""
    distinct_share_median: float
    """Median over responses of distinct tokens / response length."""
    mean_response_len: float

    def line(self) -> str:
        """One human-readable line."""
        return (
            f"{self.n_examples} examples, {self.response_tokens} response tokens "
            f"(mean {self.mean_response_len:.1f}): copyable 4-gram share "
            f"{self.copyable_share:.1%}, median distinct-token share "
            f"{self.distinct_share_median:.1%}"
        )


def copyable_count(tokens: Sequence[int], response_start: int, n: int = NGRAM) -> int:
    """Response tokens (index >= ``response_start``) whose n-gram ending there occurred before.

    The n-gram of position i is ``tokens[i-n+1 .. i]``; it "occurred before" when the same n-gram
    ends at some j < i. Positions with fewer than n - 1 tokens before them are never copyable.
    """
    seen: set[tuple[int, ...]] = set()
    count = 0
    for i in range(n - 1, len(tokens)):
        gram = tuple(tokens[i - n + 1 : i + 1])
        if i >= response_start and gram in seen:
            count += 1
        seen.add(gram)
    return count


def data_stats(examples: Sequence[tuple[Sequence[int], int]]) -> DataStats:
    """Statistics of ``(token ids of prompt + response, response start)`` examples.

    Raises:
        ValueError: no example with a non-empty response.
    """
    copyable = total = 0
    shares = []
    for tokens, start in examples:
        response = list(tokens[start:])
        if not response:
            continue
        copyable += copyable_count(list(tokens), start)
        total += len(response)
        shares.append(len(set(response)) / len(response))
    if not shares:
        raise ValueError("no example with a response")
    return DataStats(
        n_examples=len(shares),
        response_tokens=total,
        copyable_share=copyable / total,
        distinct_share_median=float(median(shares)),
        mean_response_len=total / len(shares),
    )


def dataset_stats(dataset) -> DataStats:
    """:func:`data_stats` of a ``dflash.data.Dataset``."""
    examples = []
    for i in range(len(dataset)):
        ex = dataset[i]
        examples.append((ex.input_ids.tolist(), ex.response_start))
    return data_stats(examples)
