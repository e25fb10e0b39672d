"""``RLVRTrainer``: TRL's GRPOTrainer running this project's recipes, with BiCC and RCC
and the seed methods VeriGate, ReCo and OC-GRPO.

TRL brings generation (HF generate on CPU, vLLM on GPU), accelerate/DeepSpeed,
PEFT, logging and checkpoints; this class only changes what the algorithm
core needs changed. Overridden TRL hooks (private API of the pinned TRL; each
is covered by ``tests/test_trainer_hooks.py``; the seed methods' wiring by
``tests/test_trainer_seed_methods.py``):

- ``_calculate_rewards``: keeps the gathered per-function rewards, which TRL
  turns into advantages without returning them.
- ``_generate_and_score_completions``: after TRL's generation and scoring,
  recomputes the advantages with the recipe (RCC-corrected when on), builds the
  BiCC prompts, sets the old and reference log-probs the BiCC ratio mode asks
  for, and logs the diagnostics. Seed methods: OC-GRPO runs a hinted second
  round for all-fail groups (TRL's generation again) and merges the rescued
  groups with their unhinted prompt; VeriGate turns gated groups' advantages
  into token-level process advantages; ReCo adds occurrence weights and the
  batch's normalisers. Everything that needs a whole group is computed on the
  batch gathered from all processes, then sliced.
- ``_prepare_inputs``: shuffles whole groups instead of rows before splitting
  the generation batch into micro-batches, so that every micro-batch holds
  whole groups when its size allows (ConSPO needs it).
- ``_compute_loss``: the policy log-probs (on the conditioned prompt with BiCC)
  and the recipe's loss from :mod:`contrastive_rlvr.algorithms` (``reco``,
  ``oc_grpo`` or ``gspo_token`` when a seed method asks for it, via
  ``seed_method_loss``; guided rows' old log-probs are the hinted sampling
  ones); with ``bicc_mix < 1`` that share of the loss is on the conditioned
  prompts and the rest on the plain ones; a non-finite loss is counted and its
  update skipped (see :class:`SkipNonFiniteUpdates`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.data_utils import is_conversational
from trl.trainer.utils import add_fused_lm_head, create_model_from_path, get_config_model_id

from ..algorithms import (
    all_fail_groups,
    build_bicc_prompts,
    collapse_rate,
    conspo_loss,
    conspo_margin,
    context_budget,
    gated_groups,
    get_recipe,
    group_covariance,
    informative_groups,
    loss_option_names,
    oc_merge,
    occurrence_weights,
    policy_loss,
    rcc_baseline,
    recipe_advantages,
    seed_method_loss,
    sequence_delta,
    verigate_advantages,
)
from ..algorithms.ops import group_view, masked_fill_zero
from .batching import group_permutation, reorder_rows, split_rows, unpad
from .config import RLVRConfig
from .prefix import shared_prefix_logps
from .seed_inputs import build_process_scorer, guided_rows, response_keys, step_scores_and_index
from .shaping import OverlongPenalty, take_rows


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
        funcs = list(reward_funcs) if isinstance(reward_funcs, list | tuple) else [reward_funcs]
        if args.overlong_punishment:
            if args.reward_weights is not None and len(args.reward_weights) != len(funcs) + 1:
                raise ValueError(
                    f"reward_weights={args.reward_weights} must have {len(funcs) + 1} entries: one "
                    "per reward function plus one for the overlong punishment, which comes last"
                )
            funcs.append(OverlongPenalty(args.max_completion_length, args.overlong_cache_len))
        super().__init__(model, funcs, args, *rest, **kwargs)
        config: RLVRConfig = self.args
        self.recipe = get_recipe(config.recipe)
        self.loss_name, self._seed_loss_defaults = None, {}
        if self.recipe.objective == "policy":
            self.loss_name, self._seed_loss_defaults = seed_method_loss(
                config.recipe, verigate=config.verigate, reco=config.reco, oc_grpo=config.oc_grpo
            )
        self.nonfinite_losses = 0
        self.skipped_updates = 0
        self._nonfinite_pending = False
        self._last_rewards_per_func: torch.Tensor | None = None
        self.last_batch_stats: dict[str, torch.Tensor] = {}
        self._refill_order: list[int] = []
        if self.ref_model is None and self._needs_reference():
            self.ref_model = self._build_reference_model()
        if config.bicc:
            tokenizer = self._tokenizer
            self._bicc_template = config.bicc_template.encode(
                lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
                max_items=self.num_generations,
            )
        if config.verigate:
            self._process_scorer = build_process_scorer(config.verigate_scorer)
        if config.oc_grpo:
            self._check_oc_setup()
        self.add_callback(SkipNonFiniteUpdates(self))

    # ------------------------------------------------------------------ set-up helpers

    def _needs_reference(self) -> bool:
        """A frozen reference is needed for KL, for RCC's delta and for the delta diagnostics."""
        cfg = self.args
        return cfg.beta > 0 or (cfg.rcc and cfg.rcc_reference == "reference") or cfg.log_delta

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

    def _check_oc_setup(self) -> None:
        """What OC-GRPO needs before the first step: reference solutions in the dataset, a
        reference model for KL on the unguided prompt, one process for 'append'."""
        cfg = self.args
        columns = getattr(self.train_dataset, "column_names", None)
        if columns is not None and cfg.oc_solution_column not in columns:
            raise ValueError(
                f"oc_solution_column={cfg.oc_solution_column!r}: the train dataset has no such "
                f"column (columns: {columns}); OC-GRPO cuts its hints from reference solutions"
            )
        if cfg.beta > 0 and self.ref_model is None:
            raise ValueError(
                "oc_grpo=True with beta > 0 needs a separate reference model (not a PEFT "
                "adapter) to score guided completions on the unguided prompt; set beta=0"
            )
        if cfg.oc_merge == "append" and self.accelerator.num_processes > 1:
            raise ValueError(
                "oc_merge='append' gives processes different batch sizes; with several "
                "processes use oc_merge='replace'"
            )

    # ------------------------------------------------------------------ small helpers

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

    def _process_rows(self, num_local: int) -> slice:
        start = self.accelerator.process_index * num_local
        return slice(start, start + num_local)

    def _log(self, mode: str, key: str, value: float | torch.Tensor) -> None:
        self._metrics[mode][key].append(float(value))

    # ------------------------------------------------------------------ TRL hook: rewards

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        """TRL hook: keep the rewards of every process (B_global, n_funcs) for the recipe."""
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _total_rewards(self, mode: str) -> torch.Tensor:
        """Weighted sum of the reward functions (B_global,).

        Rows every reward function left unscored count 0 and are logged."""
        per_func = self._last_rewards_per_func
        weights = self.reward_weights.to(per_func.device).unsqueeze(0)
        unscorable = torch.isnan(per_func).all(dim=1)
        self._log(mode, "reward/unscorable", unscorable.float().sum())
        return (per_func * weights).nansum(dim=1)

    # ------------------------------------------------------------------ TRL hook: scoring

    def _generate_and_score_completions(self, inputs):
        """TRL hook: TRL generates and scores; the recipe then sets advantages, BiCC prompts
        and the log-probs the loss needs."""
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        cfg, g = self.args, self.num_generations if mode == "train" else self.num_generations_eval
        rewards_all = self._total_rewards(mode)
        if cfg.oc_grpo and mode == "train":
            out, rewards_all = self._add_guided_groups(out, rewards_all, inputs, g, mode)
        if cfg.dynamic_sampling and mode == "train":
            out, rewards_all = self._refill_collapsed_groups(out, rewards_all, g, mode)
        rows = self._process_rows(out["completion_ids"].size(0))
        out["rewards"] = rewards_all[rows]
        plain = (
            out["prompt_ids"],
            out["prompt_mask"],
            out["completion_ids"],
            out["completion_mask"],
        )
        mask = out["completion_mask"]

        with torch.no_grad():
            # log pi_old(o | q): TRL computes it only when generation runs off-policy.
            plain_old = out.get("old_per_token_logps")
            need_old = (cfg.bicc and cfg.bicc_ratio_mode == "paper") or self.ref_model is not None
            if plain_old is None and need_old:
                plain_old = self._logps(self.model, *plain)
            delta_all = None
            if self.ref_model is not None:
                ref = out.get("ref_per_token_logps")
                if ref is None:
                    ref = self._logps(self.ref_model, *plain)
                    if cfg.beta > 0:
                        out["ref_per_token_logps"] = ref
                delta_all = gather(sequence_delta(plain_old, ref, mask, reduce=cfg.rcc_delta))
        use_rcc = cfg.rcc and cfg.rcc_reference == "reference"
        rcc_delta = delta_all if use_rcc else None

        if self.recipe.objective == "policy":
            advantages = recipe_advantages(
                self.recipe, rewards_all, g, delta=rcc_delta, rcc_coef=cfg.rcc_coef, eps=cfg.adv_eps
            )
            out["advantages"] = advantages[rows]
            if cfg.verigate:
                out["advantages"] = self._verigate_advantages(out, rewards_all, advantages, g, mode)
        elif use_rcc:
            baseline = recipe_advantages(
                self.recipe, rewards_all, g, delta=rcc_delta, rcc_coef=cfg.rcc_coef
            )
            out["conspo_baseline"] = baseline[rows]

        if cfg.reco:
            self._add_reco_inputs(out, g, plain_old)
        if cfg.bicc:
            self._add_bicc_inputs(out, rewards_all, rows, g, plain_old, mode, inputs)
        self._log_batch_diagnostics(mode, rewards_all, delta_all, g, out)
        self.last_generation_batch = out
        return out

    def _draw_prompts(self, num_prompts: int) -> list[dict]:
        """Fresh training rows for dynamic sampling: a seeded walk over the dataset,
        a different stride per process so processes draw different prompts."""
        rows = []
        for _ in range(num_prompts):
            if not self._refill_order:
                gen = torch.Generator().manual_seed(self.args.seed + 7919 * self.state.global_step)
                self._refill_order = torch.randperm(len(self.train_dataset), generator=gen).tolist()
            index = self._refill_order.pop()
            rows.append(
                self.train_dataset[
                    (index + self.accelerator.process_index) % len(self.train_dataset)
                ]
            )
        return rows

    def _refill_collapsed_groups(self, out, rewards_all, g, mode):
        """DAPO dynamic sampling: replace groups whose rewards are all equal by groups of
        newly sampled prompts whose rewards differ, for at most ``dynamic_sampling_max_rounds``
        extra generation rounds. Every process generates in every round (the scoring
        gathers across processes); groups still collapsed after the cap stay (zero advantage)."""
        rows = self._process_rows(out["completion_ids"].size(0))
        local = rewards_all[rows]
        collapsed = (~informative_groups(local, g)).nonzero().flatten().tolist()
        found: list[tuple[dict, torch.Tensor, torch.Tensor]] = []  # (batch, row indices, rewards)
        rounds = 0
        while rounds < self.args.dynamic_sampling_max_rounds:
            missing = torch.tensor(float(len(collapsed) - len(found)), device=local.device)
            if self.accelerator.reduce(missing, reduction="max").item() <= 0:
                break
            prompts = self._draw_prompts(len(local) // g)
            extra = super()._generate_and_score_completions([r for r in prompts for _ in range(g)])
            self._add_unguided_keys(extra, out)
            extra_local = self._total_rewards(mode)[rows]
            for group in informative_groups(extra_local, g).nonzero().flatten().tolist():
                idx = torch.arange(group * g, (group + 1) * g)
                found.append((extra, idx, extra_local[idx]))
            rounds += 1
        replaced = min(len(collapsed), len(found))
        self._log(mode, "dapo/extra_rounds", rounds)
        self._log(mode, "dapo/groups_replaced", replaced)
        self._log(mode, "dapo/groups_still_collapsed", len(collapsed) - replaced)
        if replaced == 0:
            return out, rewards_all
        swap = dict(zip(collapsed[:replaced], found[:replaced], strict=True))
        parts, new_local = [], []
        for group in range(len(local) // g):
            if group in swap:
                batch, idx, rew = swap[group]
                parts.append((batch, idx))
                new_local.append(rew)
            else:
                idx = torch.arange(group * g, (group + 1) * g)
                parts.append((out, idx))
                new_local.append(local[idx])
        merged = take_rows(parts, self._tokenizer.pad_token_id)
        merged["num_items_in_batch"] = self.accelerator.gather(
            merged["completion_mask"].sum()
        ).sum()
        return merged, gather(torch.cat(new_local))

    # ------------------------------------------------------------------ seed methods

    def _add_guided_groups(self, out, rewards_all, inputs, g, mode):
        """OC-GRPO: a guided round for the all-fail groups, merged per ``oc_merge``.

        Each process samples its own all-fail groups again with the hint in the prompt,
        through TRL's generation and scoring; scoring gathers across processes, so every
        process generates as many groups as the process with the most (surplus dropped).
        Rescued groups enter with their unguided prompt (:meth:`_as_unguided`)."""
        cfg = self.args
        rows = self._process_rows(out["completion_ids"].size(0))
        local = rewards_all[rows]
        fail = all_fail_groups(local, g, threshold=cfg.reward_threshold)
        failed = fail.nonzero().flatten().tolist()
        count = torch.tensor(float(len(failed)), device=local.device)
        most = int(self.accelerator.reduce(count, reduction="max").item())
        if most == 0:
            self._log_oc_counts(mode, len(fail), 0, 0)
            return out, rewards_all
        picks = (failed * most)[:most] if failed else [0] * most
        source = [inputs[group * g + j] for group in picks for j in range(g)]
        hinted = guided_rows(
            source,
            column=cfg.oc_solution_column,
            fraction=cfg.oc_hint_fraction,
            unit=cfg.oc_hint_unit,
            template=cfg.oc_hint_template,
        )
        guided = super()._generate_and_score_completions(hinted)
        keep = torch.arange(len(failed) * g)
        guided_rewards = self._total_rewards(mode)[self._process_rows(most * g)][keep]
        pad = self._tokenizer.pad_token_id
        guided = self._as_unguided(take_rows([(guided, keep)], pad), out, failed, g)
        plan = oc_merge(local, guided_rewards, g, threshold=cfg.reward_threshold, mode=cfg.oc_merge)
        out.pop("ref_per_token_logps", None)  # recomputed on the merged batch
        self._add_unguided_keys(out, guided)
        both = take_rows([(out, torch.arange(len(local))), (guided, keep)], pad)
        merged = take_rows([(both, plan.rows)], pad)
        merged["oc_guided"] = plan.guided.to(local.device)
        merged["num_items_in_batch"] = self.accelerator.gather(
            merged["completion_mask"].sum()
        ).sum()
        self._log_oc_counts(mode, len(fail), len(failed), int(plan.rescued.sum()))
        self._log(mode, "oc/guided_rows_frac", plan.metrics["oc/guided_rows_frac"])
        return merged, gather(plan.rewards.to(local.device))

    def _as_unguided(self, guided, out, failed: list[int], g: int):
        """Guided rows as trained: on the unguided prompt of the group they came from, with
        the guided sampling log-probs log pi_old(o | q, hint) kept as ``oc_sampling_logps``
        (``old_per_token_logps``, when TRL keeps it, becomes log pi_old(o | q))."""
        source = torch.tensor([grp * g + j for grp in failed for j in range(g)], dtype=torch.long)
        completion = (guided["completion_ids"], guided["completion_mask"])
        with torch.no_grad():
            sampling = guided.get("old_per_token_logps")
            if sampling is None:
                sampling = self._logps(
                    self.model, guided["prompt_ids"], guided["prompt_mask"], *completion
                )
            guided["oc_sampling_logps"] = sampling
            guided["prompt_ids"] = out["prompt_ids"][source.to(out["prompt_ids"].device)]
            guided["prompt_mask"] = out["prompt_mask"][source.to(out["prompt_mask"].device)]
            if "old_per_token_logps" in guided:
                guided["old_per_token_logps"] = self._logps(
                    self.model, guided["prompt_ids"], guided["prompt_mask"], *completion
                )
        guided.pop("ref_per_token_logps", None)
        return guided

    @staticmethod
    def _add_unguided_keys(batch, like) -> None:
        """Give a batch of unguided rows the OC-GRPO entries ``like`` has (zero sampling
        log-probs, guided flag off), so that the two merge row by row."""
        mask = batch["completion_mask"]
        if "oc_sampling_logps" in like and "oc_sampling_logps" not in batch:
            dtype = like["oc_sampling_logps"].dtype
            batch["oc_sampling_logps"] = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        if "oc_guided" in like and "oc_guided" not in batch:
            batch["oc_guided"] = torch.zeros(mask.size(0), dtype=torch.bool, device=mask.device)

    def _log_oc_counts(self, mode: str, groups: int, failed: int, rescued: int) -> None:
        """All-fail and rescued groups summed over processes; ``oc/rescued_frac`` only on
        steps with an all-fail group (so its mean over steps is not diluted by zeros)."""
        device = self.accelerator.device
        counts = torch.tensor([groups, failed, rescued], dtype=torch.float, device=device)
        total_groups, total_failed, total_rescued = self.accelerator.reduce(
            counts, reduction="sum"
        ).tolist()
        self._log(mode, "oc/fail_groups", total_failed)
        self._log(mode, "oc/rescued_groups", total_rescued)
        self._log(mode, "oc/fail_frac", total_failed / max(total_groups, 1))
        if total_failed > 0:
            self._log(mode, "oc/rescued_frac", total_rescued / total_failed)

    def _verigate_advantages(self, out, rewards_all, outcome_all, g, mode) -> torch.Tensor:
        """VeriGate: token advantages (B_local, T), from process scores in the groups whose
        rewards are all equal, the recipe's (e.g. RCC) outcome advantages elsewhere.

        Steps are scored on each process for its rows; the group normalisation runs on
        the batch gathered from all processes."""
        cfg, acc = self.args, self.accelerator
        mask = out["completion_mask"]
        rows = self._process_rows(mask.size(0))
        needed = gated_groups(rewards_all, g).repeat_interleave(g)[rows].tolist()
        scores, index = step_scores_and_index(
            self._process_scorer,
            self._tokenizer,
            unpad(out["prompt_ids"], out["prompt_mask"]),
            unpad(out["completion_ids"], mask),
            needed,
            mask,
            rule=cfg.verigate_step_rule,
            pattern=cfg.verigate_step_pattern,
        )
        advantages, metrics = verigate_advantages(
            rewards_all,
            g,
            gather_object(scores),
            gather(acc.pad_across_processes(index, dim=1, pad_index=-1)),
            gather(acc.pad_across_processes(mask, dim=1, pad_index=0)),
            outcome=outcome_all,
            scale_by_std=self.recipe.scale_by_std,
            eps=cfg.adv_eps,
            process_norm=cfg.verigate_process_norm,
        )
        for key, value in metrics.items():
            self._log(mode, key, value)
        return advantages[rows, : mask.size(1)]

    def _add_reco_inputs(self, out, g, plain_old) -> None:
        """ReCo: occurrence weights of the local rows (counted over whole groups of the
        gathered batch) and the whole batch's normalisers (weighted rows and tokens, mean
        p(1-p) of pi_old), so that micro-batch losses add up to the loss of the window."""
        cfg = self.args
        mask = out["completion_mask"]
        ids = unpad(out["completion_ids"], mask)
        texts = None
        if cfg.reco_identity == "answer":
            texts = self._tokenizer.batch_decode(ids, skip_special_tokens=True)
        keys = gather_object(response_keys(ids, texts, cfg.reco_identity))
        rows = self._process_rows(mask.size(0))
        weights = occurrence_weights(keys, g)[rows].to(mask.device)
        out["reco_weights"] = weights
        out["reco_weight_sum"] = gather(weights.sum().reshape(1)).sum()
        out["reco_weighted_tokens"] = gather((weights * mask.sum(1)).sum().reshape(1)).sum()
        if cfg.reco_factor_norm == "mean":
            if plain_old is None:
                plain = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask)
                with torch.no_grad():
                    plain_old = self._logps(self.model, *plain)
            p = torch.exp(masked_fill_zero(plain_old, mask))
            var = masked_fill_zero(p * (1 - p), mask).sum().reshape(1)
            out["reco_variance_mean"] = gather(var).sum() / gather(mask.sum().reshape(1)).sum()

    def _seed_loss_options(self, inputs, accum: int) -> dict[str, Any]:
        """Keyword options of the ReCo / OC-GRPO losses for this micro-batch."""
        cfg = self.args
        if cfg.reco:
            # The whole window's weighted counts, per process (DDP averages the gradients).
            share = accum / (self.args.steps_per_generation * self.accelerator.num_processes)
            options = {
                "weights": inputs["reco_weights"],
                "factor_norm": cfg.reco_factor_norm,
                "num_rows": inputs["reco_weight_sum"] * share,
                "num_tokens": (inputs["reco_weighted_tokens"] * share).clamp(min=1),
            }
            if "reco_variance_mean" in inputs:
                options["variance_mean"] = inputs["reco_variance_mean"]
            return options
        if cfg.oc_grpo:
            return {
                "guided": inputs.get("oc_guided"),
                "max_weight": cfg.oc_max_weight,
                "level": cfg.oc_weight_level,
            }
        return {}

    def _add_bicc_inputs(self, out, rewards_all, rows, g, plain_old, mode, inputs) -> None:
        """Conditioned prompts for the local rows, and old/ref log-probs per the ratio mode."""
        cfg = self.args
        prompt_lists = gather_object(unpad(out["prompt_ids"], out["prompt_mask"]))
        completion_lists = gather_object(unpad(out["completion_ids"], out["completion_mask"]))
        tokenizer = self._tokenizer
        budget = context_budget(
            cfg.bicc_context_ratio,
            longest_prompt=max(len(p) for p in prompt_lists),
            max_completion_length=cfg.max_completion_length,
            max_seq_len=cfg.bicc_max_seq_len,
            max_positions=getattr(self.model.config, "max_position_embeddings", None),
        )
        strip = {tid for tid in (*self.eos_token_ids, tokenizer.pad_token_id) if tid is not None}
        chat = {}
        local_prompts = [x["prompt"] for x in inputs]
        if len(local_prompts) == out["prompt_ids"].size(0) and is_conversational(inputs[0]):
            # WIRING: rows added by OC-GRPO / dynamic sampling need their messages too.
            chat = dict(
                prompt_messages=gather_object(local_prompts),
                decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
                render=lambda msgs: self.processing_class.apply_chat_template(
                    msgs,
                    tools=self.tools or None,
                    chat_template=self.chat_template,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=False,
                    **self.chat_template_kwargs,
                ),
            )
        built = build_bicc_prompts(
            prompt_lists,
            completion_lists,
            rewards_all.cpu(),
            g,
            self._bicc_template,
            budget=budget,
            pad_token_id=tokenizer.pad_token_id,
            context_ratio=cfg.bicc_context_ratio,
            threshold=cfg.reward_threshold,
            truncation=cfg.bicc_truncation,
            placement=cfg.bicc_placement,
            strip_token_ids=strip,
            **chat,
        )
        device = out["prompt_ids"].device
        ids, attn = built.input_ids[rows], built.attention_mask[rows]
        width = int(attn.sum(1).max())  # drop columns that are padding in every local row
        out["bicc_prompt_ids"] = ids[:, ids.size(1) - width :].to(device)
        out["bicc_prompt_mask"] = attn[:, attn.size(1) - width :].to(device)
        self._log(mode, "bicc/context_tokens", built.context_tokens.float().mean())
        self._log(mode, "bicc/conditioned_frac", built.conditioned.float().mean())
        conditioned = (
            out["bicc_prompt_ids"],
            out["bicc_prompt_mask"],
            out["completion_ids"],
            out["completion_mask"],
        )
        with torch.no_grad():
            if cfg.bicc_mix < 1.0:
                # The plain-prompt share of the loss needs the plain old/ref log-probs.
                for key in ("old_per_token_logps", "ref_per_token_logps"):
                    if out.get(key) is not None:
                        out[f"plain_{key}"] = out[key]
            if cfg.bicc_ratio_mode == "paper":
                # rho = pi_theta(o | [q; O_opp]) / pi_old(o | q)
                out["old_per_token_logps"] = plain_old
            elif out.get("old_per_token_logps") is not None:
                # rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp]); on-policy TRL leaves
                # old unset and the loss uses the detached current log-probs: the same thing.
                out["old_per_token_logps"] = self._logps(
                    self.model, *conditioned, share_prefix=True
                )
            if cfg.bicc_ratio_mode == "consistent" and cfg.beta > 0:
                out["ref_per_token_logps"] = self._logps(
                    self.ref_model, *conditioned, share_prefix=True
                )

    def _log_batch_diagnostics(self, mode, rewards_all, delta_all, g, out) -> None:
        """Per-step diagnostics of the papers (documented in docs/metrics.md)."""
        cfg = self.args
        correct = rewards_all > cfg.reward_threshold
        self._log(mode, "reward/accuracy", correct.float().mean())
        self._log(mode, "adv/collapse_rate", collapse_rate(rewards_all, g))
        stats = {"rewards": rewards_all.detach().cpu()}
        if delta_all is not None:
            cov = group_covariance(rewards_all, delta_all.to(rewards_all.dtype), g)
            self._log(mode, "rcc/cov", cov.mean())
            self._log(mode, "rcc/delta_mean", delta_all.mean())
            if correct.any():
                self._log(mode, "rcc/delta_correct", delta_all[correct].mean())
            if (~correct).any():
                self._log(mode, "rcc/delta_wrong", delta_all[~correct].mean())
            if cfg.rcc:
                group_mean = group_view(rewards_all, g).mean(1).repeat_interleave(g)
                shift = rcc_baseline(rewards_all, delta_all, g, coef=cfg.rcc_coef) - group_mean
                self._log(mode, "rcc/baseline_shift", shift.abs().mean())
            stats["delta"] = delta_all.detach().cpu()
        if "advantages" in out and out["advantages"].dim() == 1:
            stats["advantages"] = gather(out["advantages"]).detach().cpu()
        self.last_batch_stats = stats

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
        """TRL hook: the recipe's loss on this micro-batch (scaled for gradient accumulation)."""
        cfg = self.args
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1
        prompt = (
            ("bicc_prompt_ids", "bicc_prompt_mask") if cfg.bicc else ("prompt_ids", "prompt_mask")
        )
        mask = inputs["completion_mask"]
        logp = self._logps(
            model,
            inputs[prompt[0]],
            inputs[prompt[1]],
            inputs["completion_ids"],
            mask,
            share_prefix=cfg.bicc,
        )
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        if "oc_guided" in inputs:  # guided rows: pi_old(o | q, hint), sampled with the hint
            old = torch.where(inputs["oc_guided"].unsqueeze(1), inputs["oc_sampling_logps"], old)
        sampling_delta = None
        if cfg.rcc and cfg.rcc_reference == "sampling":
            sampling_delta = sequence_delta(logp.detach(), old, mask, reduce=cfg.rcc_delta)
        g = self.num_generations
        if self.recipe.objective == "contrastive":
            baseline = inputs.get("conspo_baseline")
            if sampling_delta is not None:
                baseline = rcc_baseline(inputs["rewards"], sampling_delta, g, coef=cfg.rcc_coef)
            progress = self.state.global_step / max(self.state.max_steps, 1)
            margin = conspo_margin(
                progress, max_margin=cfg.conspo_max_margin, warmup=cfg.conspo_warmup
            )
            loss, metrics = conspo_loss(
                logp,
                mask,
                inputs["rewards"],
                g,
                tau=cfg.conspo_tau,
                margin=margin,
                threshold=cfg.reward_threshold,
                baseline=baseline,
            )
            loss = loss / accum
        else:
            advantages = inputs["advantages"]
            if sampling_delta is not None:
                advantages = recipe_advantages(
                    self.recipe,
                    inputs["rewards"],
                    g,
                    delta=sampling_delta,
                    rcc_coef=cfg.rcc_coef,
                    eps=cfg.adv_eps,
                )
            loss, metrics = policy_loss(
                self.loss_name, logp, old, advantages, mask, **self._loss_options(inputs, accum)
            )
        if cfg.bicc and cfg.bicc_mix < 1.0:
            loss = cfg.bicc_mix * loss + (1.0 - cfg.bicc_mix) * self._plain_share(
                model, inputs, accum
            )
        if not torch.isfinite(loss):
            self.nonfinite_losses += 1
            self._nonfinite_pending = True
            loss = torch.nan_to_num(loss, nan=0.0, posinf=0.0, neginf=0.0) * 0.0
        for key, value in metrics.items():
            self._log(mode, key, self.accelerator.gather(value.reshape(1)).nanmean())
        self._log(mode, "loss/nonfinite_total", self.nonfinite_losses)
        self._log(mode, "loss/skipped_updates_total", self.skipped_updates)
        return loss

    def _plain_share(self, model, inputs, accum: int) -> torch.Tensor:
        """The recipe's policy loss on the plain prompts, for ``bicc_mix < 1``."""
        mask = inputs["completion_mask"]
        logp = self._logps(
            model, inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"], mask
        )
        old = inputs.get("plain_old_per_token_logps")
        plain = {**inputs, "ref_per_token_logps": inputs.get("plain_ref_per_token_logps")}
        loss, _ = policy_loss(
            self.loss_name,
            logp,
            logp.detach() if old is None else old,
            inputs["advantages"],
            mask,
            **self._loss_options(plain, accum),
        )
        return loss

    def _loss_options(self, inputs, accum: int) -> dict[str, Any]:
        """Keyword options of the recipe's loss: clip bounds, KL, and the normalisers that
        make the summed micro-batch losses equal the loss of the whole window."""
        cfg = self.args
        accepted = loss_option_names(self.loss_name)
        options: dict[str, Any] = {
            **self._seed_loss_defaults,  # the recipe's clip bounds and aggregation
            "beta": cfg.beta,
            "ref_logp": inputs.get("ref_per_token_logps"),
        }
        if cfg.clip_low is not None:
            options["clip_low"] = cfg.clip_low
        if cfg.clip_high is not None:
            options["clip_high"] = cfg.clip_high
        if cfg.loss_agg is not None and "agg" in accepted:
            options["agg"] = cfg.loss_agg
        options["num_rows"] = inputs["completion_ids"].size(0) * accum
        if "num_tokens" in accepted:
            # num_items_in_batch counts the generation batch of every process; DDP averages
            # the processes' gradients, so each one divides by its share of the window.
            window = inputs["num_items_in_batch"] / self.accelerator.num_processes
            options["num_tokens"] = (window * accum / self.args.steps_per_generation).clamp(min=1)
        if "max_len" in accepted:
            options["max_len"] = self.args.max_completion_length
        options.update(self._seed_loss_options(inputs, accum))
        return options
