"""``crlvr_sync``: verl's synchronous v1 trainer with RCC, BiCC and whole ConSPO groups.

Registered in verl's trainer registry; select it with
``trainer.v1.trainer_mode=crlvr_sync``. It is verl's ``sync`` trainer
(``PPOTrainerSync``) with these hooks overridden, each doing one thing:

- ``__init__``: :func:`check_settings` refuses, naming the field, every
  combination the hooks cannot run, before any worker starts.
- ``_init_tokenizer``: verl's, also keeping the model's EOS list and window
  for BiCC's rows (what the TRL path reads from the model).
- ``_compute_advantage``: for the ``crlvr_*`` estimators that need more than
  rewards (RCC needs the reference log-probs, ConSPO the training progress for
  its margin), reads those fields and calls the registered estimator with
  them; every other estimator goes to verl's own path unchanged.
- ``_update_actor``: with ``policy_loss.bicc=True``, rewrites each row's
  prompt to its conditioned prompt, built by the TRL stage's
  :class:`~contrastive_rlvr.algorithms.bicc_rows.BiCCRowBuilder` (placement,
  chat rendering, budget, framing budget, pairing, template, EOS list),
  recomputes on it the old log-probs in the ``consistent`` ratio mode and,
  with a KL loss and ``bicc_kl_reference='conditioned'``, the reference ones,
  for the duration of the update, then puts the plain rows back. The old
  log-probs of the ``paper`` mode, the RCC delta and the logged metrics all
  see the plain prompt.
- ``_balance_batch``: with BiCC, balances on the conditioned lengths the
  update sees; with ConSPO, balances whole groups over the data-parallel
  ranks (verl balances rows, which splits groups), after checking the settings
  that keep every micro-batch made of whole groups.

Not supported with these features: multi-modal rows (BiCC rebuilds 1-D
position ids), multi-output agent loops (one row per session), rewards with
an in-reward KL penalty (``algorithm.use_kl_in_reward``) for the RCC/ConSPO
estimators, rollout-correction weights with the ``crlvr_*`` losses,
``bicc_mix < 1`` (docs/scale-out.md, "Refused at start").
"""

from __future__ import annotations

from typing import Any

import torch
import transfer_queue as tq
from omegaconf import DictConfig
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.utils import need_reference_policy
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.seqlen_balancing import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
)
from verl.workers.utils.padding import response_to_nested

from ...algorithms import collapse_rate, conspo_margin, context_budget, sequence_delta
from ...algorithms.bicc_rows import (
    BiCCRowBuilder,
    chat_renderer,
    end_token_ids,
    is_chat,
    template_encoder,
    text_decoder,
)
from .advantages import ESTIMATORS, EstimatorSpec, rcc_baselines
from .config import CrlvrPolicyLossConfig
from .groups import BiCCRows, bicc_rows, check_conspo_layout, group_rows, whole_group_order
from .losses import CONSPO_LOSS, PREFIX

TRAINER_NAME = "crlvr_sync"


def group_id(key: str) -> str:
    """The prompt uid of a TransferQueue key ``{uid}_{session_id}_{index}``."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3:
        raise ValueError(f"unexpected TransferQueue key {key!r}; expected uid_session_index")
    return parts[0]


def crlvr_options(config: DictConfig) -> CrlvrPolicyLossConfig:
    """The contrastive-rlvr hyperparameters of a verl config (defaults when not selected)."""
    loss_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.actor.policy_loss)
    return loss_cfg if isinstance(loss_cfg, CrlvrPolicyLossConfig) else CrlvrPolicyLossConfig()


def check_settings(config: DictConfig) -> CrlvrPolicyLossConfig:
    """Validate a verl config for ``crlvr_sync``; return our hyperparameters.

    Raises ``ValueError`` naming the setting when ConSPO's loss and estimator
    are not paired, when RCC has no reference policy, when ConSPO's micro-batches
    could split a group, when a rollout correction cannot be honoured
    (:func:`check_rollout_correction`), when ``use_prefix_grouper`` is set (inert
    here), when BiCC's consistent mode meets rollout bypass mode, or when a dynamic
    batch size's token limit cannot hold a conditioned row (:func:`check_bicc_token_limits`).
    """
    actor = config.actor_rollout_ref.actor
    loss_mode = actor.policy_loss.get("loss_mode", "vanilla")
    estimator = ESTIMATORS.get(config.algorithm.adv_estimator)
    is_target = str(actor.policy_loss.get("_target_", "")).endswith("CrlvrPolicyLossConfig")
    contrastive = estimator is not None and estimator.contrastive
    if (loss_mode == CONSPO_LOSS) != contrastive:
        raise ValueError(
            f"policy_loss.loss_mode={loss_mode!r} and algorithm.adv_estimator="
            f"{config.algorithm.adv_estimator!r} do not pair: the {CONSPO_LOSS} loss needs "
            "the crlvr_conspo or crlvr_conspo_rcc estimator and vice versa"
        )
    if loss_mode == CONSPO_LOSS and not is_target:
        raise ValueError(
            f"{CONSPO_LOSS} needs actor_rollout_ref.actor.policy_loss._target_="
            "contrastive_rlvr.integrations.verl.config.CrlvrPolicyLossConfig"
        )
    if estimator is not None and estimator.needs_ref and not need_reference_policy(config):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} needs the reference log-probs: set "
            "actor_rollout_ref.actor.use_kl_loss=True (kl_loss_coef may be 0)"
        )
    if estimator is not None and (estimator.needs_ref or contrastive):
        if config.algorithm.get("use_kl_in_reward", False):
            raise ValueError(
                f"algorithm.adv_estimator={estimator.name!r} does not support "
                "algorithm.use_kl_in_reward=True; use actor.use_kl_loss for the KL term"
            )
    check_rollout_correction(config, estimator, loss_mode)
    if contrastive:
        check_conspo_layout(
            group_size=int(config.actor_rollout_ref.rollout.n),
            shuffle=bool(actor.get("shuffle", False)),
            use_dynamic_bsz=bool(actor.get("use_dynamic_bsz", False)),
            micro_batch_size_per_gpu=actor.get("ppo_micro_batch_size_per_gpu"),
            mini_batch_size=int(actor.ppo_mini_batch_size),
        )
    if bool(actor.get("use_prefix_grouper", False)):
        # verl reads it in its legacy RayPPOTrainer only; the v1 engine workers ignore it.
        raise ValueError(
            "actor_rollout_ref.actor.use_prefix_grouper=True does nothing under "
            f"trainer.v1.trainer_mode={TRAINER_NAME} (verl's v1 engine workers do not read "
            "it); set it to false (docs/scale-out.md)"
        )
    options = crlvr_options(config)
    if recomputes_old_log_probs(config, options):
        if _rollout_correction(config).get("bypass_mode", False):
            raise ValueError(
                "policy_loss.bicc_ratio='consistent' recomputes the old log-probs on the "
                "conditioned prompt; it cannot run with algorithm.rollout_correction.bypass_mode"
            )
    if options.bicc:
        check_bicc_token_limits(config, options)
    return options


def _rollout_correction(config: DictConfig) -> Any:
    return config.algorithm.get("rollout_correction", None) or {}


def check_rollout_correction(config: DictConfig, estimator: EstimatorSpec | None, loss_mode: str):
    """Refuse the vLLM rollout corrections a ``crlvr_*`` estimator or loss cannot take.

    - IS weights / rejection sampling with an estimator ``crlvr_sync`` computes itself
      (RCC, ConSPO): it skips verl's correction step, so they would be dropped;
    - IS weights with a ``crlvr_*`` loss: the loss cannot apply them (it would raise in
      the worker at the first update);
    - bypass mode with RCC: old_log_probs become vLLM's rollout log-probs, so delta
      would be ``log pi_vllm - log pi_ref``, not the policy's shift.
    """
    correction = _rollout_correction(config)
    own = estimator is not None and (estimator.needs_ref or estimator.contrastive)
    if own and (correction.get("rollout_is") or correction.get("rollout_rs")):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} does not support "
            "algorithm.rollout_correction.rollout_is / rollout_rs; set them to null"
        )
    if str(loss_mode).startswith(PREFIX) and correction.get("rollout_is"):
        raise ValueError(
            f"policy_loss.loss_mode={loss_mode!r} does not apply rollout-correction "
            "importance weights; set algorithm.rollout_correction.rollout_is=null (or use a "
            "verl built-in loss)"
        )
    if estimator is not None and estimator.needs_ref and correction.get("bypass_mode", False):
        raise ValueError(
            f"algorithm.adv_estimator={estimator.name!r} takes RCC's delta = log pi_old - "
            "log pi_ref from old_log_probs; algorithm.rollout_correction.bypass_mode=True "
            "makes them vLLM's rollout log-probs, so delta would not be the policy's shift; "
            "set bypass_mode=false"
        )


def recomputes_old_log_probs(config: DictConfig, options: CrlvrPolicyLossConfig) -> bool:
    """Whether the actor update recomputes the old log-probs on the conditioned prompt:
    BiCC's ``consistent`` ratio mode, except under ConSPO's loss, which reads no old
    log-probs (no ratio; the same update in either mode, without the extra pass)."""
    loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
    return options.bicc and options.bicc_ratio == "consistent" and loss_mode != CONSPO_LOSS


def conditioned_reference(config: DictConfig, options: CrlvrPolicyLossConfig) -> bool:
    """Whether the KL term's reference is recomputed on the conditioned prompt:
    ``bicc_kl_reference='conditioned'`` with a KL loss, in every ratio mode, as the TRL
    path does with ``beta > 0``."""
    actor = config.actor_rollout_ref.actor
    return (
        options.bicc
        and options.bicc_kl_reference == "conditioned"
        and bool(actor.get("use_kl_loss", False))
        and float(actor.get("kl_loss_coef", 0.0)) > 0
    )


def bicc_token_limits(config: DictConfig, options: CrlvrPolicyLossConfig) -> dict[str, int]:
    """The token limits per micro-batch that conditioned rows pass through, by setting name:
    the actor update's with dynamic batch size, and in the consistent mode the old
    (and, with a conditioned reference, the reference) log-prob passes' (verl's
    ``max_token_len_per_gpu x ulysses_sequence_parallel_size``)."""
    arr = config.actor_rollout_ref
    sp = int(
        (arr.actor.get("fsdp_config", None) or {}).get("ulysses_sequence_parallel_size", None)
        or arr.actor.get("ulysses_sequence_parallel_size", 1)
        or 1
    )
    limits: dict[str, int] = {}
    if arr.actor.get("use_dynamic_bsz", False):
        limits["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] = (
            int(arr.actor.ppo_max_token_len_per_gpu) * sp
        )
    passes = []
    if recomputes_old_log_probs(config, options):
        passes.append(("rollout", arr.get("rollout", None)))
    if conditioned_reference(config, options):
        passes.append(("ref", arr.get("ref", None)))
    for name, section in passes:
        if section is not None and section.get("log_prob_use_dynamic_bsz", False):
            key = f"actor_rollout_ref.{name}.log_prob_max_token_len_per_gpu"
            limits[key] = int(section.log_prob_max_token_len_per_gpu) * sp
    return limits


def longest_conditioned_row(config: DictConfig, options: CrlvrPolicyLossConfig) -> int:
    """Prompt + context + response tokens of the longest row BiCC can build: the
    longest prompt ``data.max_prompt_length`` with the largest context budget."""
    prompt, response = int(config.data.max_prompt_length), int(config.data.max_response_length)
    budget = context_budget(
        options.bicc_context_ratio,
        longest_prompt=prompt,
        max_completion_length=response,
        max_seq_len=options.bicc_max_seq_len,
    )
    return prompt + budget + response


def check_bicc_token_limits(config: DictConfig, options: CrlvrPolicyLossConfig) -> None:
    """Refuse a dynamic batch size whose token limit cannot hold a conditioned row (verl
    would assert ``max_token_len >= max_seq_len`` inside a worker, mid-run)."""
    longest = longest_conditioned_row(config, options)
    for key, limit in bicc_token_limits(config, options).items():
        if limit < longest:
            raise ValueError(
                f"{key} gives {limit} tokens per micro-batch, but a BiCC row can reach "
                f"{longest} (data.max_prompt_length + context budget + "
                "data.max_response_length); raise it to at least "
                f"{longest} or lower policy_loss.bicc_context_ratio / bicc_max_seq_len"
            )


@register_trainer(TRAINER_NAME)
class CrlvrTrainer(PPOTrainerSync):
    """verl's sync trainer plus RCC inputs, BiCC rewriting and group-preserving balance.

    Overrides ``__init__`` (validation), ``_compute_advantage``, ``_update_actor``
    and ``_balance_batch`` (see the module docstring), and ``trainer_mode``.
    """

    def __init__(self, config: DictConfig) -> None:
        self.crlvr = check_settings(config)
        super().__init__(config)

    @property
    def trainer_mode(self) -> str:
        """verl compares the mode with ``"sync"`` to pick the replay buffer, refill and
        checkpoint behaviour; this trainer is the sync one under another registry name."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        # PPOTrainer.__init__ assigns config.trainer.v1.trainer_mode, the registry name.
        if value not in (TRAINER_NAME, "sync"):
            raise ValueError(
                f"{type(self).__name__} is the {TRAINER_NAME!r} trainer, not {value!r}"
            )

    @property
    def _estimator(self) -> EstimatorSpec | None:
        return ESTIMATORS.get(self.config.algorithm.adv_estimator)

    @property
    def _conspo(self) -> bool:
        spec = self._estimator
        return spec is not None and spec.contrastive

    # ------------------------------------------------------------------ advantages

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        spec = self._estimator
        if spec is None or not (spec.needs_ref or spec.contrastive):
            return super()._compute_advantage(batch, metrics)
        fields = ["response_mask", "rm_scores", "old_log_probs"]
        if spec.needs_ref:
            fields.append("ref_log_prob")
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        index = [group_id(k) for k in batch.keys]
        adv, returns = spec.fn(
            token_level_rewards=padded["rm_scores"],
            response_mask=padded["response_mask"],
            index=index,
            **self._estimator_kwargs(spec, padded),
        )
        rewards = padded["rm_scores"].sum(-1)
        metrics["crlvr/collapse_rate"] = _collapse_rate(rewards, index)
        metrics.update(self._estimator_metrics(spec, padded, rewards, index))
        out = TensorDict(
            {
                "advantages": response_to_nested(adv, nested_mask),
                "returns": response_to_nested(returns, nested_mask),
            },
            batch_size=len(batch),
        )
        # verl's workers read only the fields the returned meta lists: return the meta of
        # this write (it lists advantages and returns), never the one given.
        return _put(batch, fields=out)

    def _estimator_kwargs(self, spec: EstimatorSpec, padded: TensorDict) -> dict[str, Any]:
        """The extra inputs of a ``crlvr_*`` estimator, from the batch and our config."""
        opts = self.crlvr
        kwargs: dict[str, Any] = {}
        if spec.needs_ref:
            kwargs.update(
                old_log_probs=padded["old_log_probs"],
                ref_log_prob=padded["ref_log_prob"],
                rcc_coef=opts.rcc_coef,
                rcc_delta=opts.rcc_delta,
                rcc_bound=opts.rcc_bound,
            )
        if spec.contrastive:
            kwargs.update(
                progress=self._progress(),
                max_margin=opts.max_margin,
                margin_warmup=opts.margin_warmup,
                threshold=opts.threshold,
            )
        else:
            kwargs["eps"] = opts.adv_eps
        return kwargs

    def _estimator_metrics(
        self, spec: EstimatorSpec, padded: TensorDict, rewards: torch.Tensor, index: list[str]
    ) -> dict[str, float]:
        """What the estimator added to plain GRPO, logged each step: RCC's baseline shift
        ``b* - mean_g R`` (mean and largest magnitude over rows of groups of two or more)
        and ConSPO's margin ``m_t`` at this step's progress.

        Args:
            padded: the batch's padded fields (``old_log_probs``, ``ref_log_prob``,
                ``response_mask``: (B, T)). rewards: (B,). index: B group ids.
        """
        opts, out = self.crlvr, {}
        if spec.needs_ref:
            delta = sequence_delta(
                padded["old_log_probs"],
                padded["ref_log_prob"],
                padded["response_mask"].to(padded["old_log_probs"].dtype),
                reduce=opts.rcc_delta,
            )
            baseline = rcc_baselines(
                rewards.float(), delta.float(), index, coef=opts.rcc_coef, bound=opts.rcc_bound
            )
            rows = [r for r in group_rows(index) if len(r) > 1]
            shift = torch.cat(
                [baseline[r] - rewards[r].float().mean() for r in rows] or [torch.zeros(1)]
            )
            out["crlvr/rcc/baseline_shift_mean"] = shift.mean().item()
            out["crlvr/rcc/baseline_shift_max_abs"] = shift.abs().max().item()
            out["crlvr/rcc/delta_mean"] = delta.float().mean().item()
        if spec.contrastive:
            out["crlvr/conspo/margin"] = float(
                conspo_margin(
                    self._progress(), max_margin=opts.max_margin, warmup=opts.margin_warmup
                )
            )
        return out

    def _progress(self) -> float:
        """Training progress in [0, 1]: steps done / total steps (verl counts from 1)."""
        total = max(int(getattr(self, "total_training_steps", 0) or 0), 1)
        return min(max(self.global_steps - 1, 0) / total, 1.0)

    # ------------------------------------------------------------------ BiCC

    def _init_tokenizer(self) -> None:
        """verl's, keeping what BiCC's rows need from the model config as the TRL path
        does: every EOS id of the generation config (stripped from quoted attempts) and
        the model's window (which caps the context budget)."""
        model_config = omega_conf_to_dataclass(self.config.actor_rollout_ref.model)
        self.tokenizer = model_config.tokenizer
        self.processor = model_config.processor
        generation = getattr(model_config, "generation_config", None)
        self.end_token_ids = end_token_ids(
            self.tokenizer.eos_token_id, getattr(generation, "eos_token_id", None)
        )
        hf_config = getattr(model_config, "hf_config", None)
        self.max_positions = getattr(hf_config, "max_position_embeddings", None)

    def _bicc_builder(self) -> BiCCRowBuilder:
        """The TRL stage's row builder with this run's settings (policy_loss.bicc_*)."""
        opts, tokenizer = self.crlvr, self.tokenizer
        group_size = int(self.config.actor_rollout_ref.rollout.n)
        ends = getattr(self, "end_token_ids", None) or [tokenizer.eos_token_id]
        strip = {t for t in (*ends, tokenizer.pad_token_id) if t is not None}
        return BiCCRowBuilder(
            template=opts.bicc_template.encode(template_encoder(tokenizer), group_size),
            context_ratio=opts.bicc_context_ratio,
            max_seq_len=opts.bicc_max_seq_len,
            max_completion_length=int(self.config.data.max_response_length),
            truncation=opts.bicc_truncation,
            placement=opts.bicc_placement,
            threshold=opts.threshold,
            strip_token_ids=frozenset(strip),
            framing=opts.bicc_framing_budget,
            pairing=opts.bicc_pairing,
        )

    def _bicc_rows(self, batch: KVBatchMeta) -> BiCCRows:
        """Every row's conditioned prompt, built from TransferQueue's fields of ``batch``."""
        builder = self._bicc_builder()
        fields = ["prompts", "responses", "rm_scores"]
        chat = builder.placement not in ("after_prompt", "before_prompt")
        if chat:
            fields.append("raw_prompt")  # verl's chat messages of each row
        got = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        # raw_prompt comes back as lists, a non-tensor stack or numpy object arrays of
        # message dicts, depending on TransferQueue's backend: make each a list.
        messages = [list(m) for m in got["raw_prompt"]] if chat else None
        if messages is not None and not all(is_chat(m) for m in messages):
            messages = None  # text prompts: auto means after_prompt, user_turn raises
        tokenizer = self.tokenizer
        kwargs = self.config.data.get("apply_chat_template_kwargs", None)
        return bicc_rows(
            list(got["prompts"].unbind()),
            list(got["responses"].unbind()),
            torch.stack([r.sum() for r in got["rm_scores"].unbind()]).float(),
            # verl's padding rows (one shared uid) are no group: they keep their prompt
            # and do not count for the budget, as on TRL where they do not exist.
            [
                f"padding/{i}" if tag.get("is_padding", False) else group_id(key)
                for i, (key, tag) in enumerate(zip(batch.keys, batch.tags, strict=True))
            ],
            builder,
            pad_token_id=tokenizer.pad_token_id,
            max_positions=getattr(self, "max_positions", None),
            messages=messages,
            render=chat_renderer(tokenizer, dict(kwargs) if kwargs else None),
            decode=text_decoder(tokenizer),
        )

    def _update_actor(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        if not self.crlvr.bicc:
            return super()._update_actor(batch, metrics)
        conditioned, plain = self._condition_on_opposite(batch, metrics)
        try:
            if recomputes_old_log_probs(self.config, self.crlvr):
                # The recomputation's own entropy metric would describe the conditioned
                # prompts; the step keeps the one of the plain rollout.
                conditioned = self._compute_old_log_prob(conditioned, metrics={})
            if conditioned_reference(self.config, self.crlvr):
                # The KL term compares with the reference on the same prompt (TRL:
                # bicc_kl_reference='conditioned' with beta > 0, every ratio mode).
                conditioned = self._compute_ref_log_prob(conditioned, metrics={})
            super()._update_actor(conditioned, metrics)
        finally:
            restored = self._restore(batch, plain)
        return restored

    def _condition_on_opposite(
        self, batch: KVBatchMeta, metrics: dict
    ) -> tuple[KVBatchMeta, dict[str, Any]]:
        """Rewrite every row as ``[q ; O_opposite] + o`` in TransferQueue; return the meta of
        that write and the plain rows."""
        fields = ["prompts", "input_ids", "position_ids"]
        if recomputes_old_log_probs(self.config, self.crlvr):
            fields += ["old_log_probs", "entropy"]
        if conditioned_reference(self.config, self.crlvr):
            fields.append("ref_log_prob")
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=[*fields, "responses"]
        )
        if any(p.dim() != 1 for p in data["position_ids"].unbind()):
            raise ValueError("BiCC on verl supports text-only rows (1-D position ids)")
        responses = list(data["responses"].unbind())
        rows = self._bicc_rows(batch)
        self._check_row_lengths(rows, responses)
        plain = {"fields": data.select(*fields), "tags": [dict(tag) for tag in batch.tags]}
        conditioned = self._put_rows(batch, rows.prompts, responses)
        metrics["bicc/context_tokens"] = rows.context_tokens.float().mean().item()
        metrics["bicc/conditioned_frac"] = (rows.context_tokens > 0).float().mean().item()
        return conditioned, plain

    def _check_row_lengths(self, rows: BiCCRows, responses: list[torch.Tensor]) -> None:
        """A conditioned row longer than a dynamic batch's token limit fails here, naming
        the setting, instead of in verl's micro-batching assertion inside a worker (the
        user-turn placement re-tokenises the attempts, which the start check bounds only
        approximately)."""
        longest = max(len(p) + len(r) for p, r in zip(rows.prompts, responses, strict=True))
        for key, limit in bicc_token_limits(self.config, self.crlvr).items():
            if longest > limit:
                raise ValueError(
                    f"a BiCC row has {longest} tokens, more than {key}={limit} holds; raise "
                    "it or lower policy_loss.bicc_context_ratio / bicc_max_seq_len"
                )

    def _put_rows(
        self, batch: KVBatchMeta, prompts: list[torch.Tensor], responses: list
    ) -> KVBatchMeta:
        """Write prompts, input ids, position ids and length tags of every row; return the
        meta of the write."""
        input_ids = [torch.cat([p, r]) for p, r in zip(prompts, responses, strict=True)]
        fields = TensorDict(
            {
                "prompts": _nested(prompts),
                "input_ids": _nested(input_ids),
                "position_ids": _nested([torch.arange(len(x)) for x in input_ids]),
            },
            batch_size=len(batch),
        )
        for tag, p, x in zip(batch.tags, prompts, input_ids, strict=True):
            tag.update(prompt_len=len(p), seq_len=len(x))
        return _put(batch, fields=fields, tags=batch.tags)

    def _restore(self, batch: KVBatchMeta, plain: dict[str, Any]) -> KVBatchMeta:
        """Put the plain rows and tags back; return the meta of that write."""
        for tag, saved in zip(batch.tags, plain["tags"], strict=True):
            tag.clear()
            tag.update(saved)
        return _put(batch, fields=plain["fields"], tags=batch.tags)

    # ------------------------------------------------------------------ ConSPO groups

    def _balance_batch(self, batch, metrics, logging_prefix="global_seqlen", keep_minibatch=False):
        if not self.crlvr.bicc:
            return self._balance(batch, metrics, logging_prefix, keep_minibatch)
        # Balance on the lengths the actor's update will see: the conditioned rows (the
        # old / reference passes run on the plain ones). Only the local tags change, and
        # only for the balancing.
        added = self._bicc_rows(batch).context_tokens.tolist()
        plain = {key: tag["seq_len"] for key, tag in zip(batch.keys, batch.tags, strict=True)}
        for tag, extra in zip(batch.tags, added, strict=True):
            tag["seq_len"] = tag["seq_len"] + extra
        balanced = batch
        try:
            balanced = self._balance(batch, metrics, logging_prefix, keep_minibatch)
            return balanced
        finally:
            # verl's padding may return a new batch object; put the plain lengths on both.
            for meta in {id(batch): batch, id(balanced): balanced}.values():
                for key, tag in zip(meta.keys, meta.tags, strict=True):
                    if key in plain:
                        tag["seq_len"] = plain[key]

    def _balance(self, batch, metrics, logging_prefix, keep_minibatch):
        """verl's balance, or with ConSPO whole groups over the data-parallel ranks."""
        if not self._conspo:
            return super()._balance_batch(batch, metrics, logging_prefix, keep_minibatch)
        dp_size = self._actor_dp_size()
        actor = self.config.actor_rollout_ref.actor
        group_size = int(self.config.actor_rollout_ref.rollout.n)
        check_conspo_layout(
            group_size=group_size,
            shuffle=bool(actor.get("shuffle", False)),
            use_dynamic_bsz=bool(actor.get("use_dynamic_bsz", False)),
            micro_batch_size_per_gpu=actor.get("ppo_micro_batch_size_per_gpu"),
            mini_batch_size=int(actor.ppo_mini_batch_size),
            dp_size=dp_size,
        )
        multiple = self._get_required_batch_multiple(dp_size)
        if len(batch) % multiple != 0:
            raise ValueError(
                f"ConSPO: the batch has {len(batch)} rows, not a multiple of {multiple}; verl "
                "would pad it with rows that split groups. Make data.train_batch_size a "
                "multiple of actor.ppo_mini_batch_size and of the data-parallel size"
            )
        rows = group_rows([group_id(k) for k in batch.keys])
        if any(len(r) != group_size for r in rows) or len(rows) % dp_size != 0:
            raise ValueError(
                f"ConSPO needs {len(batch)} rows to form whole groups of rollout.n={group_size} "
                f"in a number divisible by the data-parallel size {dp_size}; got group sizes "
                f"{sorted({len(r) for r in rows})} and {len(rows)} groups"
            )
        seqlen = torch.tensor([tag["seq_len"] for tag in batch.tags], dtype=torch.int64)
        workload = calculate_workload(seqlen)
        group_work = [int(workload[r].sum()) for r in rows]
        parts = get_seqlen_balanced_partitions(group_work, k_partitions=dp_size, equal_size=True)
        batch.reorder(whole_group_order(parts, rows))
        group_len = [int(seqlen[r].sum()) for r in rows]
        metrics.update(
            log_seqlen_unbalance(seqlen_list=group_len, partitions=parts, prefix=logging_prefix)
        )
        return batch

    def _actor_dp_size(self) -> int:
        """Data-parallel size of the actor, as verl's ``_balance_batch`` finds it."""
        worker_group = self.actor_rollout_wg
        if "actor" not in worker_group._dispatch_info:
            worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
        return max(worker_group._dispatch_info["actor"]) + 1


def _put(batch: KVBatchMeta, fields: TensorDict, tags: list[dict] | None = None) -> KVBatchMeta:
    """Write ``fields`` (and ``tags``) for ``batch``'s rows; return TransferQueue's meta of
    the write, which lists every field stored for them, the written ones included.

    verl's workers fetch only the fields a meta lists, so a hook hands on this meta, not
    the one it was given (whose list predates the write). The batch's ``extra_info``
    (what the driver tells the workers, e.g. the sampling temperature) is carried over.
    """
    meta = tq.kv_batch_put(
        keys=batch.keys, partition_id=batch.partition_id, fields=fields, tags=tags
    )
    meta.extra_info = {**(batch.extra_info or {}), **(meta.extra_info or {})}
    return meta


def _nested(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _collapse_rate(rewards: torch.Tensor, index: list[str]) -> float:
    """Share of groups (of two or more rows) whose rewards are all equal (no gradient)."""
    rows = [r for r in group_rows(index) if len(r) > 1]
    if not rows:
        return 0.0
    return sum(float(collapse_rate(rewards[r], len(r))) for r in rows) / len(rows)
