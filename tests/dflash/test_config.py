import itertools

import pytest

from dflash import DFlashConfig, DFlashDraftModel, decay_weights, default_target_layer_ids


def test_layer_ids_spread_from_1_to_L_minus_3():
    assert default_target_layer_ids(36, 5) == (1, 9, 17, 25, 33)
    assert default_target_layer_ids(6, 2) == (1, 3)
    assert default_target_layer_ids(6, 1) == (3,)
    with pytest.raises(ValueError, match="cannot spread"):
        default_target_layer_ids(6, 4)


def test_for_target_copies_sizes_and_picks_defaults(target):
    cfg = DFlashConfig.for_target(target.config, num_draft_layers=2)
    assert (cfg.hidden_size, cfg.head_dim, cfg.vocab_size, cfg.num_target_layers) == (
        64,
        16,
        256,
        6,
    )
    assert cfg.target_layer_ids == (1, 3)
    assert cfg.block_size == 16
    assert cfg.loss_decay_gamma == 7.0
    # No pad token in the tiny target: the last vocabulary id becomes the mask token.
    assert cfg.mask_token_id == 255
    assert cfg.num_context_features == 128


@pytest.mark.parametrize(("b", "gamma"), [(16, 7.0), (10, 5.0), (8, 4.0)])
def test_gamma_defaults(b, gamma):
    assert DFlashConfig(block_size=b).loss_decay_gamma == gamma


def test_gamma_none_switches_decay_off(target):
    cfg = DFlashConfig.for_target(target.config, block_size=4, loss_decay_gamma=None)
    assert cfg.loss_decay_gamma is None
    assert cfg.loss_weights() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"block_size": 1}, "block_size"),
        ({"num_draft_layers": 0}, "num_draft_layers"),
        ({"num_anchors": 0}, "num_anchors"),
        ({"loss_decay_gamma": -1.0}, "loss_decay_gamma"),
        ({"loss_decay_gamma": "fast"}, "loss_decay_gamma"),
        ({"mask_token_id": 256, "vocab_size": 256}, "outside the vocabulary"),
        ({"target_layer_ids": (1, 7), "num_target_layers": 6}, "outside"),
        ({"target_layer_ids": (2, 2)}, "distinct"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "multiple"),
    ],
)
def test_bad_values_raise(kw, msg):
    with pytest.raises(ValueError, match=msg):
        DFlashConfig(**kw)


def test_unresolved_config_cannot_build_a_model():
    with pytest.raises(ValueError, match="for_target"):
        DFlashDraftModel(DFlashConfig())


def test_dict_round_trip(target):
    cfg = DFlashConfig.for_target(target.config, block_size=8, num_draft_layers=2)
    again = DFlashConfig.from_dict(cfg.to_dict())
    assert again == cfg
    assert again.mismatches(cfg) == []
    with pytest.raises(ValueError, match="unknown"):
        DFlashConfig.from_dict({**cfg.to_dict(), "bogus": 1})


def test_decay_weights_formula():
    w = decay_weights(16, 7.0)
    assert len(w) == 15
    assert w[0] == 1.0
    assert w[7] == pytest.approx(2.718281828459045 ** (-1.0))  # k = 8: exp(-7/7)
    assert all(a > b for a, b in itertools.pairwise(w))
