"""The loss object, chosen once from the config: which log-prob pass and objective,
the normalisers it passes, BiCC's mix, on hand-made micro-batches (no trainer)."""

from __future__ import annotations

import math

import pytest
import torch

from contrastive_rlvr.algorithms import get_recipe
from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.loss import (
    ContrastiveObjective,
    Loss,
    LossContext,
    MixedLoss,
    PolicyLogps,
    PolicyObjective,
    TRLLoss,
    build_loss,
    old_logps,
    reco_options,
    without_tool_tokens,
)


def config(tmp_path, **fields) -> RLVRConfig:
    return RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=2, max_completion_length=8,
        beta=0.0, **fields,
    )  # fmt: skip


def test_the_config_picks_the_pass_and_the_objective(tmp_path):
    # The recipes TRL has run TRL's loss, BiCC's on the conditioned prompt.
    for recipe, name in (
        ("grpo", "grpo"),
        ("dr_grpo", "dr_grpo"),
        ("dapo", "dapo"),
        ("gspo", "gspo"),
    ):
        loss = build_loss(config(tmp_path, recipe=recipe), get_recipe(recipe))
        assert isinstance(loss, TRLLoss) and loss.name == name and not loss.conditioned
        assert loss.logps.keys == ("prompt_ids", "prompt_mask")
    conditioned = build_loss(
        config(tmp_path, bicc=True, bicc_form="conditioned"), get_recipe("grpo")
    )
    assert conditioned.conditioned and conditioned.logps.keys[0] == "bicc_prompt_ids"
    # The others run the project's loss.
    loss = build_loss(config(tmp_path, recipe="gmpo"), get_recipe("gmpo"))
    assert loss.name == "gmpo" and loss.logps.keys == ("prompt_ids", "prompt_mask")
    loss = build_loss(
        config(tmp_path, recipe="gmpo", bicc=True, bicc_form="conditioned"), get_recipe("gmpo")
    )
    assert loss.logps.keys == ("bicc_prompt_ids", "bicc_prompt_mask") and loss.logps.conditioned
    assert isinstance(build_loss(config(tmp_path, bicc=True, bicc_mix=0.5), get_recipe("grpo")),
                      MixedLoss)  # fmt: skip
    conspo = build_loss(config(tmp_path, recipe="conspo"), get_recipe("conspo"))
    assert isinstance(conspo.objective, ContrastiveObjective)
    assert build_loss(config(tmp_path, reco=True), get_recipe("grpo")).name == "reco"
    gspo = config(tmp_path, recipe="gspo", verigate=True)
    assert build_loss(gspo, get_recipe("gspo")).name == "gspo_token"
    sampling = config(tmp_path, rcc=True, rcc_reference="sampling")
    assert build_loss(sampling, get_recipe("grpo")).objective.rcc.coef == 2.0


def test_trl_loss_reads_the_conditioned_prompt():
    seen, kinds = [], []

    def trl_loss(model, inputs, conditioned=False, on_logps=None):
        assert on_logps is None  # no RCC: TRL's own advantages
        seen.append(inputs)
        kinds.append(conditioned)  # the trainer's forward is told which prompts it reads
        return torch.tensor(1.5)

    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1),
        "bicc_prompt_ids": torch.full((2, 3), 9),
        "bicc_prompt_mask": torch.zeros(2, 3),
    }
    ctx = LossContext(logps=None, group_size=2, trl_loss=trl_loss)
    loss, metrics = TRLLoss("grpo", conditioned=True)(None, inputs, ctx)
    assert loss.item() == 1.5 and metrics == {}
    assert seen[0]["prompt_ids"].tolist() == [[9, 9, 9]] * 2
    assert seen[0]["prompt_mask"].sum() == 0 and inputs["prompt_ids"].tolist() == [[1], [1]]
    TRLLoss("grpo", conditioned=False)(None, inputs, ctx)
    assert seen[1] == inputs and seen[1] is not inputs  # a copy, the micro-batch untouched
    assert kinds == [True, False]


def test_tool_tokens_get_no_gradient_in_the_project_loss():
    inputs = {
        "completion_mask": torch.tensor([[1.0, 1.0, 0.0]]),
        "tool_mask": torch.tensor([[1, 0, 1]]),
    }
    assert without_tool_tokens(inputs)["completion_mask"].tolist() == [[1.0, 0.0, 0.0]]
    assert (
        without_tool_tokens({"completion_mask": inputs["completion_mask"]})["completion_mask"]
        is inputs["completion_mask"]
    )

    # Through a loss: the token under tool_mask 0 carries no gradient.
    def logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
        assert completion_mask.tolist() == [[1.0, 1.0, 0.0]]  # the forward keeps the full mask
        return logp

    logp = torch.zeros(1, 3, requires_grad=True)
    batch = {
        **inputs, "prompt_ids": torch.ones(1, 1, dtype=torch.long), "prompt_mask": torch.ones(1, 1),
        "completion_ids": torch.zeros(1, 3, dtype=torch.long),
    }  # fmt: skip
    Loss(PolicyLogps(conditioned=False), SumObjective(masked=True))(
        None, batch, LossContext(logps, 1)
    )[0].backward()
    assert logp.grad.tolist() == [[1.0, 0.0, 0.0]]


def test_normalisers_count_the_whole_window():
    objective = PolicyObjective(
        "dapo", get_recipe("dapo"), defaults={}, beta=0.0, clip_low=0.1, clip_high=None,
        agg=None, max_len=8, eps=1e-6,
    )  # fmt: skip
    inputs = {"completion_ids": torch.zeros(3, 2), "num_items_in_batch": torch.tensor(40.0)}
    ctx = LossContext(logps=None, group_size=3, accum=2, steps_per_generation=4, num_processes=2)
    options = objective.options(inputs, ctx, "ref_per_token_logps")
    # 40 tokens over 2 processes: 20 per process; this optimizer step holds 2 of the
    # generation's 4 micro-batches: 20 * 2 / 4 = 10 tokens. Rows: 3 per micro-batch * 2.
    assert options["num_tokens"].item() == 10.0 and options["num_rows"] == 6
    assert options["clip_low"] == 0.1 and "clip_high" not in options  # the recipe's own


def test_reco_normalisers_are_this_process_share():
    inputs = {
        "reco_weights": torch.tensor([0.5, 0.5]),
        "reco_weight_sum": torch.tensor(8.0),
        "reco_weighted_tokens": torch.tensor(2.0),
    }
    ctx = LossContext(logps=None, group_size=2, accum=2, steps_per_generation=4, num_processes=2)
    options = reco_options("max")(inputs, ctx)
    # share = accum / (steps_per_generation * processes) = 2 / 8.
    assert options["num_rows"].item() == 2.0
    assert options["num_tokens"].item() == 1.0  # 2 * 0.25 = 0.5, clamped to 1
    assert "variance_mean" not in options


def test_old_logps_guided_rows_take_their_sampling_logps():
    logp = torch.tensor([[-1.0], [-2.0]], requires_grad=True)
    assert (
        old_logps(logp, {}).tolist() == [[-1.0], [-2.0]] and not old_logps(logp, {}).requires_grad
    )
    inputs = {
        "old_per_token_logps": torch.tensor([[-3.0], [-4.0]]),
        "oc_guided": torch.tensor([True, False]),
        "oc_sampling_logps": torch.tensor([[-7.0], [0.0]]),
    }
    assert old_logps(logp, inputs).tolist() == [[-7.0], [-4.0]]


class SumObjective:
    """A stand-in objective: the sum of the log-probs (on the mask's tokens when
    ``masked``), x10 on the plain share."""

    name = "sum"
    reads = ("data.completion_mask",)  # the batch entries it reads, as every objective says

    def __init__(self, masked: bool = False) -> None:
        self.masked = masked

    def __call__(self, logp, inputs, ctx, *, plain=False):
        if self.masked:
            logp = logp * inputs["completion_mask"]
        return logp.sum() * (10.0 if plain else 1.0), {}


def test_mixed_loss_weights_the_two_prompts():
    def logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
        # 1 per token on the conditioned prompt (ids 9), 2 on the plain one (ids 1).
        assert share_prefix == bool((prompt_ids == 9).all())
        return torch.full(completion_ids.shape, 1.0 if share_prefix else 2.0)

    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1),
        "bicc_prompt_ids": torch.full((2, 3), 9),
        "bicc_prompt_mask": torch.ones(2, 3),
        "completion_ids": torch.zeros(2, 2, dtype=torch.long),
        "completion_mask": torch.ones(2, 2),
    }
    loss, _ = MixedLoss(SumObjective(), mix=0.25)(None, inputs, LossContext(logps, 2))
    # 0.25 * (4 tokens * 1) + 0.75 * 10 * (4 tokens * 2) = 1 + 60.
    assert loss.item() == pytest.approx(61.0)


def test_conspo_mix_is_the_same_loss_on_both_prompts():
    from contrastive_rlvr.algorithms import conspo_loss

    def logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False):
        # Row-dependent values so that ConSPO's scores differ between the two prompts.
        base = torch.tensor([[-0.5], [-2.0]]) * (1.0 if share_prefix else 3.0)
        return base.expand(-1, completion_ids.size(1)).clone()

    inputs = {
        "prompt_ids": torch.ones(2, 1, dtype=torch.long),
        "prompt_mask": torch.ones(2, 1),
        "bicc_prompt_ids": torch.full((2, 3), 9),
        "bicc_prompt_mask": torch.ones(2, 3),
        "completion_ids": torch.zeros(2, 2, dtype=torch.long),
        "completion_mask": torch.ones(2, 2),
        "rewards": torch.tensor([1.0, 0.0]),
        "conspo_groups": torch.tensor(1.0),
    }
    objective = ContrastiveObjective(tau=10.0, max_margin=0.0, warmup=0.3, threshold=0.5)
    mixed, _ = MixedLoss(objective, mix=0.5)(None, inputs, LossContext(logps, 2))
    mask = inputs["completion_mask"]
    cond, _ = conspo_loss(torch.tensor([[-0.5] * 2, [-2.0] * 2]), mask, inputs["rewards"], 2)
    plain, _ = conspo_loss(torch.tensor([[-1.5] * 2, [-6.0] * 2]), mask, inputs["rewards"], 2)
    assert cond.item() != pytest.approx(plain.item())
    assert mixed.item() == pytest.approx(0.5 * cond.item() + 0.5 * plain.item())


def _conspo_window_grad(splits, *, num_processes: int = 1):
    """The gradient of ConSPO's loss on a window of 2 groups of G = 2 (group 0 usable, group
    1 all wrong), summed over the micro-batches ``splits`` (row slices), per process."""
    objective = ContrastiveObjective(tau=10.0, max_margin=0.0, warmup=0.3, threshold=0.5)
    theta = torch.tensor([[-0.5], [-2.0], [-1.0], [-3.0]], requires_grad=True)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    accum = len(splits) // num_processes
    ctx = LossContext(None, 2, accum=accum, steps_per_generation=accum, num_processes=num_processes)
    grads = []
    for rows in splits:
        inputs = {
            "completion_mask": torch.ones_like(theta[rows]),
            "rewards": rewards[rows],
            "conspo_groups": torch.tensor(1.0),  # the stage's count over the whole window
        }
        loss, _ = objective(theta[rows], inputs, ctx)
        grads.append(torch.autograd.grad(loss, theta)[0])
    return grads


def test_conspo_gradient_is_the_same_for_any_split():
    from contrastive_rlvr.algorithms import conspo_loss

    # Independent: ConSPO's window mean on the whole window at once (its own count).
    theta = torch.tensor([[-0.5], [-2.0], [-1.0], [-3.0]], requires_grad=True)
    whole, _ = conspo_loss(theta, torch.ones(4, 1), torch.tensor([1.0, 0.0, 0.0, 0.0]), 2)
    expected = torch.autograd.grad(whole, theta)[0]
    # By hand: one usable group, P = e^(-0.05) / (e^(-0.05) + e^(-0.2)), dL/ds+ = -(1 - P).
    p = math.exp(-0.05) / (math.exp(-0.05) + math.exp(-0.2))
    assert expected[0, 0].item() == pytest.approx(-(1 - p))
    one = _conspo_window_grad([slice(0, 4)])
    two = _conspo_window_grad([slice(0, 2), slice(2, 4)])
    torch.testing.assert_close(one[0], expected)
    torch.testing.assert_close(two[0] + two[1], expected)  # accumulated micro-batches
    # Two processes with one group each: DDP averages their gradients.
    procs = _conspo_window_grad([slice(0, 2), slice(2, 4)], num_processes=2)
    torch.testing.assert_close((procs[0] + procs[1]) / 2, expected)


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        # R = [1, 0, 0, 0], delta = logp - old = [0, 0, 0, 5] (one token each):
        # mean R = 0.25, Cov(R, delta) = E[R delta] - E[R] E[delta] = 0 - 0.25 * 1.25
        # = -0.3125, so b* = 0.25 + 2 * (-0.3125) = -0.375 and Dr.GRPO's A = R - b*.
        ("none", [1.375, 0.375, 0.375, 0.375]),
        # Bounded to the group's reward range [0, 1]: b* = 0, A = R.
        ("reward_range", [1.0, 0.0, 0.0, 0.0]),
    ],
)
def test_sampling_rcc_in_the_loss_takes_the_bound(tmp_path, monkeypatch, bound, expected):
    import contrastive_rlvr.trainer.loss.objectives as objectives_module

    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=4, max_completion_length=8,
        per_device_train_batch_size=4, beta=0.0, recipe="dr_grpo", rcc=True,
        rcc_reference="sampling", rcc_bound=bound,
    )  # fmt: skip
    loss = build_loss(cfg, get_recipe("dr_grpo"))
    assert isinstance(loss.objective, PolicyObjective)
    seen = {}

    def capture(name, logp, old, advantages, mask, **options):
        seen["advantages"] = advantages
        return logp.sum() * 0, {}

    monkeypatch.setattr(objectives_module, "policy_loss", capture)
    logp = torch.tensor([[0.0], [0.0], [0.0], [5.0]])
    inputs = {
        "completion_mask": torch.ones(4, 1),
        "completion_ids": torch.zeros(4, 1, dtype=torch.long),
        "old_per_token_logps": torch.zeros(4, 1),
        "advantages": torch.full((4,), 1e9),  # loud: the loss recomputes them
        "rewards": torch.tensor([1.0, 0.0, 0.0, 0.0]),
        "num_items_in_batch": torch.tensor(4.0),
    }
    loss.objective(logp, inputs, LossContext(logps=None, group_size=4))
    torch.testing.assert_close(seen["advantages"], torch.tensor(expected))


def _bicc_rcc_loss(tmp_path, monkeypatch, mix: float):
    """BiCC's loss with RCC's sampling reference (Dr.GRPO, b* unbounded), and the
    advantages every ``policy_loss`` call received."""
    import contrastive_rlvr.trainer.loss.objectives as objectives_module

    cfg = RLVRConfig(
        output_dir=str(tmp_path), report_to="none", num_generations=4, max_completion_length=8,
        per_device_train_batch_size=4, beta=0.0, recipe="dr_grpo", rcc=True,
        rcc_reference="sampling", rcc_bound="none", bicc=True, bicc_mix=mix,
        bicc_ratio_mode="paper",
    )  # fmt: skip
    loss = build_loss(cfg, get_recipe("dr_grpo"))
    seen = []

    def capture(name, logp, old, advantages, mask, **options):
        seen.append(advantages)
        return logp.sum() * 0, {}

    monkeypatch.setattr(objectives_module, "policy_loss", capture)
    return loss, seen


PLAIN = torch.tensor([[0.0], [0.0], [0.0], [5.0]])  # log pi_theta(o | q)
CONDITIONED = torch.tensor([[3.0], [-1.0], [2.0], [-4.0]])  # log pi_theta(o | [q; O])
UNCORRECTED = [0.75, -0.25, -0.25, -0.25]  # delta = 0: b* = mean R = 0.25, A = R - b*
# delta = [0, 0, 0, 5]: Cov(R, delta) = 0 - 0.25 * 1.25 = -0.3125, b* = 0.25 - 0.625.
CORRECTED = [1.375, 0.375, 0.375, 0.375]


def _bicc_logps(
    model, prompt_ids, prompt_mask, completion_ids, completion_mask, share_prefix=False
):
    return (CONDITIONED if share_prefix else PLAIN).clone().requires_grad_()


def _bicc_inputs(**extra):
    return {
        "prompt_ids": torch.ones(4, 1, dtype=torch.long),
        "prompt_mask": torch.ones(4, 1),
        "bicc_prompt_ids": torch.full((4, 3), 9),
        "bicc_prompt_mask": torch.ones(4, 3),
        "completion_ids": torch.zeros(4, 1, dtype=torch.long),
        "completion_mask": torch.ones(4, 1),
        # paper mode: the ratio's pi_old is the plain prompt's (here 0 per token)
        "old_per_token_logps": torch.zeros(4, 1),
        "advantages": torch.full((4,), 1e9),  # loud: the loss recomputes them
        "rewards": torch.tensor([1.0, 0.0, 0.0, 0.0]),
        "num_items_in_batch": torch.tensor(4.0),
        **extra,
    }


@pytest.mark.parametrize("mix", [1.0, 0.5])
def test_bicc_rcc_sampling_delta_is_zero_on_policy(tmp_path, monkeypatch, mix):
    # On policy (TRL kept no old log-probs, so no plain_old_per_token_logps): pi_theta is
    # pi_old on the plain prompt, delta = 0 for every row and both shares, whatever the
    # context does to the conditioned log-probs.
    loss, seen = _bicc_rcc_loss(tmp_path, monkeypatch, mix)
    loss(None, _bicc_inputs(), LossContext(logps=_bicc_logps, group_size=4))
    assert len(seen) == (1 if mix == 1.0 else 2)
    for advantages in seen:
        torch.testing.assert_close(advantages, torch.tensor(UNCORRECTED))


@pytest.mark.parametrize("mix", [1.0, 0.5])
def test_bicc_rcc_sampling_delta_is_the_plain_prompt_shift(tmp_path, monkeypatch, mix):
    # Off policy: delta = log pi_theta(o | q) - log pi_old(o | q) = PLAIN - 0, the same
    # RCC advantages on the conditioned and (mix < 1) the plain share.
    loss, seen = _bicc_rcc_loss(tmp_path, monkeypatch, mix)
    inputs = _bicc_inputs(plain_old_per_token_logps=torch.zeros(4, 1))
    loss(None, inputs, LossContext(logps=_bicc_logps, group_size=4))
    assert len(seen) == (1 if mix == 1.0 else 2)
    for advantages in seen:
        torch.testing.assert_close(advantages, torch.tensor(CORRECTED))
