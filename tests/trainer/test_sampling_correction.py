"""vLLM's importance-sampling correction and the off-policy mask in the project's loss,
against TRL's own ``_compute_loss`` on the recipes where both run (grpo, dr_grpo, dapo,
gspo), with injected sampling log-probs; GMPO and ConSPO against hand-worked weights.

TRL computes ``importance_sampling_ratio`` at scoring time; here it is built from the
injected sampling log-probs with TRL's formulas written out below (per token or per
sequence, truncated or masked), and both losses read the same batch.
"""

from __future__ import annotations

import math

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model
from trl import GRPOTrainer

from contrastive_rlvr.algorithms import conspo_loss, off_policy_mask, policy_loss
from contrastive_rlvr.algorithms.sampling_correction import corrected_advantages
from contrastive_rlvr.trainer.loss import (
    Loss,
    PolicyLogps,
    SamplingCorrection,
    _policy_objective,
)

B, P, T = 4, 3, 5
CLIP_MIN, CLIP_MAX = 0.8, 1.25
MODES = ["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def is_ratio(old: torch.Tensor, sampling: torch.Tensor, mask: torch.Tensor, mode: str):
    """TRL 1.16's ratio (grpo_trainer.py, _generate_and_score_completions), written out."""
    diff = torch.nan_to_num((old - sampling) * mask, nan=0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True)  # (B, 1)
    ratio = torch.exp(diff)
    if mode.endswith("truncate"):
        return ratio.clamp(min=CLIP_MIN, max=CLIP_MAX)
    return ratio.masked_fill((ratio < CLIP_MIN) | (ratio > CLIP_MAX), 0.0)


def batch(trainer) -> dict:
    """Off-policy micro-batch: old 0.3 x (-1)^t off the policy, sampling log-probs off old
    by row-dependent amounts (some rows past the clip bounds, one NaN token)."""
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    inputs = {
        "prompt_ids": torch.randint(3, vocab, (B, P), generator=g),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (B, T), generator=g),
        "completion_mask": mask,
        "advantages": torch.tensor([1.0, -0.5, 0.8, -1.2]),
        "num_items_in_batch": mask.sum(),
    }
    with torch.no_grad():
        logp = trainer._logps(trainer.model, inputs["prompt_ids"], inputs["prompt_mask"],
                              inputs["completion_ids"], mask)  # fmt: skip
    shift = 0.3 * torch.tensor([(-1.0) ** t for t in range(T)])
    old = (logp + shift).masked_fill(mask == 0, 0.0)
    offsets = torch.tensor([[0.05], [-0.4], [0.3], [0.1]]) * torch.linspace(1, 2, T)
    sampling = (old + offsets).masked_fill(mask == 0, 0.0)
    sampling[0, 2] = math.nan  # a token vLLM could not score
    inputs.update(old_per_token_logps=old, sampling_per_token_logps=sampling)
    return inputs


def loss_and_grad(trainer, inputs: dict) -> tuple[float, torch.Tensor]:
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad = trainer.model.lm_head.weight.grad.clone()
    trainer.model.zero_grad()
    return loss.item(), grad


def build(model_dir, tmp_path, recipe: str, threshold: float | None):
    extra = {"dynamic_sampling": False, "overlong_punishment": False} if recipe == "dapo" else {}
    config = make_config(
        tmp_path, recipe=recipe, per_device_train_batch_size=B, max_completion_length=T,
        off_policy_mask_threshold=threshold, **extra,
    )  # fmt: skip
    trainer = make_trainer(model_dir, config)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop
    # vLLM is not installed on CPU: switch TRL's loss to the correction the way a vLLM run
    # has it (these are the attributes TRL's _compute_loss reads).
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    return trainer


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("recipe", ["grpo", "dr_grpo", "dapo", "gspo"])
def test_project_loss_applies_the_correction_as_trl(model_dir, tmp_path, recipe, mode):
    threshold = 0.05 if mode == "token_truncate" else None
    trainer = build(model_dir, tmp_path, recipe, threshold)
    inputs = batch(trainer)
    mask = inputs["completion_mask"]
    inputs["importance_sampling_ratio"] = is_ratio(
        inputs["old_per_token_logps"], inputs["sampling_per_token_logps"], mask, mode
    )
    trl = loss_and_grad(trainer, inputs)  # TRL's own loss (the recipe's route)
    objective = _policy_objective(trainer.args, trainer.recipe, None)
    objective.correction = SamplingCorrection(importance_sampling=True, mask_threshold=threshold)
    trainer.loss = Loss(PolicyLogps(conditioned=False), objective)
    ours = loss_and_grad(trainer, inputs)
    assert ours[0] == pytest.approx(trl[0], rel=1e-5, abs=1e-7)
    torch.testing.assert_close(ours[1], trl[1], rtol=1e-4, atol=1e-7)
    # The correction changes the loss (so the comparison could fail).
    objective.correction = None
    plain = loss_and_grad(trainer, inputs)
    assert plain[0] != pytest.approx(trl[0], rel=1e-4)


def test_off_policy_mask_is_trls_formula():
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(6, 4, generator=g) * 3
    sampling = logp + torch.randn(6, 4, generator=g) * 0.5
    sampling[2, 1] = math.nan
    mask = torch.tensor([[1, 1, 1, 1]] * 3 + [[1, 1, 0, 0]] * 3)
    adv = torch.tensor([1.0, -1.0, -0.5, 0.0, -2.0, -0.1]).unsqueeze(1)
    trl = GRPOTrainer.get_off_policy_mask(adv, logp, sampling, mask, off_policy_threshold=0.1)
    ours = off_policy_mask(adv, logp, sampling, mask, threshold=0.1)
    assert torch.equal(ours, trl)
    # By hand, row 1: A < 0 and its mean KL decides.
    kl = ((sampling[1] - logp[1]) * mask[1]).sum() / 4
    assert ours[1, 0] == float(kl <= 0.1)
    assert ours[0, 0] == 1 and ours[3, 0] == 1  # A >= 0 always kept


def test_gmpo_takes_each_rows_mean_weight():
    # GMPO is per row: the weight is the row's mean of w over its scored tokens.
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, 9.0]], requires_grad=True)
    old = logp.detach() + 0.1
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    w = torch.tensor([[1.0, 0.5, 0.0], [2.0, 1.0, 7.0]])  # 7.0 sits on padding
    corrected = corrected_advantages(adv, w, mask, per_row=True)
    assert torch.allclose(corrected, torch.tensor([1.0 * 0.5, -2.0 * 1.5]))
    loss, _ = policy_loss("gmpo", logp, old, corrected, mask)
    # GMPO by hand: d = -0.1 everywhere (inside the 0.4 clip), weight e^-0.1 per row.
    expected = -(0.5 * math.exp(-0.1) + -3.0 * math.exp(-0.1)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_conspo_weights_positives_and_negatives():
    # One group of 3: row 0 positive, rows 1, 2 negative; scores are the row means.
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -2.0], [-0.5, -0.5]], requires_grad=True)
    mask = torch.ones(3, 2)
    rewards = torch.tensor([1.0, 0.0, 0.0])
    tau = 2.0
    w = torch.tensor([0.5, 2.0, 0.0])  # row 2 dropped (an off-policy negative)
    loss, _ = conspo_loss(logp, mask, rewards, 3, tau=tau, row_weights=w)
    # log P_0 = s0/tau - log(e^{s0/tau} + 2 e^{s1/tau}); objective = tau * 0.5 * log P_0.
    s0, s1 = -1.0, -2.0
    log_p0 = s0 / tau - math.log(math.exp(s0 / tau) + 2.0 * math.exp(s1 / tau))
    assert loss.item() == pytest.approx(-tau * 0.5 * log_p0, rel=1e-6)
    loss.backward()
    assert logp.grad[2].abs().sum() == 0  # the dropped negative gets no gradient
    # Weights of 1 are the paper's loss.
    same, _ = conspo_loss(logp, mask, rewards, 3, tau=tau, row_weights=torch.ones(3))
    paper, _ = conspo_loss(logp, mask, rewards, 3, tau=tau)
    assert same.item() == pytest.approx(paper.item(), rel=1e-7)
    # No negative left with a weight: no usable group.
    none, _ = conspo_loss(logp, mask, rewards, 3, tau=tau, row_weights=torch.tensor([1.0, 0, 0]))
    assert none.item() == 0.0
