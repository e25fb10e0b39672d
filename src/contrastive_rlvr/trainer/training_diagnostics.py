"""Training diagnostics of the BiCC paper, recorded every few steps (docs/metrics.md).

- ``deltas.jsonl``: the reward, delta and advantage of every completion of the
  step's batch, enough to draw the delta distributions of correct and wrong
  completions (the paper's Figures 2 and 4).
- ``diag/grad_var_plain``, ``diag/grad_var_rcc``, ``diag/grad_var_ratio``: a
  gradient-variance estimate with the plain group baseline and with the RCC
  baseline, on the same batch and the same random directions (RCC's claim:
  lower variance).
- ``diag/ratio_margin`` (and ``diag/ratio_correct``, ``diag/ratio_wrong``): how
  much one update raised the sequence ratio of the correct completions over
  that of the wrong ones (the contrastive reading of GRPO).

Everything here runs only on the chosen steps and only in a no-grad forward,
except the per-row gradients of the variance estimate; see
:class:`TrainingDiagnostics` for the cost.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..algorithms import recipe_advantages
from ..algorithms.diagnostics import (
    group_gradient_variance,
    projected_gradients,
    random_directions,
    ratio_margin,
)
from ..algorithms.ops import Tensor, masked_mean
from ..run_files import open_append
from .jsonl import keep_steps_up_to

DELTAS_FILE = "deltas.jsonl"


def _chosen(step: int, every: int, max_steps: int) -> bool:
    """Step 1, every ``every``-th step and the last step (``every`` 0: never)."""
    return every > 0 and (step == 1 or step % every == 0 or step == max_steps)


def reads_batch_delta(cfg, global_step: int, max_steps: int) -> bool:
    """Whether the generation batch made now (at ``global_step``, before the step runs) is
    read by the diagnostics with its whole delta: it serves the next
    ``steps_per_generation`` steps, and a chosen step of either switch reads it."""
    steps = range(global_step + 1, global_step + 1 + max(cfg.steps_per_generation or 1, 1))
    every = (cfg.diagnostics_every, cfg.deltas_every)
    return any(_chosen(step, n, max_steps) for step in steps for n in every)


class TrainingDiagnostics(TrainerCallback):
    """Records the diagnostics of the module docstring on the chosen steps.

    On a chosen step (step 1, every ``diagnostics_every``-th step and the last
    one), with the local rows of the step's generation batch
    (``trainer.last_generation_batch``, the batch the update is computed on):

    - before the optimizer step (weights = those that sampled the batch when
      training is on-policy): per-row scores ``s_i = mean_t log pi(o_i,t)`` on
      the prompts the loss uses (BiCC-conditioned when BiCC is on), one
      forward and backward per row, projected on ``diagnostics_directions``
      fixed random directions (seeded with ``seed``); the variance estimate
      with the recipe's advantages without delta (plain baseline) and with
      delta (RCC baseline, ``rcc_coef`` and ``rcc_bound``), delta from the frozen reference as
      logged in ``trainer.last_batch_stats``. Skipped for ConSPO (no
      advantages) and when no delta is logged. Also the per-token log-probs
      on the plain prompts (no grad);
    - after the optimizer step: the same log-probs again, and the ratio margin.

    Cost on a chosen step: B single-row forwards and backwards plus two no-grad
    batch forwards; memory: ``diagnostics_directions`` x P floats for the
    directions. Every ``deltas_every``-th step, a line of ``deltas.jsonl``
    (free: the values are already computed).
    """

    def __init__(self, trainer, output_dir: str | Path) -> None:
        self.trainer = trainer
        self.path = Path(output_dir) / DELTAS_FILE
        self._directions: list[list[Tensor]] | None = None
        self._before: Tensor | None = None

    # ------------------------------------------------------------------ callback hooks

    def on_train_begin(self, args, state, control, **kwargs):
        # On resume, drop lines of steps after the checkpoint (as metrics.jsonl does).
        if state.is_world_process_zero and self.path.exists():
            keep_steps_up_to(self.path, state.global_step)
        return control

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        step = state.global_step + 1
        self._before = None
        if not _chosen(step, args.diagnostics_every, state.max_steps):
            return control
        batch = getattr(self.trainer, "last_generation_batch", None)
        if batch is None:
            return control
        model = self._model()
        with torch.no_grad():
            self._before = self._plain_logps(model, batch)
        self._log_gradient_variance(model, batch)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if self._before is not None:
            self._log_ratio_margin(self.trainer.last_generation_batch)
            self._before = None
        if _chosen(step, args.deltas_every, state.max_steps) and state.is_world_process_zero:
            self._write_deltas(step)
        return control

    # ------------------------------------------------------------------ pieces

    def _model(self) -> torch.nn.Module:
        return self.trainer.accelerator.unwrap_model(self.trainer.model)

    def _plain_logps(self, model, batch) -> Tensor:
        return self.trainer._logps(
            model,
            batch["prompt_ids"],
            batch["prompt_mask"],
            batch["completion_ids"],
            batch["completion_mask"],
        )

    def _local_delta(self, num_rows: int) -> Tensor | None:
        delta = self.trainer.last_batch_stats.get("delta")
        if delta is None:
            return None
        start = self.trainer.accelerator.process_index * num_rows  # this process's rows
        return delta[start : start + num_rows]

    def _log_gradient_variance(self, model, batch) -> None:
        trainer, cfg = self.trainer, self.trainer.args
        g = trainer.num_generations
        rewards = batch["rewards"].detach().float().cpu()
        delta = self._local_delta(rewards.shape[0])
        if trainer.recipe.objective != "policy" or delta is None:
            return
        if rewards.shape[0] % g or rewards.shape[0] // g < 2:
            return  # needs at least two whole groups on this process
        params = [p for p in model.parameters() if p.requires_grad]
        if self._directions is None:
            self._directions = random_directions(params, cfg.diagnostics_directions, cfg.seed)
        prompt = trainer.loss.logps.keys  # the prompt the loss's log-prob pass reads
        mask = batch["completion_mask"]
        scores = []
        with torch.enable_grad():
            for i in range(rewards.shape[0]):
                rows = slice(i, i + 1)
                logp = trainer._logps(
                    model,
                    batch[prompt[0]][rows],
                    batch[prompt[1]][rows],
                    batch["completion_ids"][rows],
                    mask[rows],
                )
                scores.append(masked_mean(logp, mask[rows].to(logp.dtype)))
            u = projected_gradients(scores, params, self._directions)
        plain = recipe_advantages(trainer.recipe, rewards, g, eps=cfg.adv_eps)
        rcc = recipe_advantages(
            trainer.recipe,
            rewards,
            g,
            delta=delta.float(),
            rcc_coef=cfg.rcc_coef,
            rcc_bound=cfg.rcc_bound,
            eps=cfg.adv_eps,
        )
        var_plain = group_gradient_variance(plain, u, g)
        var_rcc = group_gradient_variance(rcc, u, g)
        trainer._log("train", "diag/grad_var_plain", var_plain)
        trainer._log("train", "diag/grad_var_rcc", var_rcc)
        if var_plain > 0:
            trainer._log("train", "diag/grad_var_ratio", var_rcc / var_plain)

    def _log_ratio_margin(self, batch) -> None:
        trainer = self.trainer
        with torch.no_grad():
            after = self._plain_logps(self._model(), batch)
        correct = batch["rewards"] > trainer.args.reward_threshold
        mask = batch["completion_mask"].to(after.dtype)
        result = ratio_margin(after.float(), self._before.float(), mask, correct)
        if result is not None:
            margin, pos, neg = result
            trainer._log("train", "diag/ratio_margin", margin)
            trainer._log("train", "diag/ratio_correct", pos)
            trainer._log("train", "diag/ratio_wrong", neg)

    def _write_deltas(self, step: int) -> None:
        stats = self.trainer.last_batch_stats
        if "rewards" not in stats:
            return
        row = {"step": step, "group_size": self.trainer.num_generations}
        for key in ("rewards", "delta", "advantages"):
            if key in stats:
                row[key] = [round(float(x), 6) for x in stats[key].tolist()]
        with open_append(self.path.parent, self.path.name) as f:
            f.write(json.dumps(row) + "\n")


def diagnostics_callback(trainer, output_dir: str | Path) -> TrainingDiagnostics | None:
    """The diagnostics callback for ``trainer``, or None when both switches are 0."""
    cfg = trainer.args
    if cfg.diagnostics_every <= 0 and cfg.deltas_every <= 0:
        return None
    return TrainingDiagnostics(trainer, output_dir)
