"""Per-batch diagnostics of the papers (documented in docs/metrics.md): accuracy,
collapse rate and, with a delta, Cov(R, delta) and the delta of correct vs wrong."""

from __future__ import annotations

from ...algorithms import DEFAULT_RCC_BOUND, collapse_rate
from ...algorithms.diagnostics import collapse_reasons, delta_metrics
from .base import Batch, StageContext


class BatchDiagnostics:
    """Logs ``reward/accuracy``, ``adv/collapse_rate`` (and why: ``adv/collapse_wrong_rate``,
    ``adv/collapse_correct_rate``, :func:`collapse_reasons`); with ``shared["delta"]``:
    ``rcc/cov`` (mean over groups of Cov(R, delta)), ``rcc/delta_mean``,
    ``rcc/delta_correct``, ``rcc/delta_wrong`` and, when ``rcc_coef`` is set (RCC on),
    ``rcc/baseline_shift`` = mean |b* - mean(R)| (b* with the run's ``rcc_bound``). Keeps
    the gathered rewards, delta and per-row advantages in ``shared["stats"]`` (the
    trainer's ``last_batch_stats``).

    Args:
        threshold: reward above which a completion is correct.
        rcc_coef: c of the RCC baseline, or None when RCC is off.
        rcc_bound: the bound of that baseline (``"reward_range"`` or ``"none"``).
    """

    name = "diagnostics"
    reads = ("rewards", "shared.delta?", "data.advantages?")
    writes = ("shared.stats",)

    def __init__(
        self, *, threshold: float, rcc_coef: float | None, rcc_bound: str = DEFAULT_RCC_BOUND
    ) -> None:
        self.threshold, self.rcc_coef, self.rcc_bound = threshold, rcc_coef, rcc_bound

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        rewards, g = batch.rewards, ctx.group_size
        correct = rewards > self.threshold
        ctx.log("reward/accuracy", correct.float().mean())
        ctx.log("adv/collapse_rate", collapse_rate(rewards, g))
        for key, value in collapse_reasons(rewards, g, self.threshold).items():
            ctx.log(key, value)
        stats = {"rewards": rewards.detach().cpu()}
        delta = batch.shared.get("delta")
        if delta is not None:  # (with RCC's delta taken at loss time, the loss logs these)
            metrics = delta_metrics(
                rewards,
                delta,
                g,
                threshold=self.threshold,
                rcc_coef=self.rcc_coef,
                rcc_bound=self.rcc_bound,
            )
            for key, value in metrics.items():
                ctx.log(key, value)
            stats["delta"] = delta.detach().cpu()
        advantages = batch.data.get("advantages")
        if advantages is not None and advantages.dim() == 1:
            stats["advantages"] = ctx.gather(advantages).detach().cpu()
        batch.shared["stats"] = stats
        return batch
