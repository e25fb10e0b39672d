"""OC-GRPO: Off-Context GRPO, guided rollouts for problems the model never solves (2026).

Only the paper's abstract is public; the formulas are our reading
(``docs/token-methods.md``; closest published relative: Guide-GRPO). When a
group has no correct completion (:func:`all_fail_groups`), its prompt ``q``
is sampled again with privileged guidance ``h`` in the prompt
(:func:`hint_prefix`, :func:`guided_prompt`). The guided completions are
*off-context*: sampled from ``pi_old(. | q, h)`` but trained for the target
``pi_theta(. | q)``, with the importance weight

    w_t = min( pi_theta(o_t | q, o_<t) / pi_old(o_t | q, h, o_<t), W )

(:func:`oc_importance_weight`; ``level="token"`` by default, the sequence
products as options), truncated above at ``W`` (``max_weight``, default 2).
The guided rows' loss is the truncated-importance-sampling policy gradient

    -sg(w_t) A_t exp(l_t - sg(l_t)),   gradient  -w_t A_t grad log pi_theta(o_t | q, o_<t)

which is the exact importance-sampled gradient of the unguided objective
where ``w_t < W``. Rows without guidance keep GRPO's clipped surrogate
(:func:`oc_grpo_loss`). The log-probs ``l_t`` of guided rows are computed on
the *unguided* prompt; ``l_old`` is the sampling-time log-prob on the guided
prompt.

Mixing rule (:func:`oc_merge`): a guided group enters the batch only if it is
*rescued* (at least one correct completion). ``mode="replace"`` (default)
puts it in place of the all-fail group it came from (that group had zero
advantage everywhere, so no gradient is lost and the batch keeps its shape);
``mode="append"`` keeps the all-fail group and adds the guided group at the
end. Advantages of a guided group are computed within that group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

import torch

from .aggregation import agg_loss
from .losses import (
    LOG_RATIO_LIMIT,
    TokenClipOptions,
    _add_kl,
    _clipped_surrogate,
    _token_clip_metrics,
    log_ratio,
    register_policy_loss,
)
from .ops import (
    Tensor,
    check_rows,
    check_same_shape,
    group_view,
    masked_fill_zero,
    masked_mean,
    num_groups,
    per_token,
)

WeightLevel = Literal["token", "sequence", "geometric"]
OC_WEIGHT_LEVELS: tuple[str, ...] = get_args(WeightLevel)
MixMode = Literal["replace", "append"]
OC_MIX_MODES: tuple[str, ...] = get_args(MixMode)
HintUnit = Literal["chars", "words"]
# Our default truncation of the off-context weight (the abstract gives none).
OC_MAX_WEIGHT = 2.0
DEFAULT_HINT_TEMPLATE = "Hint: {hint}\n{prompt}"


def all_fail_groups(rewards: Tensor, group_size: int, *, threshold: float = 0.5) -> Tensor:
    """(B/G,) bool: groups with no correct completion (no reward above ``threshold``)."""
    num_groups(rewards.shape[0], group_size, min_size=1, what="all_fail_groups")
    return ~(group_view(rewards, group_size) > threshold).any(dim=1)


def hint_prefix(solution: str, fraction: float, *, unit: HintUnit = "chars") -> str:
    """The guidance: the first ``floor(fraction * n)`` characters (``unit="chars"``)
    or whitespace-separated words (``"words"``) of the reference solution.

    ``fraction`` in [0, 1]; 0 gives ``""``, 1 the whole solution. Words keep the
    solution's own spacing between them.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"hint fraction must be in [0, 1], got {fraction}")
    if unit == "chars":
        return solution[: math.floor(fraction * len(solution))]
    if unit == "words":
        words = solution.split()
        keep = math.floor(fraction * len(words))
        if keep == 0:
            return ""
        end, at = 0, 0
        for word in words[:keep]:
            at = solution.index(word, end)
            end = at + len(word)
        return solution[:end].lstrip()
    raise ValueError(f"unknown hint unit {unit!r}; valid: chars, words")


def guided_prompt(prompt: str, hint: str, *, template: str = DEFAULT_HINT_TEMPLATE) -> str:
    """The prompt with guidance, ``template.format(prompt=prompt, hint=hint)``.

    The default puts the hint *before* the prompt, so a completion-style prompt
    (``5+9+3=``) still ends where the completion starts.
    """
    if "{prompt}" not in template or "{hint}" not in template:
        raise ValueError(f"hint template must contain {{prompt}} and {{hint}}, got {template!r}")
    return template.format(prompt=prompt, hint=hint)


def oc_importance_weight(
    logp: Tensor,
    old_logp: Tensor,
    mask: Tensor,
    *,
    level: WeightLevel = "token",
    max_weight: float = OC_MAX_WEIGHT,
) -> Tensor:
    """Truncated off-context weight ``min(pi_theta(o | q) / pi_old(o | q, h), W)``, (B, T).

    Args:
        logp: (B, T) log-probs of the guided completions under the current
            policy, on the *unguided* prompt q.
        old_logp: (B, T) sampling-time log-probs on the guided prompt [q; h].
        mask: (B, T).
        level: ``"token"`` ``w_t = exp(l_t - l_old_t)``; ``"sequence"``
            ``w_i = exp(sum_t (l - l_old))`` (the exact sequence ratio, often
            vanishingly small); ``"geometric"`` ``w_i = exp(mean_t (l - l_old))``
            (GSPO-style length normalisation). Row weights are repeated on the
            row's tokens.
        max_weight: W > 0, the truncation.
    Returns:
        (B, T) weights (differentiable below the truncation), 0 on padding.
    """
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    if max_weight <= 0:
        raise ValueError(f"max_weight must be > 0, got {max_weight}")
    d = log_ratio(logp, old_logp, mask)  # (B, T)
    if level == "sequence":
        d = d.sum(1, keepdim=True).clamp(max=LOG_RATIO_LIMIT).expand_as(d)
    elif level == "geometric":
        d = masked_mean(d, mask, dim=1).unsqueeze(1).expand_as(d)
    elif level != "token":
        raise ValueError(f"unknown weight level {level!r}; valid: {', '.join(OC_WEIGHT_LEVELS)}")
    weight = torch.exp(d.clamp(max=math.log(max_weight)))
    return masked_fill_zero(weight, mask)


@dataclass(frozen=True, kw_only=True)
class OCOptions(TokenClipOptions):
    """:func:`oc_grpo_loss`'s options: the clipped-loss ones (for the rows sampled without
    guidance) and OC-GRPO's own: ``guided`` (B,) bool, True on rows sampled with
    guidance (None: none); ``max_weight``, ``level``: see :func:`oc_importance_weight`."""

    guided: Tensor | None = None
    max_weight: float = OC_MAX_WEIGHT
    level: WeightLevel = "token"


@register_policy_loss("oc_grpo", paper="OC-GRPO (2026), abstract only; formulas are our reading")
def oc_grpo_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, options: OCOptions
) -> tuple[Tensor, dict[str, Tensor]]:
    """OC-GRPO loss: clipped surrogate on plain rows, truncated-IS term on guided rows.

    Per token: ``-min(rho_t A, clip(rho_t, 1-clip_low, 1+clip_high) A)`` on rows
    sampled without guidance, ``-sg(w_t) A exp(l_t - sg l_t)`` on guided rows
    (``w_t`` from :func:`oc_importance_weight`); one aggregation over all rows
    (``agg``: GRPO's seq-mean-token-mean, DAPO's token-mean, Dr.GRPO's
    seq-mean-token-sum-norm). With no guided row it equals the GRPO/DAPO/Dr.GRPO
    loss of the same options.

    Args:
        logp: (B, T) current log-probs, on the unguided prompt for every row.
        old_logp: (B, T) sampling-time log-probs (guided prompt for guided rows).
        advantages: (B, T) or (B,). mask: (B, T).
        options: :class:`OCOptions`.
    Returns:
        ``(loss, metrics)``: ``loss/policy``, ``clip/*`` and ``ratio/mean`` over
        the unguided rows' tokens, ``kl/mean`` with ref_logp,
        ``oc/guided_frac`` (share of rows that are guided), ``oc/weight_mean``
        (mean truncated weight over guided tokens) and ``oc/truncated_frac``
        (share of guided tokens whose weight hit ``max_weight``).
    """
    check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    advantages = per_token(advantages, mask)
    guided, level, max_weight = options.guided, options.level, options.max_weight
    if guided is None:
        guided = torch.zeros(logp.shape[0], dtype=torch.bool, device=logp.device)
    check_rows("guided", guided, logp.shape[0])
    g = guided.bool().unsqueeze(1)  # (B, 1)

    ratio = torch.exp(log_ratio(logp, old_logp, mask))
    clipped = _clipped_surrogate(ratio, advantages, options.clip_low, options.clip_high)
    weight = oc_importance_weight(logp, old_logp, mask, level=level, max_weight=max_weight)
    safe_logp = masked_fill_zero(logp, mask)
    tis = -(weight.detach() * advantages) * torch.exp(safe_logp - safe_logp.detach())
    per_tok = torch.where(g, tis, clipped)
    loss = agg_loss(per_tok, mask, **options.agg_kwargs())  # type: ignore[arg-type]

    plain_mask, guided_mask = mask * ~g, mask * g
    metrics = _token_clip_metrics(
        ratio, advantages, plain_mask, options.clip_low, options.clip_high
    )
    # The untruncated weight shows how often the truncation bites.
    raw = oc_importance_weight(logp, old_logp, mask, level=level, max_weight=math.inf)
    metrics["oc/guided_frac"] = g.float().mean().detach()
    metrics["oc/weight_mean"] = masked_mean(weight, guided_mask).detach()
    metrics["oc/truncated_frac"] = masked_mean((raw >= max_weight).float(), guided_mask).detach()
    return _add_kl(loss, metrics, logp, mask, options)


@dataclass(frozen=True)
class OCMerge:
    """How guided groups enter the batch (:func:`oc_merge`).

    Attributes:
        rows: (B',) long, for each row of the merged batch its index in the
            concatenation ``[unguided rows (B) ; guided rows (F*G)]``: the
            trainer gathers every per-row tensor (prompt ids, completion ids,
            old log-probs, ...) with it.
        guided: (B',) bool, True on guided rows.
        rewards: (B',) rewards of the merged batch.
        fail_groups: (B/G,) bool, the all-fail groups of the unguided batch.
        rescued: (F,) bool, which guided groups have a correct completion.
        metrics: ``oc/fail_frac`` (share of groups that failed entirely),
            ``oc/rescued_frac`` (share of those whose guided group has at
            least one correct completion; 0 when none failed),
            ``oc/guided_rows_frac`` (share of merged rows that are guided).
    """

    rows: Tensor
    guided: Tensor
    rewards: Tensor
    fail_groups: Tensor
    rescued: Tensor
    metrics: dict[str, Tensor]


def oc_merge(
    rewards: Tensor,
    guided_rewards: Tensor,
    group_size: int,
    *,
    threshold: float = 0.5,
    mode: MixMode = "replace",
) -> OCMerge:
    """Mix the rescued guided groups into the batch (mixing rule in the module docstring).

    Args:
        rewards: (B,) rewards of the unguided batch.
        guided_rewards: (F*G,) rewards of the guided groups, one group of G per
            all-fail group, in the order of those groups in the batch.
        group_size: G.
        threshold: reward above which a completion is correct.
        mode: ``"replace"`` or ``"append"``.
    """
    fail = all_fail_groups(rewards, group_size, threshold=threshold)
    n_fail, n_rows = int(fail.sum()), rewards.shape[0]
    check_rows("guided_rewards", guided_rewards, n_fail * group_size)
    if mode not in OC_MIX_MODES:
        raise ValueError(f"unknown OC-GRPO mix mode {mode!r}; valid: {', '.join(OC_MIX_MODES)}")
    rescued = (
        (group_view(guided_rewards, group_size) > threshold).any(1)
        if n_fail
        else torch.zeros(0, dtype=torch.bool)
    )
    rows = list(range(n_rows))
    guided_flags = [False] * n_rows
    failed = fail.nonzero().flatten().tolist()
    for f, g in enumerate(failed):
        if not bool(rescued[f]):
            continue
        guided_rows = list(range(n_rows + f * group_size, n_rows + (f + 1) * group_size))
        if mode == "replace":
            rows[g * group_size : (g + 1) * group_size] = guided_rows
            guided_flags[g * group_size : (g + 1) * group_size] = [True] * group_size
        else:
            rows.extend(guided_rows)
            guided_flags.extend([True] * group_size)
    index = torch.tensor(rows, dtype=torch.long)
    flags = torch.tensor(guided_flags, dtype=torch.bool)
    merged = torch.cat([rewards, guided_rewards.to(rewards.dtype)])[index]
    metrics = {
        "oc/fail_frac": fail.float().mean(),
        "oc/rescued_frac": rescued.float().sum() / max(n_fail, 1),
        "oc/guided_rows_frac": flags.float().mean(),
    }
    return OCMerge(index, flags, merged, fail, rescued, metrics)
