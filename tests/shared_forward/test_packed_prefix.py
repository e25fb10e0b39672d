"""The packed shared-prefix forward equals one forward per row, in value and in gradient:
with left padding, rotary positions, several prefixes of different lengths and several
rows each, holes in the completion mask, gradient checkpointing on, SDPA and eager
attention, and under a two-process DDP run (gloo)."""

from __future__ import annotations

import datetime
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM
from trl.trainer.utils import add_fused_lm_head

from contrastive_rlvr.shared_forward.packed_prefix import (
    IGNORE_INDEX,
    SPLIT_ATTENTION,
    PackedPrefixUnsupported,
    build_packed_layout,
    enable_split_attention,
    packed_prefix_logps,
    supports_packed_prefix,
)

VOCAB = 97


def tiny_llama(attn: str = "sdpa", seed: int = 0) -> LlamaForCausalLM:
    """A random float32 Llama (rotary positions, grouped-query attention), fused head on;
    ``attn="split"``: SDPA switched to the split attention of the packed forward."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        rope_theta=100.0,  # fast-turning rotations: a wrong position shows in the values
        attn_implementation="sdpa" if attn == "split" else attn,
    )
    model = LlamaForCausalLM(config).float()
    add_fused_lm_head(model, temperature=0.7)
    if attn == "split":
        assert enable_split_attention(model)
    return model


def batch():
    """Eight rows: three distinct left-padded prompts (12, 9 and 5 real tokens) held by
    3, 2 and 3 rows, rows of one prompt not adjacent; right-padded completions of 6, one
    shorter (row 1), one with a masked token inside (row 4), one fully masked (row 5)."""
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(4, VOCAB, (n,), generator=gen) for n in (12, 9, 5)]
    owner = [0, 1, 0, 2, 1, 2, 0, 2]
    ids = torch.zeros(8, 12, dtype=torch.long)
    mask = torch.zeros(8, 12, dtype=torch.long)
    for i, o in enumerate(owner):
        p = prompts[o]
        ids[i, 12 - len(p) :] = p
        mask[i, 12 - len(p) :] = 1
    completion = torch.randint(4, VOCAB, (8, 6), generator=gen)
    completion_mask = torch.ones(8, 6, dtype=torch.long)
    completion[1, 3:] = 0
    completion_mask[1, 3:] = 0
    completion_mask[4, 2] = 0
    completion_mask[5, :] = 0
    return ids, mask, completion, completion_mask


def per_row(model, ids, mask, completion, completion_mask):
    """TRL's per-row forward: each row's left-padded prompt and completion, fused head."""
    seq, attn = torch.cat([ids, completion], 1), torch.cat([mask, completion_mask], 1)
    labels = seq.masked_fill(attn == 0, IGNORE_INDEX)
    labels[:, : ids.size(1)] = IGNORE_INDEX
    out = model(input_ids=seq, attention_mask=attn, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -completion.size(1) :]


def count_calls(module: torch.nn.Module) -> list[int]:
    """A list that grows on each call of ``module.forward`` (a hook would not see the
    checkpointed recomputation)."""
    calls: list[int] = []
    forward = module.forward

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    module.forward = counted
    return calls


def grads(model, logp, weight):
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad((logp * weight).sum(), params)


def test_layout_by_hand():
    """Two rows share prompt [5, 6, 7] (one pad), one row has prompt [8, 9]."""
    ids = torch.tensor([[0, 5, 6, 7], [0, 0, 8, 9], [0, 5, 6, 7]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1]])
    completion = torch.tensor([[10, 11, 0], [12, 13, 14], [15, 16, 17]])
    completion_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 1]])
    layout = build_packed_layout(ids, mask, completion, completion_mask)
    # Prompt [5, 6, 7]: shared [5, 6], then row 0's segment [7, 10], row 2's [7, 15, 16].
    # Prompt [8, 9]: shared [8], then row 1's segment [9, 12, 13]; padded to length 7.
    assert layout.input_ids.tolist() == [[5, 6, 7, 10, 7, 15, 16], [8, 9, 12, 13, 0, 0, 0]]
    assert layout.position_ids.tolist() == [[0, 1, 2, 3, 2, 3, 4], [0, 1, 2, 3, 0, 0, 0]]
    x = IGNORE_INDEX
    assert layout.shift_labels.tolist() == [[x, x, 10, 11, 15, 16, 17], [x, 12, 13, 14, x, x, x]]
    allowed = layout.allowed.int().tolist()
    assert allowed[0] == [
        [1, 0, 0, 0, 0, 0, 0],  # 5
        [1, 1, 0, 0, 0, 0, 0],  # 6
        [1, 1, 1, 0, 0, 0, 0],  # 7 (row 0): the prompt and itself
        [1, 1, 1, 1, 0, 0, 0],  # 10
        [1, 1, 0, 0, 1, 0, 0],  # 7 (row 2): not row 0's segment
        [1, 1, 0, 0, 1, 1, 0],  # 15
        [1, 1, 0, 0, 1, 1, 1],  # 16
    ]
    assert allowed[1][3] == [1, 1, 1, 1, 0, 0, 0]
    assert [allowed[1][i][i] for i in (4, 5, 6)] == [1, 1, 1]  # padding sees itself only
    assert [sum(allowed[1][i]) for i in (4, 5, 6)] == [1, 1, 1]
    # Row 2's completion token j is predicted at packed row 0, column 4 + j.
    assert layout.index[2].tolist() == [4, 5, 6]
    assert layout.index[1].tolist() == [7 + 1, 7 + 2, 7 + 3]
    assert layout.valid.tolist() == [[True, True, False], [True] * 3, [True] * 3]


@pytest.mark.parametrize("attn", ["sdpa", "eager", "split"])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_values_and_gradients_match_per_row(attn, checkpointing):
    model = tiny_llama(attn)
    if checkpointing:
        model.activation_checkpointing_enable({"use_reentrant": False})
        model.train()  # HF checkpoints layers only in training mode
    ids, mask, completion, completion_mask = batch()
    expected = per_row(model, ids, mask, completion, completion_mask)
    calls = count_calls(model.model.layers[0].mlp)
    got = packed_prefix_logps(model, ids, mask, completion, completion_mask)
    assert got.shape == completion.shape
    assert (got[completion_mask == 0] == 0).all()
    torch.testing.assert_close(got, expected * completion_mask, atol=1e-5, rtol=0)
    # Random per-token weights, so a gradient reaching the wrong token would show.
    weight = torch.rand(completion.shape, generator=torch.Generator().manual_seed(1))
    g_got = grads(model, got, weight)
    assert len(calls) == (2 if checkpointing else 1)  # one forward; the backward re-ran it
    for a, b in zip(grads(model, expected, weight), g_got, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


def test_split_attention_leaves_other_calls_as_sdpa():
    """Switched to split attention, a model's ordinary (per-row) forward is unchanged."""
    ids, mask, completion, completion_mask = batch()
    sdpa, split = tiny_llama("sdpa"), tiny_llama("split")
    assert split.config._attn_implementation == SPLIT_ATTENTION
    assert not enable_split_attention(tiny_llama("eager"))
    expected = per_row(sdpa, ids, mask, completion, completion_mask)
    torch.testing.assert_close(per_row(split, ids, mask, completion, completion_mask), expected)


def test_wrong_positions_would_fail():
    """The check above can fail: naive packing positions (counting along the packed row,
    so every later segment sits too far from its prompt) give other values."""
    model = tiny_llama()
    ids, mask, completion, completion_mask = batch()
    layout = build_packed_layout(ids, mask, completion, completion_mask)
    layout.position_ids = torch.arange(layout.input_ids.size(1)).expand_as(layout.input_ids)
    expected = per_row(model, ids, mask, completion, completion_mask)
    got = packed_prefix_logps(model, ids, mask, completion, completion_mask, layout=layout)
    assert not torch.allclose(got * completion_mask, expected * completion_mask, atol=1e-3)
    # Dropping the segment separation (every completion sees the others) also shows.
    layout = build_packed_layout(ids, mask, completion, completion_mask)
    layout.segment = torch.full_like(layout.segment, -1)
    got = packed_prefix_logps(model, ids, mask, completion, completion_mask, layout=layout)
    assert not torch.allclose(got * completion_mask, expected * completion_mask, atol=1e-3)


def test_plain_groups_one_prompt_per_group():
    """Plain GRPO: every row of a group has the group's prompt (2 groups of 4)."""
    model = tiny_llama()
    ids, mask, completion, completion_mask = batch()
    order = torch.tensor([0, 2, 6, 0, 1, 4, 1, 4])  # prompts 0 and 1, four rows each
    ids, mask = ids[order], mask[order]
    layout = build_packed_layout(ids, mask, completion, completion_mask)
    assert layout.input_ids.size(0) == 2
    expected = per_row(model, ids, mask, completion, completion_mask)
    got = packed_prefix_logps(model, ids, mask, completion, completion_mask)
    torch.testing.assert_close(got, expected * completion_mask, atol=1e-5, rtol=0)


def test_chunked_no_grad_call_equals_one_call():
    """chunk_rows=3 packs rows 0-2, 3-5, 6-7 separately (prompt 0 is in two chunks)."""
    model = tiny_llama("split")
    ids, mask, completion, completion_mask = batch()
    with torch.no_grad():
        expected = per_row(model, ids, mask, completion, completion_mask) * completion_mask
        got = packed_prefix_logps(model, ids, mask, completion, completion_mask, chunk_rows=3)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


def test_unsupported_models_are_refused_with_a_reason():
    assert supports_packed_prefix(tiny_llama()) == (True, "")
    unpatched = LlamaForCausalLM(tiny_llama().config)
    ok, reason = supports_packed_prefix(unpatched)
    assert not ok and "add_fused_lm_head" in reason
    flash = tiny_llama()
    flash.config._attn_implementation = "flash_attention_2"
    # Flash attention takes the layout once switched to its varlen form (test_packed_kernels).
    assert supports_packed_prefix(flash) == (True, "")
    ids, mask, completion, completion_mask = batch()
    with pytest.raises(PackedPrefixUnsupported, match="flash_attention_2"):
        packed_prefix_logps(flash, ids, mask, completion, completion_mask)
    sliding = MistralForCausalLM(
        MistralConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            sliding_window=16,
            attn_implementation="sdpa",
        )
    )
    add_fused_lm_head(sliding)
    ok, reason = supports_packed_prefix(sliding)
    assert not ok and "sliding" in reason


def test_empty_prompt_is_an_error():
    ids, mask, completion, completion_mask = batch()
    mask[3] = 0
    with pytest.raises(ValueError, match="empty prompt"):
        build_packed_layout(ids, mask, completion, completion_mask)


# ---------------------------------------------------------------- two processes, DDP (gloo)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, out: str, attn: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # A bounded wait: a rank left alone fails the test instead of hanging it.
    dist.init_process_group(
        "gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=300)
    )
    model = tiny_llama(attn)
    model.activation_checkpointing_enable({"use_reentrant": False})
    model.train()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ids, mask, completion, completion_mask = batch()
    rows = slice(rank * 4, rank * 4 + 4)  # each process holds half the rows
    logp = packed_prefix_logps(ddp, ids[rows], mask[rows], completion[rows], completion_mask[rows])
    weight = torch.rand(completion.shape, generator=torch.Generator().manual_seed(1))[rows]
    (logp * weight).sum().backward()  # DDP averages the two processes' gradients
    if rank == 0:
        torch.save([p.grad for p in model.parameters()], out)
    # Rank 0 hosts the rendezvous store: leaving before rank 1 is done with it would
    # strand rank 1 (seen under load), so both finish together.
    dist.barrier()
    dist.destroy_process_group()
    # Leave without running destructors: freeing DDP's reducer at return joins gloo's
    # worker thread while holding the GIL, and that thread may be waiting for the GIL to
    # free its last all-reduce (a deadlock seen twice, one rank stuck in
    # ProcessGroupGloo::~ProcessGroupGloo). Everything the test needs is saved above.
    os._exit(0)


@pytest.mark.parametrize("attn", ["sdpa", "split"])
def test_ddp_two_processes_gradients_equal_single_process_per_row(tmp_path, attn):
    """Each process packs its half of the rows (checkpointing on); DDP's averaged
    gradients equal those of the whole batch's per-row forward in one process."""
    out = str(tmp_path / "grads.pt")
    args = (2, _free_port(), out, attn)
    mp.start_processes(_ddp_worker, args=args, nprocs=2, start_method="spawn")
    ddp_grads = torch.load(out)
    model = tiny_llama()
    ids, mask, completion, completion_mask = batch()
    weight = torch.rand(completion.shape, generator=torch.Generator().manual_seed(1))
    expected = grads(model, per_row(model, ids, mask, completion, completion_mask), weight / 2)
    for a, b in zip(expected, ddp_grads, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
