"""``bicc/transfer_cos`` at the start weights, for ``premise``: would each BiCC form's
first update move the policy that samples the way plain GRPO's would? (docs/bicc.md,
"Does BiCC reach the policy that samples?")

Over the two-sided groups of the premise's samples, with GRPO's advantages
``A_i = (R_i - mean R) / (std R + 1e-4)`` (population std, rewards 1 / 0 from the run's
partition) and per-row token means:

- plain GRPO: ``g_plain = grad -sum_i A_i mean_t log pi(o_it | q)``;
- the paper's conditioned form, on policy (ratio 1, no clipping): the same on
  ``log pi(o_it | [q ; O_opp])``, the row's opposite-attempts prompt;
- the distill form: ``grad sum_i [taught_i] mean_t sg(log pi(o_it | q) - log pi(o_it |
  [q ; O_opp])) log pi(o_it | q)`` (:func:`~contrastive_rlvr.algorithms.bicc_transfer.
  sampled_token_distill_loss`'s term, before the weight).

Each gradient is summed over the groups; the cosines are
:func:`~contrastive_rlvr.algorithms.bicc_transfer.transfer_cosine` of the conditioned
and of the distill gradient with ``g_plain``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..algorithms.bicc_transfer import transfer_cosine
from .measure import Conditioning, Group


def token_logps(
    model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs (n, T) of ``completions[i]`` after ``prompts[i]``, with
    gradient, and the mask (n, T). Left-padded prompts, right-padded completions, one
    forward."""
    device = next(model.parameters()).device
    plen = max(len(p) for p in prompts)
    width = max(len(c) for c in completions)
    ids = torch.zeros(len(prompts), plen + width, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        ids[i, plen - len(p) : plen] = torch.tensor(list(p), dtype=torch.long)
        ids[i, plen : plen + len(c)] = torch.tensor(list(c), dtype=torch.long)
        att[i, plen - len(p) : plen + len(c)] = 1
    ids, att = ids.to(device), att.to(device)
    positions = (att.cumsum(1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=att, position_ids=positions).logits
    logp = torch.log_softmax(logits[:, plen - 1 : -1].float(), -1)
    token = logp.gather(-1, ids[:, plen:].unsqueeze(-1)).squeeze(-1)
    mask = att[:, plen:].to(token.dtype)
    return token * mask, mask


def _row_means(token: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return token.sum(1) / mask.sum(1).clamp(min=1.0)


def start_transfer(
    model: Any,
    groups: Sequence[Group],
    cond: Conditioning,
    *,
    budget: Callable[[Group], int],
    taught: str = "wrong",
) -> dict[str, float] | None:
    """``{"conditioned": cos, "distill": cos, "groups": n}`` over the two-sided
    ``groups`` (None when there are none). ``taught``: the distill form's rows
    (``bicc_distill_rows``)."""
    usable = [g for g in groups if g.two_sided]
    if not usable:
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    sums: dict[str, list[torch.Tensor] | None] = {
        "plain": None,
        "conditioned": None,
        "distill": None,
    }
    was_training = model.training
    model.eval()  # dropout off, as the samples were drawn
    try:
        for group in usable:
            for name, loss in _group_losses(model, group, cond, budget(group), taught).items():
                grads = torch.autograd.grad(loss, params, allow_unused=True, retain_graph=True)
                sums[name] = _add(sums[name], grads, params)
    finally:
        model.train(was_training)
    return {
        "conditioned": transfer_cosine(sums["conditioned"], sums["plain"]),
        "distill": transfer_cosine(sums["distill"], sums["plain"]),
        "groups": len(usable),
    }


def _add(total, grads, params) -> list[torch.Tensor]:
    grads = [torch.zeros_like(p) if g is None else g for g, p in zip(grads, params, strict=True)]
    return grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]


def _group_losses(
    model: Any, group: Group, cond: Conditioning, budget: int, taught: str
) -> dict[str, torch.Tensor]:
    n = len(group.completions)
    rewards = torch.tensor([1.0 if c else 0.0 for c in group.correct])
    advantages = (rewards - rewards.mean()) / (rewards.std(unbiased=False) + 1e-4)
    plain, mask = token_logps(model, [group.prompt_ids] * n, group.completions)
    opposite, _ = cond.prompts(group, group, budget=budget)
    conditioned, cmask = token_logps(model, opposite, group.completions)
    advantages = advantages.to(plain.device)
    rows = torch.tensor([(not c) or taught == "both" for c in group.correct], device=plain.device)
    gap = (plain - conditioned).detach()
    distill = _row_means(gap * plain, mask)
    return {
        "plain": -(advantages * _row_means(plain, mask)).sum(),
        "conditioned": -(advantages * _row_means(conditioned, cmask)).sum(),
        "distill": (distill * rows).sum(),
    }
