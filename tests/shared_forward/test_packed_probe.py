"""The packed forward chosen by proof (shared_forward/probe.py): models whose positions break the
packed layout's premise (GPT-2's learned absolute positions, Phi-3's LongRoPE past its
threshold) fall back to per row with the measured difference logged; models where it is
exact (Llama, OPT in this transformers) keep it. Tiny random configs, offline."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    OPTConfig,
    OPTForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
)
from trl.trainer.utils import add_fused_lm_head

from contrastive_rlvr.shared_forward.packed_prefix import (
    packed_prefix_forward,
    supports_packed_prefix,
)
from contrastive_rlvr.shared_forward.probe import (
    PROBE_TOLERANCE,
    per_row_logps,
    probe_packed_forward,
    probe_width,
    rope_threshold,
    synthetic_batch,
)
from contrastive_rlvr.shared_forward.sharing import PromptSharing

VOCAB = 97
THRESHOLD = 32  # LongRoPE's original_max_position_embeddings in the tiny Phi-3


def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "gpt2":
        model = GPT2LMHeadModel(
            GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=128,
                       bos_token_id=1, eos_token_id=2)
        )  # fmt: skip
    elif name == "opt":
        model = OPTForCausalLM(
            OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                      num_attention_heads=4, max_position_embeddings=128, word_embed_proj_dim=32)
        )  # fmt: skip
    elif name == "phi3":
        head = 32 // 4
        model = Phi3ForCausalLM(
            Phi3Config(
                vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                original_max_position_embeddings=THRESHOLD, pad_token_id=0, eos_token_id=2,
                initializer_range=0.3,  # peaked attention: a wrong rotation shows in the values
                rope_scaling={
                    "rope_type": "longrope", "rope_theta": 100.0,
                    "short_factor": [1.0] * (head // 2), "long_factor": [8.0] * (head // 2),
                    "original_max_position_embeddings": THRESHOLD,
                },
            )
        )  # fmt: skip
    else:
        model = LlamaForCausalLM(
            LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        max_position_embeddings=128, rope_theta=100.0, eos_token_id=2)
        )  # fmt: skip
    model.config._attn_implementation = "sdpa"
    add_fused_lm_head(model)
    return model.eval()


def independent_gap(model, width: int, completion_len: int) -> float:
    """Mean |packed - per-row| over scored tokens of the probe's batch at ``width``, the
    packed forward and TRL's per-row forward called here directly (not through the probe)."""
    tensors = synthetic_batch(width, completion_len, VOCAB, threshold=rope_threshold(model))
    with torch.no_grad():
        packed = packed_prefix_forward(model, *tensors)[0]
        padded = per_row_logps(model, *tensors)
    scored = tensors[3].bool()
    return float((packed - padded).abs()[scored].mean())


@pytest.mark.parametrize("name", ["gpt2", "phi3"])
def test_models_the_list_accepted_fail_the_probe(name, caplog):
    model = tiny(name)
    # The static check lets them through (what the probe is for) ...
    assert supports_packed_prefix(model) == (True, "")
    width = 20
    gap = independent_gap(model, probe_width(model, width), 8)
    assert gap > 100 * PROBE_TOLERANCE[torch.float32]  # a position bug, not rounding
    # ... the probe does not, and the trainer's sharing falls back to per row, logged.
    ok, reason = probe_packed_forward(model, width, 8)
    assert not ok and "mean |diff|" in reason
    sharing = PromptSharing(conditioned=True, plain=True, gradient_checkpointing=False,
                            num_processes=1)  # fmt: skip
    assert sharing.prepare(model, "policy") == "packed"  # a candidate until proven
    prompt_ids, prompt_mask, completion_ids, completion_mask = synthetic_batch(20, 8, VOCAB)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([prompt_mask, completion_mask], 1)
    caplog.set_level(logging.INFO, logger="contrastive_rlvr.shared_forward.sharing")
    with sharing.prompts("plain"):
        out = sharing.forward(model, ids, mask, 8, batch_size=None, compute_entropy=False,
                              compute_aux_loss=False, extra={})  # fmt: skip
    assert out is None  # the caller runs TRL's per-row forward
    assert "not exact on this model" in caplog.text and "mean |diff|" in caplog.text


def test_longrope_probe_reaches_past_the_threshold():
    model = tiny("phi3")
    assert rope_threshold(model) == THRESHOLD
    # A run whose batches are short is still probed past the threshold (34 > 32 tokens)...
    assert probe_width(model, 20) == THRESHOLD + 2
    # ... with a longer prompt left-padded so that its real length stays at the threshold:
    # per row the forward's largest position passes it (long factor), packed it does not.
    _, prompt_mask, _, completion_mask = synthetic_batch(34, 8, VOCAB, threshold=THRESHOLD)
    real = prompt_mask.sum(1) + completion_mask.sum(1)
    assert int(real.max()) <= THRESHOLD < 34
    # Below the threshold the two forwards agree: the difference is LongRoPE's switch.
    tensors = synthetic_batch(24, 8, VOCAB)
    with torch.no_grad():
        gap = (packed_prefix_forward(model, *tensors)[0] - per_row_logps(model, *tensors)).abs()
    assert float(gap[tensors[3].bool()].mean()) < PROBE_TOLERANCE[torch.float32]


@pytest.mark.parametrize("name", ["llama", "opt"])
def test_exact_models_pass_the_probe_and_share(name):
    model = tiny(name)
    assert independent_gap(model, 20, 8) < 1e-5
    ok, summary = probe_packed_forward(model, 20, 8)
    assert ok, summary
    sharing = PromptSharing(conditioned=True, plain=True, gradient_checkpointing=False,
                            num_processes=1)  # fmt: skip
    assert sharing.prepare(model, "policy") == "packed"
    prompt_ids, prompt_mask, completion_ids, completion_mask = synthetic_batch(20, 8, VOCAB)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    mask = torch.cat([prompt_mask, completion_mask], 1)
    with torch.no_grad(), sharing.prompts("plain"):
        out = sharing.forward(model, ids, mask, 8, batch_size=None, compute_entropy=False,
                              compute_aux_loss=False, extra={})  # fmt: skip
        reference = per_row_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    assert out is not None
    torch.testing.assert_close(out[0], reference, atol=1e-5, rtol=0)


def test_probe_restores_training_mode_and_reads_the_dtype():
    model = tiny("llama").train()
    ok, summary = probe_packed_forward(model, 12, 4)
    assert ok and model.training  # dropout off for the probe only
    assert "float32" in summary and "1e-04" in summary
