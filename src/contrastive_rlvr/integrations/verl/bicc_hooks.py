"""The ``crlvr_sync`` BiCC hooks: each row is rewritten as ``[q ; O_opposite] + o``, built by
the TRL stage's :class:`~contrastive_rlvr.algorithms.bicc_rows.BiCCRowBuilder` (placement,
chat rendering, budget, framing budget, pairing, template, EOS list).

- ``bicc_form: conditioned`` (the paper): the actor update trains on the conditioned rows;
  the old log-probs (``consistent`` ratio mode) and the reference ones
  (``bicc_kl_reference='conditioned'`` with a KL loss) are recomputed on them, and the
  plain rows are put back after the update.
- ``bicc_form: distill``: the conditioned rows only feed the teacher's log-probs (verl's
  old-log-prob or reference pass, no gradient); the plain rows are put back with the
  teacher's log-probs and the rows taught next to them, and the update trains on the plain
  rows (the term is added in the workers' loss, :mod:`.distill`).
- ``bicc/transfer_cos`` on probed steps (``bicc_transfer_every``), before the update, in
  the actor's workers (:mod:`.worker`), with the TRL probe's warning
  (:class:`~contrastive_rlvr.algorithms.bicc_transfer.TransferWatch`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.utils.config import omega_conf_to_dataclass

from ...algorithms import group_advantages
from ...algorithms.bicc_rows import (
    BiCCRowBuilder,
    chat_renderer,
    end_token_ids,
    is_chat,
    template_encoder,
    text_decoder,
)
from ...algorithms.bicc_transfer import TransferWatch, probe_due, taught_rows
from . import transfer
from .distill import PROBE_ADVANTAGES, TAUGHT, TEACHER, distills
from .groups import BiCCRows, bicc_rows, grouped_apply
from .losses import is_contrastive_loss
from .settings import bicc_token_limits, conditioned_reference, recomputes_old_log_probs
from .worker import PROBE_PHASE, TRANSFER_KEY

#: What the low-transfer warning tells a verl run to do.
VERL_ADVICE = (
    "the conditioned share trains pi(.|[q;O]) in a direction unrelated to the reward on q; "
    "set actor_rollout_ref.actor.policy_loss.bicc_form=distill (the conditioned model as a "
    "teacher for the plain prompt), or policy_loss.bicc=false"
)
VERL_DISTILL_ADVICE = (
    "the distillation term pulls the plain prompt away from the reward's direction (a "
    "teacher that does not read the attempts); lower policy_loss.bicc_distill_weight, or "
    "policy_loss.bicc=false"
)


def row_token_counts(
    plain: list[torch.Tensor], conditioned: list[torch.Tensor], responses: list[torch.Tensor]
) -> dict[str, float]:
    """The batch's real tokens on each prompt, prompt and response (each (len,), unpadded),
    under TRL's keys ``tokens/loss_rows_plain`` / ``tokens/loss_rows_conditioned``: what
    BiCC adds to every forward verl's actor makes over the conditioned rows (verl removes
    the padding and shares no prefix, so each such forward encodes this many tokens)."""
    ends = [len(r) for r in responses]
    return {
        "tokens/loss_rows_plain": float(sum(len(p) + n for p, n in zip(plain, ends, strict=True))),
        "tokens/loss_rows_conditioned": float(
            sum(len(p) + n for p, n in zip(conditioned, ends, strict=True))
        ),
    }


def group_index(batch: KVBatchMeta) -> list[str]:
    """Each row's group id; verl's padding rows (one shared uid) are no group: each is its
    own, as on TRL where they do not exist."""
    return [
        f"padding/{i}" if tag.get("is_padding", False) else transfer.group_id(key)
        for i, (key, tag) in enumerate(zip(batch.keys, batch.tags, strict=True))
    ]


def probe_value(output: Any) -> float:
    """``bicc/transfer_cos`` from the probe's collected output: every rank returns the
    same all-reduced value, as one dict or one dict per rank."""
    metrics = output["metrics"]
    metrics = getattr(metrics, "data", metrics)
    if isinstance(metrics, dict):
        metrics = [metrics]
    values = [float(m[TRANSFER_KEY]) for m in metrics if TRANSFER_KEY in m]
    if not values:
        raise RuntimeError("the transfer probe returned no bicc/transfer_cos")
    return values[0]


class BiCCHooks:
    """``_init_tokenizer`` and ``_update_actor`` of :class:`~.trainer.CrlvrTrainer` (a mixin
    before verl's ``PPOTrainerSync``, whose hooks it wraps). Reads the trainer's ``config``
    and ``crlvr`` (our fields); ``_bicc_rows`` serves the balancing too."""

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
            threshold=opts.reward_threshold,
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
        got = transfer.fetch(batch, fields)
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
            group_index(batch),
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
        probe = self._transfer_due()
        if distills(self.crlvr):
            # The update reads the plain rows; the conditioned ones only feed the teacher.
            batch = self._teach(batch, metrics)
            if probe:
                self._probe_transfer(batch, "plain", metrics)
                self._probe_transfer(batch, "applied", metrics)
            return super()._update_actor(batch, metrics)
        if probe:
            self._probe_transfer(batch, "plain", metrics)
        conditioned, plain = self._condition_on_opposite(batch, metrics, self._plain_fields())
        try:
            if recomputes_old_log_probs(self.config, self.crlvr):
                # The recomputation's own entropy metric would describe the conditioned
                # prompts; the step keeps the one of the plain rollout.
                conditioned = self._compute_old_log_prob(conditioned, metrics={})
            if conditioned_reference(self.config, self.crlvr):
                # The KL term compares with the reference on the same prompt (TRL:
                # bicc_kl_reference='conditioned' with beta > 0, every ratio mode).
                conditioned = self._compute_ref_log_prob(conditioned, metrics={})
            if probe:
                self._probe_transfer(conditioned, "applied", metrics)
            super()._update_actor(conditioned, metrics)
        finally:
            restored = self._restore(batch, plain)
        return restored

    def _plain_fields(self) -> list[str]:
        """The fields the conditioned passes overwrite, kept to put the plain rows back."""
        fields = ["prompts", "input_ids", "position_ids"]
        teacher = self.crlvr.bicc_teacher if distills(self.crlvr) else None
        if teacher == "sampling" or recomputes_old_log_probs(self.config, self.crlvr):
            fields += ["old_log_probs", "entropy"]
        if teacher == "reference" or conditioned_reference(self.config, self.crlvr):
            fields.append("ref_log_prob")
        return fields

    def _teach(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        """``bicc_form: distill``: the teacher's log-probs of every sampled token on the
        row's conditioned prompt, ``log pi(o_t | [q ; O_opp])``, taken now by the policy that
        sampled the batch (``bicc_teacher: sampling``: verl's old-log-prob pass, no
        gradient, before this batch's update) or the frozen reference (``reference``), and
        the rows it teaches (:func:`~contrastive_rlvr.algorithms.bicc_transfer.taught_rows`),
        written as :data:`~.distill.TEACHER` / :data:`~.distill.TAUGHT` (response-shaped)
        next to the plain rows, which are put back. Returns the meta of that write."""
        sampling = self.crlvr.bicc_teacher == "sampling"
        key = "old_log_probs" if sampling else "ref_log_prob"
        conditioned, plain = self._condition_on_opposite(batch, metrics, self._plain_fields())
        try:
            if sampling:
                conditioned = self._compute_old_log_prob(conditioned, metrics={})
            else:
                conditioned = self._compute_ref_log_prob(conditioned, metrics={})
            teacher = [t.float() for t in transfer.fetch(conditioned, [key])[key].unbind()]
        finally:
            restored = self._restore(batch, plain)
        scores = transfer.fetch(restored, ["rm_scores"])["rm_scores"]
        rewards = torch.stack([r.sum() for r in scores.unbind()]).float()
        taught = taught_rows(
            rewards,
            plain["context_tokens"] > 0,
            self.crlvr.reward_threshold,
            self.crlvr.bicc_distill_rows,
        )
        flags = [
            torch.full_like(t, float(f)) for t, f in zip(teacher, taught.tolist(), strict=True)
        ]
        fields = TensorDict(
            {TEACHER: transfer.nested(teacher), TAUGHT: transfer.nested(flags)},
            batch_size=len(batch),
        )
        metrics["bicc/taught_frac"] = taught.float().mean().item()
        return transfer.put(restored, fields=fields, tags=restored.tags)

    def _transfer_due(self) -> bool:
        """Whether this step is probed: ``bicc_transfer_every`` counts optimizer steps from
        the first, as on the TRL path (verl's ``global_steps`` starts at 1)."""
        return probe_due(int(self.global_steps) - 1, int(self.crlvr.bicc_transfer_every))

    def _probe_transfer(self, batch: KVBatchMeta, phase: str, metrics: dict) -> None:
        """One phase of the transfer probe in the actor's workers
        (:meth:`~.worker.CrlvrActorRolloutRefWorker.crlvr_transfer_probe`) with the settings
        the update passes; after ``"applied"``, logs ``bicc/transfer_cos`` and warns once
        after 3 low probes (:class:`~contrastive_rlvr.algorithms.bicc_transfer.TransferWatch`)."""
        actor = self.config.actor_rollout_ref.actor
        rows = int(actor.ppo_mini_batch_size) * int(self.config.actor_rollout_ref.rollout.n)
        info = {
            **(batch.extra_info or {}),
            PROBE_PHASE: phase,
            "calculate_entropy": bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
            "global_batch_size": rows,
            "mini_batch_size": rows,
            "temperature": self.config.actor_rollout_ref.rollout.temperature,
        }
        if phase == "plain" and is_contrastive_loss(actor.policy_loss.get("loss_mode", "")):
            batch = self._put_probe_advantages(batch)
        meta = dataclasses.replace(batch, tags=[dict(t) for t in batch.tags], extra_info=info)
        output = self.actor_rollout_wg.crlvr_transfer_probe(meta)
        if phase != "applied":
            return
        value = probe_value(output)
        metrics[TRANSFER_KEY] = value
        if getattr(self, "_transfer_watch", None) is None:
            distill = self.crlvr.bicc_form == "distill"
            advice = VERL_DISTILL_ADVICE if distill else VERL_ADVICE
            self._transfer_watch = TransferWatch(self.crlvr.bicc_transfer_warn, advice)
        self._transfer_watch.record(value)

    def _put_probe_advantages(self, batch: KVBatchMeta) -> KVBatchMeta:
        """ConSPO's ``advantages`` carry its targets (:mod:`.groups`); plain GRPO's surrogate
        takes GRPO's group advantages of the rewards instead (as the TRL path's probe reads
        TRL's), written as :data:`~.distill.PROBE_ADVANTAGES`."""
        got = transfer.fetch(batch, ["rm_scores"])
        rewards = torch.stack([r.sum() for r in got["rm_scores"].unbind()]).float()
        eps = self.crlvr.adv_eps
        index = group_index(batch)
        adv = grouped_apply(index, lambda g, r: group_advantages(r, g, eps=eps), rewards)
        scores = got["rm_scores"].unbind()
        rows = [torch.full(r.shape, float(a)) for r, a in zip(scores, adv, strict=True)]
        fields = TensorDict({PROBE_ADVANTAGES: transfer.nested(rows)}, batch_size=len(batch))
        return transfer.put(batch, fields=fields, tags=batch.tags)

    def _condition_on_opposite(
        self, batch: KVBatchMeta, metrics: dict, fields: list[str]
    ) -> tuple[KVBatchMeta, dict[str, Any]]:
        """Rewrite every row as ``[q ; O_opposite] + o`` in TransferQueue; return the meta of
        that write and the plain rows (their ``fields``, tags and each row's
        ``context_tokens``, (B,))."""
        data = transfer.fetch(batch, [*fields, "responses"])
        if any(p.dim() != 1 for p in data["position_ids"].unbind()):
            raise ValueError("BiCC on verl supports text-only rows (1-D position ids)")
        responses = list(data["responses"].unbind())
        rows = self._bicc_rows(batch)
        self._check_row_lengths(rows, responses)
        plain = {
            "fields": data.select(*fields),
            "tags": [dict(tag) for tag in batch.tags],
            "context_tokens": rows.context_tokens,
        }
        conditioned = self._put_rows(batch, rows.prompts, responses)
        metrics["bicc/context_tokens"] = rows.context_tokens.float().mean().item()
        metrics["bicc/conditioned_frac"] = (rows.context_tokens > 0).float().mean().item()
        metrics.update(row_token_counts(list(data["prompts"].unbind()), rows.prompts, responses))
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
                "prompts": transfer.nested(prompts),
                "input_ids": transfer.nested(input_ids),
                "position_ids": transfer.nested([torch.arange(len(x)) for x in input_ids]),
            },
            batch_size=len(batch),
        )
        for tag, p, x in zip(batch.tags, prompts, input_ids, strict=True):
            tag.update(prompt_len=len(p), seq_len=len(x))
        return transfer.put(batch, fields=fields, tags=batch.tags)

    def _restore(self, batch: KVBatchMeta, plain: dict[str, Any]) -> KVBatchMeta:
        """Put the plain rows and tags back; return the meta of that write."""
        for tag, saved in zip(batch.tags, plain["tags"], strict=True):
            tag.clear()
            tag.update(saved)
        return transfer.put(batch, fields=plain["fields"], tags=batch.tags)
