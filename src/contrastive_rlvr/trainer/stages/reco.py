"""ReCo's response weights (docs/token-methods.md): by default a response that occurs k
times in its group weighs 1/k (``weights="count"``); with ``weights="expected"`` a
response weighs 1 / max(1, G pi_old(o | q)), its expected occurrence in G draws. Plus
the whole batch's normalisers, so that the micro-batch losses add up to the loss of the
window."""

from __future__ import annotations

import torch

from ...algorithms import expected_occurrence_weights, occurrence_weights
from ...algorithms.ops import masked_fill_zero
from ..batching import unpad
from ..token_method_inputs import response_keys
from .base import Batch, StageContext


class OccurrenceWeights:
    """Writes ``reco_weights`` (B,) of the local rows, ``reco_weight_sum`` and
    ``reco_weighted_tokens`` (over all processes) and, with ``factor_norm="mean"``,
    ``reco_variance_mean``: the batch's mean p(1 - p) of pi_old over real tokens.

    ``"count"`` weights are counted over whole groups of the gathered batch;
    ``"expected"`` weights need only each row's own sequence log-prob under pi_old
    (on the plain prompt), so they are computed on the local rows.

    pi_old is ``shared["old_logps"]`` (the log-prob stage's), else TRL's
    ``old_per_token_logps``, else one no-grad forward on the plain prompt.

    Args:
        identity: ``"tokens"`` or ``"answer"``: which completions count as the same
            (``"count"`` only).
        factor_norm: ``"mean"`` or ``"max"``.
        weights: ``"count"`` or ``"expected"``.
        factor: ``"variance"`` or ``"entropy"``; the batch's mean p(1 - p) is written for
            the variance factor only (the entropy factor's Z is the loss micro-batch's
            mean entropy, or log V).
    """

    name = "occurrence_weights"
    reads = (
        "data.completion_ids",
        "data.completion_mask",
        "shared.old_logps?",
        "data.old_per_token_logps?",
    )
    writes = (
        "data.reco_weights",
        "data.reco_weight_sum",
        "data.reco_weighted_tokens",
        "data.reco_variance_mean",
    )

    def __init__(
        self, *, identity: str, factor_norm: str, weights: str = "count", factor: str = "variance"
    ) -> None:
        if weights not in ("count", "expected"):
            raise ValueError(f"unknown ReCo weights {weights!r}; valid: count, expected")
        self.identity, self.factor_norm, self.weights = identity, factor_norm, weights
        self.variance_mean = factor == "variance" and factor_norm == "mean"

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out = batch.data
        mask = out["completion_mask"]
        old = None
        if self.weights == "expected" or self.variance_mean:
            old = self._old_logps(batch, ctx)
        if self.weights == "expected":
            weights = expected_occurrence_weights(old, mask, ctx.group_size).to(mask.device)
        else:
            weights = self._count_weights(batch, ctx)
        out["reco_weights"] = weights
        out["reco_weight_sum"] = ctx.gather(weights.sum().reshape(1)).sum()
        out["reco_weighted_tokens"] = ctx.gather((weights * mask.sum(1)).sum().reshape(1)).sum()
        if self.variance_mean:
            p = masked_fill_zero(old, mask).exp()
            var = masked_fill_zero(p * (1 - p), mask).sum().reshape(1)
            out["reco_variance_mean"] = (
                ctx.gather(var).sum() / ctx.gather(mask.sum().reshape(1)).sum()
            )
        return batch

    def _count_weights(self, batch: Batch, ctx: StageContext) -> torch.Tensor:
        mask = batch.data["completion_mask"]
        ids = unpad(batch.data["completion_ids"], mask)
        texts = None
        if self.identity == "answer":
            texts = ctx.tokenizer.batch_decode(ids, skip_special_tokens=True)
        keys = ctx.gather_object(response_keys(ids, texts, self.identity))
        rows = ctx.rows(mask.size(0))
        return occurrence_weights(keys, ctx.group_size)[rows].to(mask.device)

    @staticmethod
    def _old_logps(batch: Batch, ctx: StageContext) -> torch.Tensor:
        """log pi_old(o | q) (B, T) on the plain prompt."""
        old = batch.shared.get("old_logps")
        if old is None:
            old = batch.data.get("old_per_token_logps")
        if old is None:
            out = batch.data
            plain = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"])
            old = ctx.policy_logps(*plain, out["completion_mask"])
        return old
