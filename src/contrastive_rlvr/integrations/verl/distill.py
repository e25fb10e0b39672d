"""BiCC on verl's actor workers: the loss of ``bicc_form: distill`` and the two losses of the
transfer probe (``bicc/transfer_cos``), as verl loss functions.

verl's engine calls an actor loss as ``loss_fn(model_output=..., data=micro_batch,
dp_group=...)``; the worker's default is ``partial(ppo_loss, config=actor_config)``, which
hands the policy loss of ``policy_loss.loss_mode`` only the log-probs, old log-probs,
advantages and mask. The distill term needs the teacher's log-probs of every sampled
token, so the ``crlvr_sync`` trainer writes them to the batch (fields :data:`TEACHER` and
:data:`TAUGHT`, next to ``old_log_probs``) and :class:`CrlvrActorLoss` reads them from the
micro-batch, as verl's own ``distillation_ppo_loss`` reads ``teacher_logprobs``: verl's
``ppo_loss`` (the recipe's loss, verl's entropy and KL terms) plus the distill term of the
TRL path (:func:`~contrastive_rlvr.algorithms.bicc_transfer.sampled_token_distill_loss`).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.metric import AggregationType, Metric
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import no_padding_2_padding

from ...algorithms.bicc_transfer import plain_grpo_surrogate, sampled_token_distill_loss
from ...algorithms.ops import masked_mean

#: The teacher's log-prob of each sampled token, ``log pi(o_t | [q ; O_opp])``
#: (response-shaped, as ``old_log_probs``).
TEACHER = "bicc_teacher_log_probs"
#: 1.0 on every response token of a row the teacher teaches, else 0 (response-shaped).
TAUGHT = "bicc_taught"
#: The probe's advantages where ``advantages`` are no GRPO advantages (ConSPO's targets).
PROBE_ADVANTAGES = "bicc_probe_advantages"


def distills(options: Any) -> bool:
    """Whether a ``policy_loss`` section runs BiCC's distill form."""
    return bool(getattr(options, "bicc", False)) and getattr(options, "bicc_form", "") == (
        "distill"
    )


def _padded(data: TensorDict, *names: str) -> TensorDict:
    """``names`` of the micro-batch as padded (B, T) tensors (verl's ``ppo_loss`` does the
    same for its fields, so the widths agree with the model output's response slice)."""
    return data.select(*names).to_padded_tensor()


def distill_term(
    options: Any, model_output: dict, data: TensorDict
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The distill term of one micro-batch, scaled so that verl's sum over a rank's
    micro-batches gives the term of its whole mini-batch share (the TRL path divides by
    its micro-batches the same way).

    :func:`~contrastive_rlvr.algorithms.bicc_transfer.sampled_token_distill_loss` takes the
    mean over the micro-batch's ``B`` rows; verl's rank holds ``global_batch_size / dp_size``
    rows of the mini-batch, so the term is multiplied by ``B / (global_batch_size /
    dp_size)`` (1 without verl's batch info).

    Args:
        options: ``policy_loss`` (:class:`~.config.CrlvrPolicyLossConfig`).
        model_output: verl's, ``log_probs`` (nested, prompt + response per row), with grad.
        data: the micro-batch: ``prompts``, ``responses``, ``response_mask``,
            ``old_log_probs``, :data:`TEACHER`, :data:`TAUGHT` (response-shaped).
    """
    logp = no_padding_2_padding(model_output["log_probs"], data)  # (B, T)
    fields = _padded(data, "response_mask", "old_log_probs", TEACHER, TAUGHT)
    mask = fields["response_mask"].to(logp.dtype)
    taught = (fields[TAUGHT].to(logp.dtype) * mask).amax(dim=1) > 0  # (B,)
    loss, metrics = sampled_token_distill_loss(
        logp,
        fields[TEACHER].to(logp.dtype),
        mask,
        taught,
        old_logp=fields["old_log_probs"].to(logp.dtype),
        is_clip=options.bicc_distill_is_clip,
        max_gap=options.bicc_distill_max_gap,
        center=options.bicc_distill_center,
    )
    global_rows = tu.get(data, "global_batch_size")
    if global_rows is not None:
        dp = tu.get(data, "dp_size") or 1
        loss = loss * (logp.shape[0] / (float(global_rows) / float(dp)))
    return loss, metrics


class CrlvrActorLoss:
    """The actor loss of a ``crlvr_sync`` run with BiCC: verl's ``ppo_loss`` and, with
    ``policy_loss.bicc_form='distill'``, ``(1 - w) x ppo_loss + w x`` :func:`distill_term`
    (TRL SDPO's convex form, the TRL path's
    :class:`~contrastive_rlvr.trainer.loss.distill.DistillLoss`), on the plain prompt's
    forward (the only one the engine makes).

    Metrics: verl's, plus ``bicc/distill_gap`` (mean ``log pi_T - log pi_s`` over the
    taught tokens) and ``bicc/distill_loss`` with the distill form.

    Args:
        config: the worker's actor config (verl's ``ActorConfig``; its ``policy_loss`` is
            :class:`~.config.CrlvrPolicyLossConfig`).
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    def __call__(
        self, model_output: dict, data: TensorDict, dp_group: Any = None, **kwargs: Any
    ) -> tuple[torch.Tensor, dict]:
        if kwargs.get("student_logits") is not None:
            raise ValueError(
                "the crlvr actor loss is no logits processor: unset verl's distillation "
                "(distillation.enabled=false) with policy_loss.bicc=true"
            )
        loss, metrics = ppo_loss(self.config, model_output, data, dp_group)
        options = self.config.policy_loss
        if not distills(options):
            return loss, metrics
        if TEACHER not in data.keys():
            raise RuntimeError(
                "policy_loss.bicc_form='distill': the micro-batch has no teacher log-probs "
                "(run the crlvr_sync trainer: trainer.v1.trainer_mode=crlvr_sync)"
            )
        term, extra = distill_term(options, model_output, data)
        weight = float(options.bicc_distill_weight)
        total = (1.0 - weight) * loss + weight * term
        metrics["bicc/distill_loss"] = Metric(value=term.detach(), aggregation=AggregationType.SUM)
        for key, value in extra.items():
            metrics[f"bicc/{key}"] = Metric(value=value.detach(), aggregation=AggregationType.MEAN)
        return total, metrics


def plain_surrogate_loss(
    model_output: dict, data: TensorDict, dp_group: Any = None, **kwargs: Any
) -> tuple[torch.Tensor, dict]:
    """Plain GRPO's on-policy surrogate of the transfer probe on a micro-batch of plain
    rows: :func:`~contrastive_rlvr.algorithms.bicc_transfer.plain_grpo_surrogate` of the
    (B, T) log-probs with each row's advantage: the masked mean of verl's per-token
    ``advantages`` (constant along a row for the outcome estimators), or of
    :data:`PROBE_ADVANTAGES` where the trainer wrote them (ConSPO)."""
    logp = no_padding_2_padding(model_output["log_probs"], data)
    key = PROBE_ADVANTAGES if PROBE_ADVANTAGES in data.keys() else "advantages"
    fields = _padded(data, "response_mask", key)
    mask = fields["response_mask"].to(logp.dtype)
    advantages = masked_mean(fields[key].to(logp.dtype), mask, dim=1)  # (B,)
    return plain_grpo_surrogate(logp, mask, advantages), {}
