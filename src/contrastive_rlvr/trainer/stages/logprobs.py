"""No-grad log-prob passes on the plain prompt: old (log pi_old(o | q)), reference
(log pi_ref(o | q)) and the per-completion delta = mean_t (log pi_old - log pi_ref)
between them (RCC's confidence shift, docs/algorithms.md; the delta diagnostics of
docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Callable

from ...algorithms import sequence_delta
from .base import Batch, StageContext


class LogProbPasses:
    """Fills in the log-probs later stages and the loss need, computing only what TRL
    left unset (TRL keeps ``old_per_token_logps`` only when generation is off-policy,
    ``ref_per_token_logps`` only when its own KL term is on).

    Args:
        old: compute log pi_old(o | q) even without a reference (BiCC's paper ratio).
        reference: a frozen reference exists: compute log pi_ref and the delta.
        keep_reference: store the reference log-probs for the loss's KL term (beta > 0).
        delta_reduce: ``"mean"`` or ``"sum"`` over tokens for the delta.
        defer_delta: None, or a predicate asked once a batch: when it says yes, on an
            on-policy batch (TRL left ``old_per_token_logps`` unset), make no policy pass:
            the loss takes log pi_theta(o | q) from its own forward, which on policy equals
            log pi_old(o | q), and the delta from it and ``data["rcc_ref_per_token_logps"]``
            (RCC at loss time, :mod:`..loss`).

    Writes ``shared["old_logps"]`` (B, T), ``shared["delta"]`` (B_global,) and, with
    ``keep_reference``, ``data["ref_per_token_logps"]``; when the delta is deferred,
    ``data["rcc_ref_per_token_logps"]`` (B, T) and no ``shared["delta"]``.
    """

    name = "logprobs"
    reads = ("data.prompt_ids", "data.completion_mask", "data.old_per_token_logps?")
    writes = (
        "shared.old_logps",
        "shared.delta",
        "data.ref_per_token_logps",
        "data.rcc_ref_per_token_logps",
    )

    def __init__(
        self,
        *,
        old: bool,
        reference: bool,
        keep_reference: bool,
        delta_reduce: str,
        defer_delta: Callable[[], bool] | None = None,
    ) -> None:
        self.old, self.reference = old, reference
        self.keep_reference, self.delta_reduce = keep_reference, delta_reduce
        self.defer_delta = defer_delta

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out = batch.data
        plain = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"])
        mask = out["completion_mask"]
        old = out.get("old_per_token_logps")
        if old is None and not self.old and self.defer_delta is not None and self.defer_delta():
            ref = out.get("ref_per_token_logps")
            if ref is None:
                ref = ctx.reference_logps(*plain, mask)
                if self.keep_reference:
                    out["ref_per_token_logps"] = ref
            out["rcc_ref_per_token_logps"] = ref
            return batch
        if old is None and (self.old or self.reference):
            old = ctx.policy_logps(*plain, mask)
        if old is not None:
            batch.shared["old_logps"] = old
        if self.reference:
            ref = out.get("ref_per_token_logps")
            if ref is None:
                ref = ctx.reference_logps(*plain, mask)
                if self.keep_reference:
                    out["ref_per_token_logps"] = ref
            delta = sequence_delta(old, ref, mask, reduce=self.delta_reduce)
            batch.shared["delta"] = ctx.gather(delta)
        return batch
