"""OC-GRPO: hints, the off-context importance weight, the loss and the mixing rule,
against hand-worked values."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import (
    all_fail_groups,
    guided_prompt,
    hint_prefix,
    oc_importance_weight,
    oc_merge,
    policy_loss,
)

torch.set_num_threads(1)
LOUD = 37.0


def close(actual: torch.Tensor, expected, **kw) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, **kw)


def test_hint_prefix_by_characters_and_words():
    solution = "14+3=17,17+2=19"  # 15 characters
    assert hint_prefix(solution, 0.5) == "14+3=17"  # floor(7.5) = 7
    assert hint_prefix(solution, 0.0) == ""
    assert hint_prefix(solution, 1.0) == solution
    text = "First add 5 and 9.  Then add 3."  # 8 words
    assert hint_prefix(text, 0.5, unit="words") == "First add 5 and"  # 4 words
    assert hint_prefix(text, 0.45, unit="words") == "First add 5"  # floor(3.6) = 3
    # the solution's own spacing is kept
    assert hint_prefix(text, 6 / 8, unit="words") == "First add 5 and 9.  Then"
    with pytest.raises(ValueError, match=r"must be in \[0, 1\], got 1.5"):
        hint_prefix(solution, 1.5)


def test_guided_prompt_contains_the_hint_and_ends_with_the_prompt():
    prompt = "5+9+3="
    guided = guided_prompt(prompt, hint_prefix("14+3=17", 0.5))
    assert guided == "Hint: 14+\n5+9+3="
    assert guided.endswith(prompt)
    assert guided_prompt("Q", "h", template="{prompt} [{hint}]") == "Q [h]"
    with pytest.raises(ValueError, match="must contain"):
        guided_prompt("Q", "h", template="{prompt}")


def _weights_case():
    logp = torch.log(torch.tensor([[0.2, 0.9, 0.5]]))
    old = torch.log(torch.tensor([[0.4, 0.3, 0.5]]))
    mask = torch.tensor([[1, 1, 0]])
    logp[0, 2], old[0, 2] = LOUD, -LOUD
    return logp, old, mask


def test_oc_importance_weight_levels_and_truncation():
    logp, old, mask = _weights_case()
    # token weights 0.2/0.4 = 0.5 and 0.9/0.3 = 3, truncated at 2
    close(oc_importance_weight(logp, old, mask), [[0.5, 2.0, 0.0]])
    close(oc_importance_weight(logp, old, mask, max_weight=10.0), [[0.5, 3.0, 0.0]])
    # sequence: (0.2 * 0.9) / (0.4 * 0.3) = 0.18 / 0.12 = 1.5; geometric: sqrt(1.5)
    close(oc_importance_weight(logp, old, mask, level="sequence"), [[1.5, 1.5, 0.0]])
    g = math.sqrt(1.5)
    close(oc_importance_weight(logp, old, mask, level="geometric"), [[g, g, 0.0]])
    close(
        oc_importance_weight(logp, old, mask, level="geometric", max_weight=1.2), [[1.2, 1.2, 0.0]]
    )
    with pytest.raises(ValueError, match="max_weight must be > 0"):
        oc_importance_weight(logp, old, mask, max_weight=0.0)


def test_oc_grpo_loss_value_and_gradient_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.5], [0.2, 0.9]])).requires_grad_()
    old = torch.log(torch.tensor([[0.5, 0.5], [0.4, 0.3]]))  # row 1: guided sampling
    mask = torch.ones(2, 2)
    adv = torch.tensor([-1.0, 1.0])
    guided = torch.tensor([False, True])
    loss, metrics = policy_loss("oc_grpo", logp, old, adv, mask, guided=guided)
    # row 0 (plain, on-policy, rho = 1): -min(rho A, clip(rho) A) = 1 per token, mean 1.
    # row 1 (guided): -w A with w = (0.5, min(3, 2) = 2), mean -1.25.
    # seq-mean-token-mean: (1 - 1.25) / 2.
    close(loss, -0.125)
    loss.backward()
    # row 0: d(-rho A)/dl = -rho A = 1, over 2 tokens and 2 rows -> 0.25;
    # row 1: -w A / 4 = (-0.5/4, -2/4): the truncated weight is a constant factor.
    close(logp.grad, [[0.25, 0.25], [-0.125, -0.5]])
    close(metrics["oc/guided_frac"], 0.5)
    close(metrics["oc/weight_mean"], 1.25)
    close(metrics["oc/truncated_frac"], 0.5)


def test_oc_grpo_without_guided_rows_is_the_parent_loss():
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(4, 5, 3), -1)[..., 0]
    old = logp + 0.3 * torch.randn(4, 5)
    mask = torch.ones(4, 5)
    mask[2, 3:] = 0
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])
    for parent, options in (
        ("grpo", {}),
        ("dapo", {"clip_high": 0.28, "agg": "token-mean"}),
        ("dr_grpo", {"agg": "seq-mean-token-sum-norm"}),
    ):
        ours, _ = policy_loss(
            "oc_grpo", logp, old, adv, mask, guided=torch.zeros(4, dtype=bool), **options
        )
        theirs, _ = policy_loss(parent, logp, old, adv, mask)
        close(ours, theirs)


def test_all_fail_groups():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    close(all_fail_groups(rewards, 4), [False, True])


def test_oc_merge_replace_and_append():
    rewards = torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])  # G=2: groups 0 and 2 fail
    guided = torch.tensor([1.0, 0.0, 0.0, 0.0])  # guided group for 0 rescued, for 2 not
    plan = oc_merge(rewards, guided, 2)
    # replace: rows of group 0 come from guided rows 6, 7 of cat([batch (6); guided (4)])
    close(plan.rows, [6, 7, 2, 3, 4, 5])
    close(plan.guided, [True, True, False, False, False, False])
    close(plan.rewards, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    close(plan.rescued, [True, False])
    close(plan.metrics["oc/fail_frac"], 2 / 3)
    close(plan.metrics["oc/rescued_frac"], 0.5)
    close(plan.metrics["oc/guided_rows_frac"], 2 / 6)
    plan = oc_merge(rewards, guided, 2, mode="append")
    close(plan.rows, [0, 1, 2, 3, 4, 5, 6, 7])
    close(plan.guided, [False] * 6 + [True] * 2)
    close(plan.rewards, [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match=r"guided_rewards must have shape \(4,\)"):
        oc_merge(rewards, torch.zeros(2), 2)
    nothing = oc_merge(torch.ones(4), torch.zeros(0), 2)
    close(nothing.metrics["oc/rescued_frac"], 0.0)
    close(nothing.rows, [0, 1, 2, 3])
