"""Shared-prefix log-probs equal one forward per row, in value and in gradient."""

from __future__ import annotations

import pytest
import torch
from trainer_utils import save_tiny_model
from transformers import AutoModelForCausalLM
from trl.trainer.utils import add_fused_lm_head

from contrastive_rlvr.shared_forward.prefix import distinct_rows, shared_prefix_logps


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    torch.set_num_threads(1)
    m = AutoModelForCausalLM.from_pretrained(save_tiny_model(tmp_path_factory.mktemp("tiny")))
    add_fused_lm_head(m, temperature=1.0)
    return m


def batch():
    """Six rows: three distinct left-padded prompts (12, 9 and 7 tokens), each twice;
    right-padded completions, one of them shorter."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, 90, (n,), generator=gen) for n in (12, 9, 7)]
    ids = torch.zeros(6, 12, dtype=torch.long)
    mask = torch.zeros(6, 12, dtype=torch.long)
    for i in range(6):
        p = prompts[i // 2]
        ids[i, 12 - len(p) :] = p
        mask[i, 12 - len(p) :] = 1
    completion = torch.randint(4, 90, (6, 5), generator=gen)
    completion_mask = torch.ones(6, 5, dtype=torch.long)
    completion[1, 3:] = 0
    completion_mask[1, 3:] = 0
    return ids, mask, completion, completion_mask


def full_forward(model, ids, mask, completion, completion_mask):
    seq, attn = torch.cat([ids, completion], 1), torch.cat([mask, completion_mask], 1)
    labels = seq.masked_fill(attn == 0, -100)
    labels[:, : ids.size(1)] = -100
    return model(input_ids=seq, attention_mask=attn, labels=labels, fused_lm_head=True).log_probs[
        :, -completion.size(1) :
    ]


def test_distinct_rows():
    ids, mask, _, _ = batch()
    first, inverse = distinct_rows(ids, mask)
    assert sorted(first.tolist()) == [0, 2, 4]
    assert [first[j].item() for j in inverse.tolist()] == [0, 0, 2, 2, 4, 4]


def test_values_and_gradients_match_full_forward(model):
    ids, mask, completion, completion_mask = batch()
    expected = full_forward(model, ids, mask, completion, completion_mask)
    got = shared_prefix_logps(model, ids, mask, completion, completion_mask)
    torch.testing.assert_close(got * completion_mask, expected * completion_mask, atol=1e-5, rtol=0)
    params = [p for p in model.parameters() if p.requires_grad]
    g_expected = torch.autograd.grad((expected * completion_mask).sum(), params)
    g_got = torch.autograd.grad((got * completion_mask).sum(), params)
    for a, b in zip(g_expected, g_got, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
