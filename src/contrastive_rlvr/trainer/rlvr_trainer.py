"""``RLVRTrainer``: TRL's GRPOTrainer running this project's recipes, with BiCC and RCC
and the seed methods VeriGate, ReCo and OC-GRPO.

TRL brings generation (HF generate on CPU, vLLM on GPU), accelerate/DeepSpeed,
PEFT, logging and checkpoints. This class keeps only the TRL hooks it overrides
and hands the work to two objects built once from the config: the stage pipeline
(:mod:`.stages`, the batch after TRL's generation and scoring) and the loss
(:mod:`.loss`). docs/architecture.md has the picture. Overridden TRL hooks
(private API of the pinned TRL; each is covered by ``tests/test_trainer_hooks.py``,
the seed methods' wiring by ``tests/test_trainer_seed_methods.py``):

- ``_calculate_rewards``: keeps the gathered per-function rewards, which TRL
  turns into advantages without returning them.
- ``_generate_and_score_completions``: after TRL's generation and scoring, runs
  the stages (hinted round, dynamic sampling, log-prob passes, advantages,
  process advantages, occurrence weights, conditioned prompts, diagnostics),
  each timed as ``timing_s/<stage>``.
- ``_prepare_inputs``: shuffles whole groups instead of rows before splitting
  the generation batch into micro-batches, so that every micro-batch holds
  whole groups when its size allows (ConSPO needs it).
- ``_compute_loss``: the run's :class:`~.loss.Loss` on the micro-batch; a
  non-finite loss is counted and its update skipped (see
  :class:`SkipNonFiniteUpdates`).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, get_config_model_id

from ..algorithms import get_recipe
from .batching import group_permutation, reorder_rows, split_rows
from .config import RLVRConfig
from .guards import check_rewards, guard_rewards
from .loss import LossContext, build_loss
from .prefix import shared_prefix_logps
from .shaping import with_overlong_penalty
from .stages import Batch, PromptWalk, RunFacts, StageContext, build_stages, needs_reference


class SkipNonFiniteUpdates(TrainerCallback):
    """Drops the optimizer step of a window whose loss or gradient was not finite.

    Called right before ``optimizer.step()``: setting every ``grad`` to None makes
    torch's optimizers skip the parameters entirely (no moment update, no weight
    decay). All processes agree (the flag is summed across them).
    """

    def __init__(self, trainer: RLVRTrainer) -> None:
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):  # noqa: ANN001
        trainer = self.trainer
        model = trainer.model
        bad = trainer._nonfinite_pending or any(
            p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters()
        )
        flag = torch.tensor(float(bad), device=trainer.accelerator.device)
        if trainer.accelerator.reduce(flag, reduction="sum").item() > 0:
            for p in model.parameters():
                p.grad = None
            trainer.skipped_updates += 1
        trainer._nonfinite_pending = False
        return control


class RLVRTrainer(GRPOTrainer):
    """GRPO-family trainer for the recipes of :mod:`contrastive_rlvr.algorithms`.

    Takes the same arguments as ``trl.GRPOTrainer`` with ``args`` an
    :class:`RLVRConfig`. See the module docstring for the overridden hooks.
    """

    def __init__(self, model: Any, reward_funcs: Any, args: RLVRConfig, *rest: Any, **kwargs: Any):
        if not isinstance(args, RLVRConfig):
            raise TypeError(f"RLVRTrainer needs an RLVRConfig, got {type(args).__name__}")
        funcs = guard_rewards(with_overlong_penalty(reward_funcs, args), args.nonfinite_rewards)
        super().__init__(model, funcs, args, *rest, **kwargs)
        config: RLVRConfig = self.args
        self.recipe = get_recipe(config.recipe)
        self.loss = build_loss(config, self.recipe)
        self.loss_name = self.loss.name
        self.nonfinite_losses = 0
        self.skipped_updates = 0
        self._nonfinite_pending = False
        self._last_rewards_per_func: torch.Tensor | None = None
        self._skipped_rows: torch.Tensor | None = None  # (B_global,) of the last scoring
        self.last_batch_stats: dict[str, torch.Tensor] = {}
        if self.ref_model is None and needs_reference(config):
            self.ref_model = self._build_reference_model()
        facts = RunFacts(
            tokenizer=self._tokenizer,
            group_size=self.num_generations,
            has_reference=self.ref_model is not None,
            eos_token_ids=self.eos_token_ids,
            dataset_columns=getattr(self.train_dataset, "column_names", None),
            num_processes=self.accelerator.num_processes,
            skipped_rows=lambda: self._skipped_rows,
        )
        self.pipelines = build_stages(config, facts)
        index = self.accelerator.process_index
        self._prompt_walk = PromptWalk(self.train_dataset, config.seed, index)
        self.add_callback(SkipNonFiniteUpdates(self))

    def _build_reference_model(self) -> torch.nn.Module:
        """A frozen copy of the initial policy (this runs before any update, and before a
        checkpoint's weights are loaded on resume)."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            # Sharded weights cannot be copied in place: rebuild from the path, as TRL does.
            from trl.models import prepare_deepspeed, prepare_fsdp

            model = self.accelerator.unwrap_model(self.model)
            ref = create_model_from_path(get_config_model_id(model.config), dtype=model.dtype)
            ref.eval().requires_grad_(False)
            add_fused_lm_head(ref, temperature=self.temperature)
            prepare = prepare_deepspeed if self.is_deepspeed_enabled else prepare_fsdp
            return prepare(ref, self.accelerator)
        model = self.accelerator.unwrap_model(self.model)
        if hasattr(model, "peft_config"):
            raise ValueError(
                "rcc, log_delta and beta > 0 need a frozen reference model, which this trainer "
                "does not build for a PEFT adapter yet: set rcc=False, log_delta=False, beta=0"
            )
        ref = copy.deepcopy(model)
        # The copy carries the policy's patched forward, which closes over the policy itself:
        # drop it and patch the copy's own.
        ref.__dict__.pop("forward", None)
        ref.eval().requires_grad_(False)
        add_fused_lm_head(ref, temperature=self.temperature)
        return self.accelerator.prepare_model(ref, evaluation_mode=True)

    # ------------------------------------------------------------------ shared plumbing

    def _logps(
        self,
        model: torch.nn.Module,
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        *,
        share_prefix: bool = False,
    ):
        """Per-token log-probs (B, C) of the completion after the given prompt.

        ``share_prefix``: encode each distinct prompt once (:mod:`.prefix`; same values).
        It needs the model's key/value cache, so it is skipped under gradient
        checkpointing, and under DDP, whose wrapper expects one forward per backward.
        """
        if (
            share_prefix
            and self.args.share_prefix
            and not self.args.gradient_checkpointing
            and self.accelerator.num_processes == 1
            # pass 1 encodes the prompt less its last token: it must not be empty
            and int(prompt_mask.sum(1).min()) >= 2
        ):
            return shared_prefix_logps(
                model, prompt_ids, prompt_mask, completion_ids, completion_mask
            )
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attn = torch.cat([prompt_mask, completion_mask], dim=1)
        batch_size = self.args.per_device_train_batch_size
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, ids, attn, completion_ids.size(1), batch_size=batch_size
        )
        return logps

    def _no_grad_logps(self, model: torch.nn.Module):
        def logps(*tensors: torch.Tensor, share_prefix: bool = False) -> torch.Tensor:
            with torch.no_grad():
                return self._logps(model, *tensors, share_prefix=share_prefix)

        return logps

    def _process_rows(self, num_local: int) -> slice:
        start = self.accelerator.process_index * num_local
        return slice(start, start + num_local)

    def _log(self, mode: str, key: str, value: float | torch.Tensor) -> None:
        self._metrics[mode][key].append(float(value))

    def _stage_context(self, mode: str) -> StageContext:
        """What the stages may use: gathers, no-grad forwards, TRL's generation, a logger."""
        acc = self.accelerator
        return StageContext(
            group_size=self.num_generations if mode == "train" else self.num_generations_eval,
            gather=gather,
            gather_object=gather_object,
            log=lambda key, value: self._log(mode, key, value),
            policy_logps=self._no_grad_logps(self.model),
            reference_logps=None if self.ref_model is None else self._no_grad_logps(self.ref_model),
            process_index=acc.process_index,
            num_processes=acc.num_processes,
            pad_across_processes=acc.pad_across_processes,
            reduce=lambda tensor, reduction: acc.reduce(tensor, reduction=reduction),
            generate_and_score=lambda rows: self._trl_generate_and_score(rows, mode),
            draw_prompts=lambda n: self._prompt_walk.draw(n, self.state.global_step),
            tokenizer=self._tokenizer,
            max_positions=getattr(self.model.config, "max_position_embeddings", None),
        )

    # ------------------------------------------------------------------ TRL hook: rewards

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL hook: keep the rewards of every process (B_global, n_funcs) for the recipe,
        checked for non-finite values (an error, or the group skipped: ``guards.py``)."""
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        g = self.num_generations if self.model.training else self.num_generations_eval
        checked = check_rewards(
            rewards_per_func, self.reward_func_names, group_size=g,
            on_nonfinite=self.args.nonfinite_rewards,
        )  # fmt: skip
        self._skipped_rows = checked.skipped_rows
        self._last_rewards_per_func = checked.rewards
        return checked.rewards

    def _total_rewards(self, mode: str) -> torch.Tensor:
        """Weighted sum of the reward functions (B_global,).

        Rows every reward function left unscored count 0 and are logged."""
        per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        unscorable = torch.isnan(per_func).all(dim=1)
        self._log(mode, "reward/unscorable", unscorable.float().sum())
        return (per_func * weights).nansum(dim=1)

    # ------------------------------------------------------------------ TRL hook: scoring

    def _trl_generate_and_score(self, rows: list[dict], mode: str) -> tuple[dict, torch.Tensor]:
        """TRL's generation and scoring of dataset rows, and the gathered total rewards."""
        start = time.perf_counter()
        out = super()._generate_and_score_completions(rows)
        self._log(mode, "timing_s/generate_and_score", time.perf_counter() - start)
        return out, self._total_rewards(mode)

    def _generate_and_score_completions(self, inputs):
        """TRL hook: TRL generates and scores; the stages then set what the loss needs."""
        mode = "train" if self.model.training else "eval"
        out, rewards = self._trl_generate_and_score(inputs, mode)
        batch = Batch(data=out, rewards=rewards, prompts=inputs)
        batch = self.pipelines[mode](batch, self._stage_context(mode))
        self.last_batch_stats = batch.shared.get("stats", {})
        self.last_generation_batch = batch.data
        return batch.data

    # ------------------------------------------------------------------ TRL hook: batching

    def _prepare_inputs(self, generation_batch):
        """TRL hook: as TRL's, but the generation batch is shuffled by whole groups."""
        if not self.model.training:
            return self._generate_and_score_completions(generation_batch)
        spg = self.args.steps_per_generation
        if self._step % (spg * self.num_iterations) == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            num_rows = batch["completion_ids"].size(0)
            if num_rows % self.num_generations == 0:
                order = group_permutation(num_rows, self.num_generations)
            else:  # a process holds part of a group: only rows can move
                order = torch.randperm(num_rows)
            self._buffered_inputs = split_rows(reorder_rows(batch, order), spg)
        return self._buffered_inputs[self._step % spg]

    # ------------------------------------------------------------------ TRL hook: loss

    def _compute_loss(self, model, inputs):
        """TRL hook: the run's loss on this micro-batch (scaled for gradient accumulation)."""
        mode = "train" if self.model.training else "eval"
        ctx = LossContext(
            logps=self._logps,
            group_size=self.num_generations,
            accum=self.current_gradient_accumulation_steps if mode == "train" else 1,
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
            progress=self.state.global_step / max(self.state.max_steps, 1),
        )
        loss, metrics = self.loss(model, inputs, ctx)
        if not torch.isfinite(loss):
            self.nonfinite_losses += 1
            self._nonfinite_pending = True
            loss = torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * 0.0
        for key, value in metrics.items():
            self._log(mode, key, self.accelerator.gather(value.reshape(1)).nanmean())
        self._log(mode, "loss/nonfinite_total", self.nonfinite_losses)
        self._log(mode, "loss/skipped_updates_total", self.skipped_updates)
        return loss
