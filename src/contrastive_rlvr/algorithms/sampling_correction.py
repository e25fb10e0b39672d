"""The correction for a sampler that is not the trained policy (vLLM), in the project's losses.

With vLLM generating, the sampling log-probs ``log pi_vllm(o_t)`` differ from the trainer's
``log pi_old(o_t)`` (kernels, precision). TRL 1.16 corrects for it with a weight on each
token's policy loss, computed at scoring time from ``old - sampling`` (its
``importance_sampling_ratio``, (B, T) in the token modes, (B, 1) in the sequence modes,
truncated or masked at ``vllm_importance_sampling_clip_min/max``), and optionally drops
sequences by the off-policy sequence mask of the DeepSeek-V3.2 report
(``off_policy_mask_threshold``). Both multiply ``per_token_loss`` before aggregation and
leave the KL term alone.

Every policy surrogate of :mod:`.losses` (and ReCo's, OC-GRPO's) is positively homogeneous
in the advantage: for ``w >= 0``, ``w * -min(rho A, clip(rho) A) = -min(rho wA, clip(rho)
wA)``, and GSPO's and GMPO's per-row terms likewise. So TRL's ``per_token_loss * w`` is the
same loss, value and gradient, as the surrogate with advantages ``A * w``; a per-row loss
takes the row's mean weight over its tokens, which is what TRL's seq-mean-token-mean does
with a (B, 1) loss times (B, T) weights. ConSPO, not a surrogate in ``A``, takes the
per-row weights in :func:`~.conspo.conspo_loss`.

Shapes: ``B`` rows, ``T`` completion tokens, masks 1 on scored tokens.
"""

from __future__ import annotations

import torch

from .ops import Tensor, masked_mean, per_token


def off_policy_mask(
    advantages: Tensor,
    logp: Tensor,
    sampling_logp: Tensor,
    mask: Tensor,
    *,
    threshold: float,
) -> Tensor:
    """Off-policy sequence mask (DeepSeek-V3.2 report; TRL's ``off_policy_mask_threshold``):
    keep a row when its advantage is >= 0 or its mean ``sampling_logp - sg(logp)`` over
    scored tokens (a forward-KL estimate) is <= ``threshold``; drop it otherwise.

    Args:
        advantages: (B,), (B, 1) or (B, T) (the sign is read per element).
        logp: (B, T) current log-probs (detached here). sampling_logp: (B, T); NaN where the
            sampler gave none (counted as 0 difference). mask: (B, T).
    Returns:
        (B, 1) float, 1 keep and 0 drop ((B, T) for per-token advantages).
    """
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    kl = torch.nan_to_num(sampling_logp - logp.detach(), nan=0.0)
    mean_kl = (kl * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)  # (B, 1)
    return ((advantages >= 0) | (mean_kl <= threshold)).to(mask.dtype)


def corrected_advantages(
    advantages: Tensor, weights: Tensor, mask: Tensor, *, per_row: bool
) -> Tensor:
    """The advantages that make a policy surrogate equal TRL's ``per_token_loss * weights``.

    Args:
        advantages: (B,) or (B, T).
        weights: (B, T) or (B, 1), >= 0 (the sampling correction times the off-policy mask).
        mask: (B, T).
        per_row: the loss takes per-row advantages (GSPO, GMPO): (B,) = A * mean_t w over
            the row's scored tokens; else (B, T) = A * w.
    """
    if per_row:
        if advantages.dim() != 1:
            raise ValueError(f"per-row advantages must be (B,), got {list(advantages.shape)}")
        return advantages * row_weights(weights, mask)
    return per_token(advantages, mask) * weights.detach()  # (B, T)


def row_weights(weights: Tensor, mask: Tensor) -> Tensor:
    """(B,) the mean of (B, T) or (B, 1) weights over each row's scored tokens."""
    return masked_mean(weights.detach().expand_as(mask), mask, dim=1)
