"""vLLM's importance-sampling correction and the off-policy mask under BiCC compare like with
like (trainer/stages/bicc.py ``_set_mask_logps``, trainer/loss.py ``mask_sampling_logps``):
the sampler's log-probs against pi_old on the plain prompt it sampled from, the loss's drift
since sampling on the prompt the loss reads, the weight applied to the conditioned loss.
Before, the mask compared the sampler's plain-prompt log-probs with the conditioned forward,
so the context's own shift counted as off-policyness and dropped on-policy negatives.
Tiny random Llama on CPU; TRL's loss and the project's."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.trainer.loss import Loss, PolicyLogps, SamplingCorrection, _policy_objective
from contrastive_rlvr.trainer.stages.bicc import ConditionedPrompts

B, P, T, CONTEXT = 4, 3, 5, 6
CLIP_MIN, CLIP_MAX = 0.8, 1.25
ADVANTAGES = torch.tensor([1.0, -0.5, -0.8, -1.2])  # one positive, three negatives


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def build(model_dir, tmp_path, threshold: float | None, ratio_mode: str = "consistent"):
    config = make_config(
        tmp_path, recipe="grpo", per_device_train_batch_size=B, max_completion_length=T,
        off_policy_mask_threshold=threshold, bicc=True, bicc_mix=1.0,
        bicc_ratio_mode=ratio_mode, vllm_importance_sampling_mode="token_truncate",
        vllm_importance_sampling_clip_min=CLIP_MIN, vllm_importance_sampling_clip_max=CLIP_MAX,
    )  # fmt: skip
    trainer = make_trainer(model_dir, config)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    # vLLM is not installed on CPU: TRL's loss reads these attributes for the correction.
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = True
    return trainer


def plain_and_conditioned(trainer) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """A micro-batch with BiCC's conditioned prompts (the plain prompt then 6 context
    tokens), and the policy's log-probs (B, T) on the plain and on the conditioned prompt."""
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    prompt = torch.randint(3, vocab, (B, P), generator=g)
    context = torch.randint(3, vocab, (B, CONTEXT), generator=g)
    inputs = {
        "prompt_ids": prompt,
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "bicc_prompt_ids": torch.cat([prompt, context], 1),
        "bicc_prompt_mask": torch.ones(B, P + CONTEXT, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (B, T), generator=g),
        "completion_mask": mask,
        "advantages": ADVANTAGES.clone(),
        "num_items_in_batch": mask.sum(),
    }
    with torch.no_grad():
        plain = trainer._logps(trainer.model, prompt, inputs["prompt_mask"],
                               inputs["completion_ids"], mask)  # fmt: skip
        conditioned = trainer._logps(trainer.model, inputs["bicc_prompt_ids"],
                                     inputs["bicc_prompt_mask"], inputs["completion_ids"], mask,
                                     share_prefix=True)  # fmt: skip
    return inputs, plain * mask, conditioned * mask


def run_stage(trainer, inputs: dict, ratio_mode: str, shared_old=None) -> None:
    """The conditioned-prompts stage's log-prob step on ``inputs`` (the rows are built)."""
    stage = ConditionedPrompts.__new__(ConditionedPrompts)
    stage.ratio_mode, stage.keep_plain, stage.reference_kl = ratio_mode, False, False
    stage.off_policy_mask = True
    batch = SimpleNamespace(data=inputs, shared={"old_logps": shared_old})
    ctx = SimpleNamespace(policy_logps=trainer._no_grad_logps(trainer.model))
    stage._set_ratio_logps(batch, ctx)


def trl_loss(trainer, inputs: dict) -> float:
    """The trainer's loss route for grpo (TRL's own ``_compute_loss``, BiCC's prompt), with
    gradient as in training (the loss forward's log-probs reach the mask there)."""
    loss = float(trainer._compute_loss(trainer.model, dict(inputs)))
    trainer.model.zero_grad()
    return loss


def mean_gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return ((a - b) * mask).sum(1) / mask.sum(1)


@pytest.mark.parametrize("ratio_mode", ["consistent", "paper"])
def test_on_policy_bicc_batch_drops_nothing_and_weighs_one(model_dir, tmp_path, ratio_mode):
    trainer = build(model_dir, tmp_path, threshold=None, ratio_mode=ratio_mode)
    inputs, plain, conditioned = plain_and_conditioned(trainer)
    mask = inputs["completion_mask"]
    # Exactly on policy: the sampler's log-probs are the policy's on the plain prompt, and
    # TRL's pi_old (computed under vLLM's correction) too; TRL's ratio is then 1.
    inputs.update(old_per_token_logps=plain.clone(), sampling_per_token_logps=plain.clone())
    inputs["importance_sampling_ratio"] = torch.exp(plain - plain).clamp(CLIP_MIN, CLIP_MAX)
    # The context's own shift on the negatives, which the mask must not count:
    shift = mean_gap(plain, conditioned, mask)[1:]
    threshold = 0.5 * float(shift.max())
    assert threshold > 0, "the premise: the context lowers some negative's log-probs"
    run_stage(trainer, inputs, ratio_mode, shared_old=plain.clone())
    torch.testing.assert_close(inputs["bicc_mask_sampling_shift"], torch.zeros(B, T))
    without_mask = trl_loss(trainer, inputs)  # no threshold: the reference loss
    trainer.off_policy_mask_threshold = threshold
    # The comparison before (sampling on the plain prompt against the conditioned forward)
    # drops a negative: the loss changes.
    before = {k: v for k, v in inputs.items() if not k.startswith("bicc_mask_")}
    assert trl_loss(trainer, before) != pytest.approx(without_mask, rel=1e-4)
    assert trl_loss(trainer, inputs) == pytest.approx(without_mask, rel=1e-6)  # TRL's loss
    correction = SamplingCorrection(importance_sampling=True, mask_threshold=threshold)
    weights = correction.weights(
        conditioned, inputs, inputs["old_per_token_logps"], inputs["advantages"], mask.float()
    )
    torch.testing.assert_close(weights, torch.ones(B, T))  # the project's loss


def test_stage_writes_the_gap_and_the_loss_prompts_old(model_dir, tmp_path):
    """Off policy, by hand: the shift is sampling - pi_old(o | q) (NaN tokens 0, padding 0),
    and pi_old on the loss's prompt is the conditioned forward (consistent and paper),
    the plain pi_old (conditioned_old)."""
    trainer = build(model_dir, tmp_path, threshold=0.05)
    inputs, plain, conditioned = plain_and_conditioned(trainer)
    mask = inputs["completion_mask"]
    old = plain + 0.2 * mask
    sampling = old + 0.1 * mask
    sampling[0, 1] = float("nan")
    expected_shift = 0.1 * mask.float()
    expected_shift[0, 1] = 0.0
    for mode, want_old in (("consistent", conditioned), ("paper", conditioned),
                           ("conditioned_old", old)):  # fmt: skip
        batch = {**inputs, "old_per_token_logps": old.clone(), "sampling_per_token_logps": sampling}
        run_stage(trainer, batch, mode, shared_old=old.clone())
        torch.testing.assert_close(batch["bicc_mask_sampling_shift"], expected_shift)
        torch.testing.assert_close(batch["bicc_mask_old_per_token_logps"] * mask, want_old)


def test_off_policy_weight_by_hand_and_trls_loss_agrees(model_dir, tmp_path):
    threshold = 0.05
    trainer = build(model_dir, tmp_path, threshold=threshold)
    inputs, plain, conditioned = plain_and_conditioned(trainer)
    mask = inputs["completion_mask"]
    fmask = mask.float()
    # pi_old on each prompt 0.3 x (-1)^t off the policy; the sampler off pi_old(o | q) by
    # row-dependent amounts (row 2 past the clip bounds); row 1's drift alone (0.1 nats)
    # passes the threshold.
    drift = 0.3 * torch.tensor([(-1.0) ** t for t in range(T)]) * fmask
    old_plain, old_conditioned = plain + drift, conditioned + drift
    offsets = torch.tensor([[0.05], [0.0], [-0.3], [0.02]]) * torch.linspace(1, 2, T) * fmask
    sampling = old_plain + offsets
    ratio = torch.exp(old_plain - sampling).clamp(CLIP_MIN, CLIP_MAX)  # TRL's token_truncate
    inputs.update(
        old_per_token_logps=old_conditioned,  # consistent mode's pi_old(o | [q; O_opp])
        sampling_per_token_logps=sampling,
        importance_sampling_ratio=ratio,
        bicc_mask_sampling_shift=offsets,
        bicc_mask_old_per_token_logps=old_conditioned,
    )
    # By hand: a row's off-policyness is its sampler gap plus its drift, each on one prompt:
    # mean_t (sampling - old_plain) + mean_t (old_conditioned - pi_theta(o | [q; O_opp])).
    kl = mean_gap(sampling, old_plain, fmask) + mean_gap(old_conditioned, conditioned, fmask)
    keep = ((ADVANTAGES >= 0) | (kl <= threshold)).float()
    assert keep.tolist() == [1.0, 0.0, 1.0, 0.0]  # both outcomes are exercised
    # The comparison before (sampling against the conditioned forward) decided otherwise:
    # the context raises row 1's log-probs, which hid its drift.
    before = mean_gap(sampling, conditioned, fmask)
    assert ((ADVANTAGES >= 0) | (before <= threshold)).float().tolist() != keep.tolist()
    correction = SamplingCorrection(importance_sampling=True, mask_threshold=threshold)
    weights = correction.weights(conditioned, inputs, old_conditioned, ADVANTAGES, fmask)
    torch.testing.assert_close(weights, keep.unsqueeze(1) * ratio)
    # TRL's own loss on the conditioned prompt gives the loss of the project's with them.
    trl = trl_loss(trainer, inputs)
    objective = _policy_objective(trainer.args, trainer.recipe, None)
    objective.correction = correction
    trainer.loss = Loss(PolicyLogps(conditioned=True), objective)
    assert trl_loss(trainer, inputs) == pytest.approx(trl, rel=1e-5)
