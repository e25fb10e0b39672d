"""The engine-free half of the verl integration: group layout, ConSPO targets, BiCC rows.

These run in the main environment (no verl import).
"""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import BiCCTemplate, group_advantages
from contrastive_rlvr.algorithms.bicc_rows import BiCCRowBuilder, end_token_ids, is_chat
from contrastive_rlvr.integrations.verl.groups import (
    bicc_rows,
    check_conspo_layout,
    decode_conspo_targets,
    encode_conspo_targets,
    group_rows,
    grouped_apply,
    size_classes,
    whole_group_order,
)

torch.set_num_threads(1)


def test_group_rows_and_size_classes_follow_first_appearance():
    index = ["b", "a", "b", "pad", "a"]
    assert group_rows(index) == [[0, 2], [1, 4], [3]]
    classes = size_classes(index)
    # sizes ascending: the lone padding row, then the two pairs b (rows 0, 2) and a (1, 4)
    assert [(order.tolist(), g) for order, g in classes] == [([3], 1), ([0, 2, 1, 4], 2)]


def test_grouped_apply_matches_hand_grpo_on_interleaved_groups():
    # Groups u1 = rows 0, 2 with R = (1, 0) and u2 = rows 1, 3 with R = (0, 0), plus a
    # lone padding row. u1: mean 0.5, Bessel std sqrt(0.5) = 0.70711 -> A = +-0.5 / 0.70711.
    index = ["u1", "u2", "u1", "u2", "pad"]
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 5.0])
    adv = grouped_apply(index, lambda g, r: group_advantages(r, g), rewards)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    # the padding row (a group of one) gets 0, whatever its reward
    assert torch.allclose(adv, torch.tensor([a, 0.0, -a, 0.0, 0.0]), atol=1e-6)


def test_conspo_targets_round_trip_and_refuse_foreign_advantages():
    positive = torch.tensor([True, False, False, True])
    targets = encode_conspo_targets(positive, 0.005)
    assert targets.tolist() == pytest.approx([1.005, -1.0, -1.0, 1.005])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.float32)
    # token-level as verl stores them: the row value on completion tokens, 0 on padding
    token = targets.unsqueeze(1) * mask
    got_pos, margin, scale = decode_conspo_targets(token, mask)
    assert got_pos.tolist() == positive.tolist()
    assert margin == pytest.approx(0.005, abs=1e-6) and scale == 1.0
    # the window scale rides on the negatives: 3 groups per usable group -> -3
    scaled = encode_conspo_targets(positive, 0.005, 3.0)
    assert scaled.tolist() == pytest.approx([1.005, -3.0, -3.0, 1.005])
    assert decode_conspo_targets(scaled.unsqueeze(1) * mask, mask)[2] == pytest.approx(3.0)
    with pytest.raises(ValueError, match="crlvr_conspo"):  # negatives disagree on the scale
        decode_conspo_targets(torch.tensor([[1.005], [-3.0], [-2.0]]), torch.ones(3, 1))
    with pytest.raises(ValueError, match="scale"):
        encode_conspo_targets(positive, 0.005, 0.5)
    # GRPO advantages (+-0.7) are not ConSPO targets
    with pytest.raises(ValueError, match="crlvr_conspo"):
        decode_conspo_targets(torch.tensor([[0.7], [-0.7]]), torch.ones(2, 1))
    with pytest.raises(ValueError, match="margin"):
        encode_conspo_targets(positive, -0.1)


class _Template:
    """Token ids of the default BiCC template pieces: one sentinel id each."""

    IDS = {
        BiCCTemplate.header_correct: [901],
        BiCCTemplate.header_wrong: [902],
        "Attempt 1: ": [911],
        "Attempt 2: ": [912],
        "\n": [920],
        "Your attempt:\n": [930],
    }

    @classmethod
    def encoded(cls, max_items: int = 2):
        return BiCCTemplate().encode(lambda s: cls.IDS[s], max_items)


def test_bicc_rows_condition_each_row_on_the_opposite_side_in_batch_order():
    # Interleaved batch (as after verl's balancing): group a = rows 0, 2; b = rows 1, 3.
    eos = 99
    prompts = [torch.tensor([1, 2]), torch.tensor([3]), torch.tensor([1, 2]), torch.tensor([3])]
    responses = [
        torch.tensor([10, 11, eos]),
        torch.tensor([20, eos]),
        torch.tensor([12, eos]),
        torch.tensor([21, 22, eos]),
    ]
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    rows = bicc_rows(
        prompts,
        responses,
        rewards,
        ["a", "b", "a", "b"],
        _builder(max_seq_len=40, strip_token_ids=frozenset({eos})),
        pad_token_id=0,
    )
    # Budget 20 tokens: each context fits whole. Row 0 (correct) sees the wrong row 2's
    # text without its EOS: header_wrong, "Attempt 1: ", 12, "\n", footer.
    assert rows.prompts[0].tolist() == [1, 2, 902, 911, 12, 920, 930]
    # Row 2 (wrong) sees the correct row 0: header_correct, "Attempt 1: ", 10, 11, "\n", footer.
    assert rows.prompts[2].tolist() == [1, 2, 901, 911, 10, 11, 920, 930]
    # Group b is all wrong: no conditioning.
    assert rows.prompts[1].tolist() == [3] and rows.prompts[3].tolist() == [3]
    assert rows.context_tokens.tolist() == [5, 0, 6, 0]
    assert rows.budget == 20


def _builder(**overrides) -> BiCCRowBuilder:
    values = dict(
        template=_Template.encoded(),
        context_ratio=0.5,
        max_seq_len=None,
        max_completion_length=10,
        truncation="middle",
        placement="after_prompt",
        threshold=0.5,
    )
    values.update(overrides)
    return BiCCRowBuilder(**values)


def test_bicc_rows_budget_is_the_batchs_longest_prompt_without_padding_rows():
    # Groups a (prompt 4 tokens) and b (2 tokens), and a lone padding row of 9 tokens
    # (verl's upsampling): L = longest real prompt 4 + max_completion_length 10 = 14,
    # budget floor(0.5 * 14) = 7 attempt tokens (framing 'outside', the builder's default:
    # header, "Attempt 1: ", "\n" and footer on top). The padding row would make it
    # floor(0.5 * 19) = 9, which keeps row 0's 9 tokens whole.
    prompts = [torch.tensor([1, 2, 3, 4])] * 2 + [torch.tensor([5, 6])] * 2 + [torch.arange(9)]
    responses = [torch.tensor(r) for r in (list(range(10, 19)), [14], [15], [16], [17])]
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0])
    rows = bicc_rows(prompts, responses, rewards, list("aabbp"), _builder(), pad_token_id=0)
    assert rows.budget == 7
    # Row 1 (wrong) sees row 0 cut to 7 tokens by the middle rule: head 4, tail 3.
    assert rows.prompts[1].tolist() == [1, 2, 3, 4, 901, 911, 10, 11, 12, 13, 16, 17, 18, 920, 930]
    assert rows.prompts[4].tolist() == list(range(9))
    # 4 framing tokens + 1 attempt token, + 7 for row 1; the padding row adds nothing
    assert rows.context_tokens.tolist() == [5, 11, 5, 5, 0]


def test_whole_group_order_keeps_groups_contiguous_per_rank():
    rows = group_rows(["a", "b", "c", "d", "a", "b", "c", "d"])  # a=[0,4], b=[1,5], ...
    order = whole_group_order([[2, 0], [1, 3]], rows)
    assert order == [2, 6, 0, 4, 1, 5, 3, 7]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"shuffle": True}, "shuffle=False"),
        ({"use_dynamic_bsz": True}, "use_dynamic_bsz=False"),
        ({"micro_batch_size_per_gpu": 6}, "multiple of actor_rollout_ref.rollout.n=4"),
        ({"micro_batch_size_per_gpu": None}, "ppo_micro_batch_size_per_gpu"),
        ({"dp_size": 3}, "data-parallel size"),
    ],
)
def test_check_conspo_layout_names_the_setting(overrides, message):
    settings = dict(
        group_size=4,
        shuffle=False,
        use_dynamic_bsz=False,
        micro_batch_size_per_gpu=8,
        mini_batch_size=16,
        dp_size=2,
    )
    check_conspo_layout(**settings)  # the good layout passes
    with pytest.raises(ValueError, match=message):
        check_conspo_layout(**{**settings, **overrides})


def test_end_token_ids_follow_trls_rule():
    # TRL's GRPOTrainer: the generation config's EOS ids, the tokenizer's first if missing.
    assert end_token_ids(1, [2]) == [1, 2]
    assert end_token_ids(1, 2) == [1, 2]
    assert end_token_ids(1, None) == [1]
    assert end_token_ids(1, [2, 1]) == [2, 1]
    assert end_token_ids(None, [5]) == [5]


def test_is_chat_tells_messages_from_text():
    assert is_chat([{"role": "user", "content": "q"}])
    assert not is_chat("q") and not is_chat([]) and not is_chat([{"content": "q"}])
