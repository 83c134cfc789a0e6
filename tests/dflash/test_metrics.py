import math

import pytest
import torch

from dflash import StepMetrics
from dflash.metrics import prefix_accept


def test_accept_pos_and_tau_on_a_hand_made_matrix():
    # 4 blocks, B = 5 (positions 1..4). Prefix lengths: 4, 0, 2, 1.
    correct = torch.tensor(
        [
            [1, 1, 1, 1],
            [0, 1, 1, 1],  # a wrong first position accepts nothing, whatever follows
            [1, 1, 0, 1],
            [1, 0, 1, 0],
        ],
        dtype=torch.bool,
    )
    m = StepMetrics.from_correctness(correct)
    d = m.to_log_dict()
    assert m.correct_pos == [3, 3, 3, 3]
    assert m.accept_pos == [3, 2, 1, 1]
    assert d["acc_pos"] == [0.75, 0.75, 0.75, 0.75]
    assert d["accept_pos"] == [0.75, 0.5, 0.25, 0.25]
    assert d["acc"] == 12 / 16
    assert d["n_pred"] == 16
    assert d["n_blocks"] == 4
    # tau_train = mean over blocks of 1 + prefix length = (5 + 1 + 3 + 2) / 4.
    assert d["tau_train"] == pytest.approx(11 / 4)


def test_high_accuracy_can_mean_low_tau():
    # Every block wrong at position 1, right elsewhere: acc 0.75 but tau_train 1.
    correct = torch.ones(10, 4, dtype=torch.bool)
    correct[:, 0] = False
    d = StepMetrics.from_correctness(correct).to_log_dict()
    assert d["acc"] == 0.75
    assert d["tau_train"] == 1.0


def test_prefix_accept():
    c = torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=torch.bool)
    assert prefix_accept(c).tolist() == [[True, False, False], [True, True, False]]


def test_sums_aggregate_exactly_across_batches_of_different_size():
    g = torch.Generator().manual_seed(0)
    parts = [torch.rand(n, 7, generator=g) < 0.7 for n in (3, 11, 1)]
    summed = StepMetrics(block_size=8)
    for i, c in enumerate(parts):
        summed = summed + StepMetrics.from_correctness(
            c, loss_sum=float(i + 1), weight_sum=2.0 * len(c)
        )
    whole = StepMetrics.from_correctness(torch.cat(parts), loss_sum=6.0, weight_sum=30.0)
    assert summed == whole
    assert summed.loss == 6.0 / 30.0


def test_tensor_round_trip_for_all_reduce():
    m = StepMetrics.from_correctness(
        torch.tensor([[1, 0, 1]], dtype=torch.bool), loss_sum=1.5, weight_sum=2.5, n_tokens=9
    )
    t = m.as_tensor()
    assert t.dtype == torch.float64
    assert StepMetrics.from_tensor(t + t, block_size=4) == m + m
    with pytest.raises(ValueError, match="metrics tensor has 12 entries, expected 14"):
        StepMetrics.from_tensor(t, block_size=5)


def test_empty_metrics_are_nan_not_an_error():
    d = StepMetrics(block_size=4).to_log_dict()
    assert math.isnan(d["loss"])
    assert math.isnan(d["tau_train"])
    assert d["n_blocks"] == 0


def test_mismatched_block_sizes_do_not_add():
    with pytest.raises(ValueError, match="cannot add metrics of block sizes 4 and 5"):
        StepMetrics(block_size=4) + StepMetrics(block_size=5)
