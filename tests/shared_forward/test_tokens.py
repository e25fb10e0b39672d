"""The loss's token counts (``shared_forward/tokens.py``), worked by hand on a tiny batch.

Two groups of two rows. Plain prompts: group A 5 tokens, group B 3 tokens (left-padded to
5). Completions of width 4 with 4, 2, 3 and 4 scored tokens (right-padded). BiCC's
conditioned prompts: group A has one correct and one wrong row, each conditioned on the
other's attempt (contexts of 3 and 5 tokens: 8 and 10 tokens in all, so distinct); group B
has no opposite attempt, so both rows keep the plain 3-token prompt (one prompt, shared).

By hand:

- rows, plain: (5+4) + (5+2) + (3+3) + (3+4) = 29
- packed, plain: prompts' shared parts (5-1) + (3-1) = 6, segments 4+2+3+4 = 13: 19
- cache form, plain: pass 1 (5-1) + (3-1) = 6, pass 2 4 x (1 last prompt token) + 13 = 17: 23
- rows, conditioned: (8+4) + (10+2) + (3+3) + (3+4) = 37
- packed, conditioned: shared parts (8-1) + (10-1) + (3-1) = 18, segments 13: 31
"""

from __future__ import annotations

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.shared_forward.packed_prefix import build_packed_layout
from contrastive_rlvr.shared_forward.tokens import (
    LossForwardTokens,
    cache_tokens,
    packed_tokens,
    row_tokens,
)

SCORED = (4, 2, 3, 4)  # completion tokens of each row
PLAIN = (5, 5, 3, 3)  # prompt tokens of each row
CONDITIONED = (8, 10, 3, 3)  # group A: 5 + 3 and 5 + 5 of context; group B: plain


def left_padded(lengths: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of these real lengths, left-padded; rows of equal length share their ids
    (rows 2 and 3 of a kind: group B's one prompt)."""
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    made: dict[int, torch.Tensor] = {}
    for i, n in enumerate(lengths):
        if n not in made or i < 2:  # group A's rows differ, group B's share
            made[n] = torch.randint(4, 40, (n,), generator=gen)
        ids[i, width - n :], mask[i, width - n :] = made[n], 1
    return ids, mask


def batch(kind: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prompt_ids, prompt_mask, completion_ids, completion_mask) of the module's batch."""
    prompt_ids, prompt_mask = left_padded(PLAIN if kind == "plain" else CONDITIONED, seed=0)
    if kind == "plain":  # group A's two rows read one prompt
        prompt_ids[1] = prompt_ids[0]
    gen = torch.Generator().manual_seed(1)
    completion_ids = torch.randint(4, 40, (4, 4), generator=gen)
    completion_mask = (torch.arange(4).unsqueeze(0) < torch.tensor(SCORED).unsqueeze(1)).long()
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def test_the_batch_is_the_one_worked_by_hand():
    for kind, lengths in (("plain", PLAIN), ("conditioned", CONDITIONED)):
        prompt_ids, prompt_mask, _, completion_mask = batch(kind)
        assert prompt_mask.sum(1).tolist() == list(lengths)
        assert completion_mask.sum(1).tolist() == list(SCORED)
        distinct = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0)
        assert len(distinct) == {"plain": 2, "conditioned": 3}[kind]


@pytest.mark.parametrize("kind, rows, packed", [("plain", 29, 19), ("conditioned", 37, 31)])
def test_counts_by_hand(kind, rows, packed):
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch(kind)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    assert int(row_tokens(attention)) == rows
    assert packed_tokens(prompt_ids, prompt_mask, completion_mask) == packed
    # The packed layout the forward runs holds exactly those tokens (its tail padding aside).
    layout = build_packed_layout(prompt_ids, prompt_mask, completion_ids, completion_mask)
    assert int((layout.segment != -2).sum()) == packed


def test_cache_form_and_chunks_by_hand():
    prompt_ids, prompt_mask, _, completion_mask = batch("plain")
    assert cache_tokens(prompt_ids, prompt_mask, completion_mask) == 23
    # Chunks of 2 rows hold whole groups: as one pack. Chunks of 3: group B's prompt is
    # encoded in both chunks: (4 + 2) + (4 + 2 + 3), then (2) + (4) = 21.
    assert packed_tokens(prompt_ids, prompt_mask, completion_mask, chunk_rows=2) == 19
    assert packed_tokens(prompt_ids, prompt_mask, completion_mask, chunk_rows=3) == 21


def test_a_hole_keeps_the_tokens_up_to_the_last_scored_one():
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch("plain")
    completion_mask[0, 1] = 0  # row 0 scores tokens 0, 2, 3: all 4 still packed
    completion_mask[1] = 0  # row 1 scores nothing: its segment is 1 token
    assert packed_tokens(prompt_ids, prompt_mask, completion_mask) == 6 + 4 + 1 + 3 + 4
    layout = build_packed_layout(prompt_ids, prompt_mask, completion_ids, completion_mask)
    assert int((layout.segment != -2).sum()) == 18


def test_tallies_count_inside_counting_only_and_sum_processes():
    tokens = LossForwardTokens()
    tokens.add("plain", 29, 19)  # outside: not counted
    assert tokens.take() == {}
    with tokens.counting():
        tokens.add("plain", torch.tensor(29), 19)
        tokens.add("plain", 29, 29)
        with tokens.counting(False):
            tokens.add("conditioned", 37, 31)
    assert tokens.take() == {"tokens/loss_rows_plain": 58.0, "tokens/loss_forward_plain": 48.0}
    # A kind once seen is logged every step after (0 on a step without it).
    assert tokens.take() == {"tokens/loss_rows_plain": 0.0, "tokens/loss_forward_plain": 0.0}
    with tokens.counting():
        tokens.add("conditioned", 37, 31)
    two = tokens.take(reduce=lambda total: total * 2)  # as a sum over two equal processes
    assert two == {
        "tokens/loss_rows_plain": 0.0,
        "tokens/loss_forward_plain": 0.0,
        "tokens/loss_rows_conditioned": 74.0,
        "tokens/loss_forward_conditioned": 62.0,
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.mark.parametrize(
    "overrides, plain, conditioned",
    [
        (dict(bicc=True), 29, 31),  # conditioned prompts packed, plain ones per row
        (dict(bicc=True, share_prefix=False), 29, 37),  # nothing shared
        (dict(bicc=True, share_plain_prompt=True), 19, 31),  # both packed
    ],
)
def test_the_trainers_forward_counts_what_it_ran(
    model_dir, tmp_path, overrides, plain, conditioned
):
    trainer = make_trainer(model_dir, make_config(tmp_path, **overrides))
    trainer.model.train()
    tokens = trainer.prompt_sharing.tokens
    outputs = {}
    for kind in ("plain", "conditioned"):
        prompt_ids, prompt_mask, completion_ids, completion_mask = batch(kind)
        ids = torch.cat([prompt_ids, completion_ids], 1)
        attention = torch.cat([prompt_mask, completion_mask], 1)
        for counted in (False, True):
            with tokens.counting(counted), trainer.prompt_sharing.prompts(kind):
                logps = trainer._get_per_token_logps_and_entropies(
                    trainer.model, ids, attention, completion_ids.size(1)
                )[0]
            outputs.setdefault(kind, []).append(logps.detach())
    assert tokens.take() == {
        "tokens/loss_rows_plain": 29.0,
        "tokens/loss_forward_plain": float(plain),
        "tokens/loss_rows_conditioned": 37.0,
        "tokens/loss_forward_conditioned": float(conditioned),
    }
    for first, second in outputs.values():  # counting changes no number
        assert torch.equal(first, second)


def test_the_cache_form_and_its_per_row_refusal_are_counted_as_they_ran(
    model_dir, tmp_path, monkeypatch
):
    import contrastive_rlvr.shared_forward.sharing as sharing_module

    monkeypatch.setattr(sharing_module, "supports_packed_prefix", lambda model: (False, "test"))
    trainer = make_trainer(model_dir, make_config(tmp_path, bicc=True, share_plain_prompt=True))
    sharing = trainer.prompt_sharing
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch("plain")
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attention = torch.cat([prompt_mask, completion_mask], 1)
    kw = dict(batch_size=None, compute_aux_loss=False, extra={})
    with sharing.tokens.counting(), sharing.prompts("plain"):
        assert sharing.forward(trainer.model, ids, attention, 4, compute_entropy=False, **kw)
        # Entropies: the cache form refuses, TRL's per-row forward runs (rows' tokens).
        assert sharing.forward(trainer.model, ids, attention, 4, compute_entropy=True, **kw) is None
    assert sharing.tokens.take() == {
        "tokens/loss_rows_plain": 29.0 + 29.0,
        "tokens/loss_forward_plain": 23.0 + 29.0,
    }
