"""BiCC's conditioned-prompt stage on a hand-made batch."""

from __future__ import annotations

import pytest
import torch
from stage_utils import context, make_batch, marker_logps

from contrastive_rlvr.algorithms.bicc import EncodedTemplate
from contrastive_rlvr.trainer.stages import ConditionedPrompts

# Framing pieces as single, recognisable token ids.
TEMPLATE = EncodedTemplate(
    header_correct=[90], header_wrong=[91], item_prefixes=[[80], [81]], item_suffix=[70],
    footer=[60],
)  # fmt: skip


def stage(**overrides) -> ConditionedPrompts:
    values = dict(
        ratio_mode="paper",
        context_ratio=0.5,
        max_seq_len=100,
        truncation="middle",
        placement="after_prompt",
        threshold=0.5,
        strip_token_ids={0},
        keep_plain=False,
        reference_kl=False,
    )
    values.update(overrides)
    return ConditionedPrompts(TEMPLATE, **values)


def rows(ids, mask):  # noqa: ANN001
    return [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]


def test_each_row_sees_the_opposite_partition_and_paper_old():
    # G = 2, a mixed group: row 0 right ([10]), row 1 wrong ([20, 21]).
    batch = make_batch([[1, 2], [1, 2]], [[10], [20, 21]], [1, 0])
    batch.shared["old_logps"] = torch.tensor([[-0.1, -0.2], [-0.3, -0.4]])
    ctx, logged = context(2)
    stage()(batch, ctx)
    got = rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"])
    # [q ; header ; "Attempt 1" ; completion ; suffix ; footer]
    assert got[0] == [1, 2, 91, 80, 20, 21, 70, 60]  # the right row sees the wrong one
    assert got[1] == [1, 2, 90, 80, 10, 70, 60]  # the wrong row sees the right one
    assert logged["bicc/conditioned_frac"] == [1.0]
    assert logged["bicc/context_tokens"] == [5.5]  # (6 + 5) / 2 tokens added
    # Paper ratio: pi_old is the plain prompt's.
    assert batch.data["old_per_token_logps"] is batch.shared["old_logps"]


def test_collapsed_group_keeps_its_prompt():
    batch = make_batch([[1, 2], [1, 2]], [[10], [11]], [1, 1])
    batch.shared["old_logps"] = torch.zeros(2, 1)
    ctx, logged = context(2)
    stage()(batch, ctx)
    assert rows(batch.data["bicc_prompt_ids"], batch.data["bicc_prompt_mask"]) == [[1, 2]] * 2
    assert logged["bicc/conditioned_frac"] == [0.0]


def test_consistent_mode_takes_old_and_reference_on_the_conditioned_prompt():
    old = torch.tensor([[-9.0], [-9.0]])
    ref = torch.tensor([[-8.0], [-8.0]])
    batch = make_batch(
        [[1, 2], [1, 2]], [[10], [20]], [1, 0], old_per_token_logps=old, ref_per_token_logps=ref
    )
    calls = []

    def recording(*tensors, share_prefix=False):
        calls.append(share_prefix)
        return marker_logps(*tensors)

    ctx, _ = context(2, policy_logps=recording, reference_logps=recording)
    stage(ratio_mode="consistent", keep_plain=True, reference_kl=True)(batch, ctx)
    out = batch.data
    # The plain ones are kept for bicc_mix's plain share.
    assert out["plain_old_per_token_logps"] is old and out["plain_ref_per_token_logps"] is ref
    # Conditioned prompt of row 0: [1, 2, 91, 80, 20, 70, 60], sum 324 -> -3.24.
    assert out["old_per_token_logps"][0, 0].item() == pytest.approx(-3.24)
    assert out["ref_per_token_logps"][0, 0].item() == pytest.approx(-3.24)
    assert calls == [True, True]  # one prefix encoding per distinct prompt


def test_budget_is_capped_by_the_model_positions():
    s = stage(max_seq_len=1000, context_ratio=0.4)
    assert s.budget_base(10, 6, None) == 1000
    # 64 positions - 10 prompt - 6 completion = 48 tokens of room -> 48 / 0.4 = 120.
    assert s.budget_base(10, 6, 64) == 120
