"""The tiny Llama of the embedded default: size by hand, tied weights, determinism."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def test_parameter_count_by_hand(tok):
    model = build_tiny_model(tok)
    # V = 100, h = 64, mlp = 256, 2 layers, tied embeddings (counted once):
    #   embedding        100 * 64                        =   6400
    #   per layer  q,k,v,o 4 * 64 * 64 = 16384, gate/up/down 3 * 64 * 256 = 49152,
    #              two RMSNorms 2 * 64 = 128             -> 65664, times 2 = 131328
    #   final norm                                       =     64
    #   total                                            = 137792
    assert sum(p.numel() for p in model.parameters()) == 137792
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.config.max_position_embeddings == 256


def test_smaller_shape_count_by_hand(tok):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, mlp=64, max_positions=64)
    # 100*32 + (4*32*32 + 3*32*64 + 2*32) + 32 = 3200 + (4096 + 6144 + 64) + 32 = 13536
    assert sum(p.numel() for p in model.parameters()) == 13536


def test_deterministic_for_a_seed_and_leaves_global_rng(tok):
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a = build_tiny_model(tok, seed=7)
    assert torch.equal(torch.get_rng_state(), state)
    b = build_tiny_model(tok, seed=7)
    c = build_tiny_model(tok, seed=8)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb)
    assert not torch.equal(pa, pc)


def test_generation_defaults_are_plain_sampling(tok):
    cfg = build_tiny_model(tok).generation_config
    assert (cfg.do_sample, cfg.temperature, cfg.top_k, cfg.top_p) == (True, 1.0, 0, 1.0)
    assert (cfg.pad_token_id, cfg.eos_token_id) == (tok.pad_token_id, tok.eos_token_id)


def test_long_sequence_runs_within_positions(tok):
    model = build_tiny_model(tok, max_positions=256)
    # The longest sequence the module docstring budgets for: 7 + 102 + 8 = 117 tokens.
    ids = torch.full((1, 117), tok.convert_tokens_to_ids("1"))
    assert model(input_ids=ids).logits.shape == (1, 117, 100)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hidden": 64, "heads": 3}, "divisible"),
        ({"hidden": 12, "heads": 4}, "even"),  # head size 3
        ({"layers": 0}, "layers"),
        ({"max_positions": 8}, "max_positions"),
    ],
)
def test_bad_shapes_raise(tok, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_tiny_model(tok, **kwargs)
