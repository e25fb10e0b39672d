"""``RLVRTrainer``: TRL's GRPOTrainer running the recipes with BiCC, RCC, VeriGate, ReCo, OC-GRPO.

TRL brings generation, accelerate/DeepSpeed, PEFT, logging and checkpoints. This class keeps
only the TRL hooks it overrides (each covered by ``tests/trainer/test_trl_hooks.py``) and hands
the work to the stages (:mod:`.stages`) and the loss (:mod:`.loss`), built once from the config
(docs/architecture.md lists the hooks and what each does).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from trl import GRPOTrainer
from trl.trainer.utils import get_config_model_id

from ..logs import follow_log_level
from ..metrics import logged_name
from .batching import group_permutation, reorder_rows, split_rows
from .callbacks import attach_project_callbacks
from .config import RLVRConfig, prompt_sharing_of
from .epoch_sampler import EpochAlignedResume
from .interrupts import WholeCheckpoints
from .loss import LossContext, TransferProbe, build_loss
from .model_card import load_named_model, record_base_model
from .quiet import silence_known_warnings
from .reference import adapter_reference, frozen_copy, is_adapter
from .reward_guards import check_rewards, guard_rewards
from .script_api import ScriptSaving, check_script_inputs, document_trls_arguments
from .shaping import with_overlong_penalty
from .stages import Batch, PromptWalk, RunFacts, StageContext, build_stages, needs_reference
from .trl_settings import effective_recipe

silence_known_warnings()


@document_trls_arguments  # help(): TRL's parameters and text (script_api.py)
class RLVRTrainer(ScriptSaving, WholeCheckpoints, EpochAlignedResume, GRPOTrainer):
    """TRL's ``GRPOTrainer`` running this project's recipes and methods (BiCC, RCC, ...),
    set by ``args``, an :class:`RLVRConfig`; takes ``GRPOTrainer``'s arguments."""

    def __init__(
        self, model: Any, reward_funcs: Any = None, args: RLVRConfig | None = None, *rest: Any,
        **kwargs: Any,
    ):  # fmt: skip
        if args is None:  # as TRL: a default config named after the model
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = RLVRConfig(output_dir=f"{name.split('/')[-1]}-RLVR")
        if not isinstance(args, RLVRConfig):
            raise TypeError(f"RLVRTrainer needs an RLVRConfig, got {type(args).__name__}")
        name = model  # what the user called the model, for the messages
        model = load_named_model(model, args, rest, kwargs)
        fns = guard_rewards(
            with_overlong_penalty(reward_funcs or [], args),
            args.nonfinite_rewards,
            args.reward_timeout,
        )
        super().__init__(model, fns, args, *rest, **kwargs)  # no rewards: environments score
        follow_log_level(self.args.get_process_log_level())  # as Trainer does for its own
        config: RLVRConfig = self.args
        self.recipe = effective_recipe(config)
        self.loss = build_loss(config, self.recipe, self.model)
        self.loss_name = self.loss.name
        self.transfer_probe = TransferProbe.from_config(config)
        self.nonfinite_losses, self.skipped_updates, self._nonfinite_pending = 0, 0, False
        self._on_logps = None  # what TRL's loss forward hands its log-probs to (_trl_loss)
        self._last_rewards_per_func: torch.Tensor | None = None
        self._skipped_rows: torch.Tensor | None = None  # (B_global,) of the last scoring
        self._aux_losses: list[torch.Tensor] = []
        self.last_batch_stats: dict[str, torch.Tensor] = {}
        adapter = is_adapter(self.accelerator.unwrap_model(self.model))
        # merge_adapter, chat templates: before anything renders a prompt (the forward's width)
        check_script_inputs(self, adapter, name)
        if adapter:
            record_base_model(self.accelerator.unwrap_model(self.model))
        # A PEFT adapter's reference is its base model with the adapter off, as TRL's.
        self._adapter_reference = adapter and needs_reference(config)
        if self.ref_model is None and needs_reference(config) and not adapter:
            self.ref_model = frozen_copy(self)
        self.prompt_sharing = prompt_sharing_of(
            config, self.accelerator.num_processes, self.train_dataset, self._tokenizer, self.model
        )
        self.prompt_sharing.prepare(self.model, "policy")
        self.prompt_sharing.prepare(self.ref_model, "reference")
        facts = RunFacts(
            tokenizer=self._tokenizer,
            group_size=self.num_generations,
            has_reference=self.ref_model is not None or self._adapter_reference,
            eos_token_ids=self.eos_token_ids,
            dataset_columns=getattr(self.train_dataset, "column_names", None),
            num_processes=self.accelerator.num_processes,
            skipped_rows=lambda: self._skipped_rows,
            progress=lambda: (self.state.global_step, self.state.max_steps),
        )
        self.pipelines = build_stages(config, facts, self.loss.reads)
        index = self.accelerator.process_index
        self._prompt_walk = PromptWalk(self.train_dataset, config.seed, index)
        attach_project_callbacks(self)  # guards, metrics.jsonl, diagnostics (callbacks.py)

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
        entropy: bool = False,
    ):
        """Per-token log-probs (B, C) of the completion after the prompt (with ``entropy``,
        and the per-token entropies (B, C), as a pair). ``share_prefix``: the prompts are
        BiCC's conditioned ones (else plain); each kind is encoded once per distinct prompt
        when the run shares it (:class:`.PromptSharing`). With gradient, a MoE model's router loss
        is kept for ``_compute_loss`` (TRL's)."""
        aux = self.aux_loss_enabled and torch.is_grad_enabled()
        ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attn = torch.cat([prompt_mask, completion_mask], dim=1)
        batch_size = self.args.per_device_train_batch_size
        with self.prompt_sharing.prompts("conditioned" if share_prefix else "plain"):
            logps, entropies, aux_loss = self._get_per_token_logps_and_entropies(
                model, ids, attn, completion_ids.size(1), batch_size=batch_size,
                compute_entropy=entropy, compute_aux_loss=aux,
            )  # fmt: skip
        if aux_loss is not None:
            self._aux_losses.append(aux_loss)
        return (logps, entropies) if entropy else logps

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
        compute_entropy=False, compute_aux_loss=False, **extra,
    ):  # fmt: skip
        """TRL hook: TRL's, but repeated prompts shared (:class:`.PromptSharing`)."""
        shared = self.prompt_sharing.forward(
            model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
            compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, extra=extra,
            autocast=self.accelerator.autocast,
        )  # fmt: skip
        if shared is None:
            shared = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy,
                compute_aux_loss, **extra,
            )  # fmt: skip
        if self._on_logps is not None and torch.is_grad_enabled():  # TRL's loss forward
            on_logps, self._on_logps = self._on_logps, None
            on_logps(shared[0])
        return shared

    def _trl_loss(self, model, inputs: dict, *, conditioned=False, on_logps=None) -> torch.Tensor:
        """TRL's ``_compute_loss``, its forward reading prompts of that kind; ``on_logps`` gets
        that forward's log-probs (the hook above) before TRL reads the micro-batch."""
        self._on_logps = on_logps
        try:
            with self.prompt_sharing.prompts("conditioned" if conditioned else "plain"):
                return GRPOTrainer._compute_loss(self, model, inputs)
        finally:
            self._on_logps = None

    def _no_grad_logps(self, model: torch.nn.Module):
        def logps(*tensors: torch.Tensor, share_prefix: bool = False) -> torch.Tensor:
            with torch.no_grad():
                return self._logps(model, *tensors, share_prefix=share_prefix)

        return logps

    def _reference_logps(self):
        """No-grad log-probs under pi_ref: the frozen copy, or the adapter-disabled base."""
        if self.ref_model is not None:
            return self._no_grad_logps(self.ref_model)
        if self._adapter_reference:
            unwrapped = self.accelerator.unwrap_model(self.model)
            return adapter_reference(unwrapped, self._no_grad_logps(self.model))
        return None

    def _log(self, mode: str, key: str, value: float | torch.Tensor) -> None:
        self._metrics[mode][key].append(float(value))  # TRL's log takes each key's mean

    def _stage_context(self, mode: str) -> StageContext:
        """What the stages may use: gathers, no-grad forwards, TRL's generation, a logger."""
        acc = self.accelerator
        return StageContext(
            group_size=self.num_generations if mode == "train" else self.num_generations_eval,
            gather=gather,
            gather_object=gather_object,
            log=lambda key, value: self._log(mode, key, value),
            policy_logps=self._no_grad_logps(self.model),
            reference_logps=self._reference_logps(),
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
        checked for non-finite values (an error, or the group skipped: ``reward_guards.py``)."""
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

    # ------------------------------------------------------------------ TRL hook: scoring

    def _trl_generate_and_score(self, rows: list[dict], mode: str) -> tuple[dict, torch.Tensor]:
        """TRL's generation and scoring of dataset rows, and the gathered total rewards."""
        start = time.perf_counter()
        out = super()._generate_and_score_completions(rows)
        self._log(mode, "timing_s/generate_and_score", time.perf_counter() - start)
        # Rows every reward function left unscored count 0 and are logged.
        per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        unscorable = torch.isnan(per_func).all(dim=1)
        self._log(mode, "reward/unscorable", unscorable.float().sum())
        return out, (per_func * weights).nansum(dim=1)  # weighted sum (B_global,)

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
        """TRL hook: the run's loss on this micro-batch (scaled for gradient accumulation):
        TRL's own ``_compute_loss`` for the recipes TRL has (:mod:`.trl_settings`), else the
        project's, plus a MoE model's router loss as TRL adds it."""
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        ctx = LossContext(
            logps=self._logps,
            group_size=self.num_generations if mode == "train" else self.num_generations_eval,
            accum=accum,
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
            progress=self.state.global_step / max(self.state.max_steps, 1),
            trl_loss=self._trl_loss,
        )
        self._aux_losses = []
        with self.prompt_sharing.tokens.counting(mode == "train"):  # tokens/loss_* (not the probe)
            loss, metrics = self.loss(model, inputs, ctx)
        if self._aux_losses:  # the project's loss: TRL's router-loss term and metric
            aux_loss = torch.stack(self._aux_losses).mean()
            loss = loss + self.router_aux_loss_coef * aux_loss / accum
            self._log(mode, "aux_loss", self.accelerator.gather_for_metrics(aux_loss).mean())
        if mode == "train":  # BiCC's transfer measure, on the steps it probes
            self.transfer_probe(model, loss, inputs, ctx, self.state.global_step, self._log)
        if not torch.isfinite(loss):
            self.nonfinite_losses += 1
            self._nonfinite_pending = True
            loss = torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * 0.0
        for key, value in metrics.items():  # under TRL's names where TRL logs the same
            self._log(mode, logged_name(key), self.accelerator.gather(value.reshape(1)).nanmean())
        self._log(mode, "loss/nonfinite_total", self.nonfinite_losses)
        self._log(mode, "loss/skipped_updates_total", self.skipped_updates)
        return loss
