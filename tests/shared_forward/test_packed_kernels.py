"""The packed forward on GPU kernels' forms (shared_forward/packed_kernels.py), on CPU: flash
varlen through the pure-torch stand-in with the kernel's semantics (values and
gradients), flex_attention forward-only (torch 2.13 has no CPU flex backward), both
against TRL's per-row forward on the tiny Llama of test_trainer_packed_prefix."""

from __future__ import annotations

import logging

import pytest
import torch
from test_packed_prefix import batch, tiny_llama

from contrastive_rlvr.shared_forward.packed_kernels import (
    FLEX_ATTENTION,
    VARLEN_ATTENTION,
    enable_kernel_form,
    kernel_form,
    varlen_attention_reference,
    varlen_layout,
)
from contrastive_rlvr.shared_forward.packed_prefix import (
    PackedPrefixUnsupported,
    build_packed_layout,
    packed_prefix_logps,
    supports_packed_prefix,
)
from contrastive_rlvr.shared_forward.probe import per_row_logps
from contrastive_rlvr.shared_forward.sharing import PromptSharing


def no_hole_batch():
    """test_trainer_packed_prefix's batch without the masked token inside row 4 (flash
    varlen masks by lengths only): prompts of 12, 9, 5 tokens over 8 rows, a short row,
    a fully masked row."""
    ids, mask, completion, completion_mask = batch()
    completion_mask[4] = 1
    return ids, mask, completion, completion_mask


def test_stand_in_has_the_kernels_causal_alignment():
    # Two sequences: 2 queries over 3 keys, then 1 query over 1 key. Zero queries give
    # equal scores, so each output is the mean of the values the query may see.
    q = torch.zeros(3, 1, 2)
    k = torch.zeros(4, 1, 2)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [4.0, 4.0], [7.0, -7.0]]).unsqueeze(1)
    cu_q = torch.tensor([0, 2, 3], dtype=torch.int32)
    cu_k = torch.tensor([0, 3, 4], dtype=torch.int32)
    out = varlen_attention_reference(q, k, v, cu_q, cu_k, 2, 3, causal=True)
    # Aligned at the end: query 0 sees keys 0, 1 (j <= 0 + 3 - 2); query 1 sees all 3.
    expected = torch.tensor([[0.5, 0.5], [5 / 3, 5 / 3], [7.0, -7.0]]).unsqueeze(1)
    torch.testing.assert_close(out, expected)
    # Not causal: every query sees every key of its sequence.
    full = varlen_attention_reference(q, k, v, cu_q, cu_k, 2, 3, causal=False)
    torch.testing.assert_close(full[0], torch.tensor([[5 / 3, 5 / 3]]))


def test_varlen_layout_indexes_prompts_then_segments():
    ids, mask, completion, completion_mask = no_hole_batch()
    layout = build_packed_layout(ids, mask, completion, completion_mask)
    v = varlen_layout(layout)
    # Shared parts: the three prompts less their last token (11, 8, 4).
    assert v.cu_shared.tolist() == [0, 11, 19, 23]
    # Each segment's keys are its prompt's shared part then its own tokens.
    q_len = (v.cu_query[1:] - v.cu_query[:-1]).tolist()
    k_len = (v.cu_key[1:] - v.cu_key[:-1]).tolist()
    prompt_of = [0, 1, 0, 2, 1, 2, 0, 2]  # batch(): the prompt each row holds
    shared = [11, 8, 4]
    assert [k - q for k, q in zip(k_len, q_len, strict=True)] == [shared[p] for p in prompt_of]
    with pytest.raises(PackedPrefixUnsupported, match="masked token"):
        varlen_layout(build_packed_layout(*batch()))  # row 4's inner hole


@pytest.mark.parametrize("checkpointing", [False, True])
def test_varlen_form_equals_per_row_in_values_and_gradients(checkpointing):
    tensors = no_hole_batch()
    reference, packed = tiny_llama(), tiny_llama()
    assert enable_kernel_form(packed, form=VARLEN_ATTENTION, kernel=varlen_attention_reference)
    assert kernel_form(packed.config._attn_implementation) == VARLEN_ATTENTION
    for model in (reference, packed):
        model.train()
        if checkpointing:
            model.gradient_checkpointing_enable({"use_reentrant": False})
    scored = tensors[3].bool()
    want = per_row_logps(reference, *tensors)
    got = packed_prefix_logps(packed, *tensors)
    torch.testing.assert_close(got[scored], want[scored], atol=1e-5, rtol=0)
    weights = torch.linspace(0.5, 1.5, want.numel()).view_as(want) * scored
    (want * weights).sum().backward()
    (got * weights).sum().backward()
    for (name, a), b in zip(reference.named_parameters(), packed.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_flex_form_equals_per_row_forward_only():
    tensors = batch()  # flex takes any mask: the inner hole included
    reference, packed = tiny_llama(), tiny_llama()
    assert enable_kernel_form(packed, form=FLEX_ATTENTION)
    with torch.no_grad():
        want = per_row_logps(reference, *tensors)
        got = packed_prefix_logps(packed, *tensors)
    scored = tensors[3].bool()
    torch.testing.assert_close(got[scored], want[scored], atol=1e-5, rtol=0)
    # Plain calls (generation) keep the model's own attention.
    ids = torch.cat([tensors[0], tensors[2]], 1)
    with torch.no_grad():
        torch.testing.assert_close(packed(ids).logits, reference(ids).logits)


def test_flash_and_flex_models_are_switched_and_logged(caplog):
    for impl, form in (("flash_attention_2", VARLEN_ATTENTION), ("flex_attention", FLEX_ATTENTION)):
        model = tiny_llama()
        model.config._attn_implementation = impl
        assert supports_packed_prefix(model) == (True, "")
        with pytest.raises(PackedPrefixUnsupported, match="enable_kernel_form"):
            packed_prefix_logps(model, *no_hole_batch())  # not switched yet
        sharing = PromptSharing(conditioned=True, plain=False, gradient_checkpointing=False,
                                num_processes=1)  # fmt: skip
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="contrastive_rlvr.shared_forward.sharing"):
            assert sharing.prepare(model, "policy") == "packed"
        assert kernel_form(model.config._attn_implementation) == form
        assert f"{form}:{impl} attention" in caplog.text


def test_a_hole_under_varlen_runs_that_batch_per_row(caplog):
    model = tiny_llama()
    enable_kernel_form(model, form=VARLEN_ATTENTION, kernel=varlen_attention_reference)
    sharing = PromptSharing(conditioned=True, plain=False, gradient_checkpointing=False,
                            num_processes=1)  # fmt: skip
    assert sharing.prepare(model, "policy") == "packed"
    ids, mask, completion, completion_mask = batch()
    full_ids = torch.cat([ids, completion], 1)
    full_mask = torch.cat([mask, completion_mask], 1)
    with caplog.at_level(logging.WARNING), torch.no_grad(), sharing.prompts("conditioned"):
        out = sharing.forward(model, full_ids, full_mask, completion.size(1), batch_size=None,
                              compute_entropy=False, compute_aux_loss=False, extra={})  # fmt: skip
    assert out is None and "masked token" in caplog.text
