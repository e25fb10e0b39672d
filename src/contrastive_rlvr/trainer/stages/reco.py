"""ReCo's occurrence weights (docs/seed-methods.md): a response that occurs k times in
its group weighs 1/k; plus the whole batch's normalisers, so that the micro-batch
losses add up to the loss of the window."""

from __future__ import annotations

from ...algorithms import occurrence_weights
from ...algorithms.ops import masked_fill_zero
from ..batching import unpad
from ..seed_inputs import response_keys
from .base import Batch, StageContext


class OccurrenceWeights:
    """Writes ``reco_weights`` (B,) of the local rows (counted over whole groups of the
    gathered batch), ``reco_weight_sum`` and ``reco_weighted_tokens`` (over all
    processes) and, with ``factor_norm="mean"``, ``reco_variance_mean``: the batch's
    mean p(1 - p) of pi_old over real tokens.

    Args:
        identity: ``"tokens"`` or ``"answer"``: which completions count as the same.
        factor_norm: ``"mean"`` or ``"max"``.
    """

    name = "occurrence_weights"
    reads = ("data.completion_ids", "data.completion_mask", "shared.old_logps?")
    writes = (
        "data.reco_weights",
        "data.reco_weight_sum",
        "data.reco_weighted_tokens",
        "data.reco_variance_mean",
    )

    def __init__(self, *, identity: str, factor_norm: str) -> None:
        self.identity, self.factor_norm = identity, factor_norm

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out = batch.data
        mask = out["completion_mask"]
        ids = unpad(out["completion_ids"], mask)
        texts = None
        if self.identity == "answer":
            texts = ctx.tokenizer.batch_decode(ids, skip_special_tokens=True)
        keys = ctx.gather_object(response_keys(ids, texts, self.identity))
        rows = ctx.rows(mask.size(0))
        weights = occurrence_weights(keys, ctx.group_size)[rows].to(mask.device)
        out["reco_weights"] = weights
        out["reco_weight_sum"] = ctx.gather(weights.sum().reshape(1)).sum()
        out["reco_weighted_tokens"] = ctx.gather((weights * mask.sum(1)).sum().reshape(1)).sum()
        if self.factor_norm == "mean":
            old = batch.shared.get("old_logps")
            if old is None:
                plain = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"])
                old = ctx.policy_logps(*plain, mask)
            p = masked_fill_zero(old, mask).exp()
            var = masked_fill_zero(p * (1 - p), mask).sum().reshape(1)
            out["reco_variance_mean"] = (
                ctx.gather(var).sum() / ctx.gather(mask.sum().reshape(1)).sum()
            )
        return batch
