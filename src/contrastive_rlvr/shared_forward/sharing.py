"""Which forward computes the log-probs of rows whose prompts repeat, chosen once per model
and logged, and the call that runs it in place of TRL's per-row forward.

Under BiCC every row of one partition of a group reads the same conditioned prompt
``[q ; O_opp]``; under plain GRPO every row of a group reads the same ``q``. Three forms
give the same log-probs (tests/shared_forward/: test_packed_prefix.py, test_sharing.py):

- ``"packed"`` (:mod:`.packed_prefix`): one forward in which each distinct prompt is
  encoded once and every completion attends to it and to itself. One forward per
  backward, so it runs under gradient checkpointing, DDP, ZeRO and FSDP. Needs a model
  whose attention takes the layout (:func:`~.packed_prefix.supports_packed_prefix`), and
  proof: before its first use on a model, :func:`~.probe.probe_packed_forward` compares it
  with the per-row forward, in float32, on a synthetic batch at the longest length the run
  can reach (``max_width``; past any rope-scaling threshold), and again should a batch
  ever be longer than the length proven; where they differ the run falls back to per
  row, the reason logged.
- ``"cache"`` (:mod:`.prefix`): the two-pass key/value-cache form, for a model the packed
  form cannot take, in one process without gradient checkpointing (it is two forwards per
  backward and needs the cache). No entropies: a call that needs them runs per row.
- per row: TRL's ``_get_per_token_logps_and_entropies``, always right; also taken for
  multimodal inputs and a MoE model's router loss (the packed layout changes which tokens
  the router sees, so its load-balancing loss would differ).

What is shared is the run's choice: ``share_prefix`` for BiCC's conditioned prompts (on by
default), ``share_plain_prompt`` for plain prompts (off by default, so that with the
project's additions off every forward is TRL's own). docs/performance.md has the
measurements.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, Literal

import torch

from .layout import PackedPrefixUnsupported, _unwrap
from .packed_kernels import enable_kernel_form
from .packed_prefix import enable_split_attention, packed_prefix_forward, supports_packed_prefix
from .prefix import shared_prefix_logps
from .probe import probe_packed_forward
from .tokens import LossForwardTokens, PromptKind, cache_tokens, packed_tokens, row_tokens

logger = logging.getLogger(__name__)

Form = Literal["packed", "cache"]
LogpsAndEntropies = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


class PromptSharing:
    """The run's choice of forward for repeated prompts.

    Args:
        conditioned: share BiCC's conditioned prompts (``share_prefix``).
        plain: share plain prompts (``share_plain_prompt``).
        gradient_checkpointing: the cache form cannot run under it.
        num_processes: the cache form cannot run under DDP (two forwards per backward).
        max_width: the longest prompt + completion (with BiCC's context) the run can reach
            (:func:`reachable_width`), the length the probe proves the packed form at; None:
            the first batch's. A longer batch is proven at its own length first.

    ``prompts(kind)`` says which prompts the next forwards read (``"plain"`` outside it);
    ``forward`` runs them shared when the run shares that kind and the model allows, and
    returns None otherwise (the caller runs TRL's per-row forward).
    """

    def __init__(
        self,
        *,
        conditioned: bool,
        plain: bool,
        gradient_checkpointing: bool,
        num_processes: int,
        max_width: int | None = None,
    ) -> None:
        self.max_width = max_width
        self.enabled: dict[str, bool] = {"conditioned": conditioned, "plain": plain}
        self.cache_allowed = not gradient_checkpointing and num_processes == 1
        self.kind: PromptKind = "plain"
        self._forms: dict[int, Form | None] = {}
        self._said: set[str] = set()  # per-row fallbacks already logged
        self._roles: dict[int, str] = {}
        self._proven: dict[int, int] = {}  # model -> the width its packed form was proven at
        self._ran: Form | None = None  # the shared form the last forward ran, if one did
        self.tokens = LossForwardTokens()  # what the loss's forwards encode (tokens.py)

    @property
    def active(self) -> bool:
        return any(self.enabled.values())

    def prepare(self, model: torch.nn.Module, role: str) -> Form | None:
        """Choose the form for ``model`` (switching an SDPA model to split attention for the
        packed form) and log it with the reason when it is not the packed one."""
        if not self.active or model is None:
            return None
        key = id(model)
        self._roles.setdefault(key, role)
        if key not in self._forms:
            ok, reason = supports_packed_prefix(model)
            if ok:
                attention = "split SDPA" if enable_split_attention(model) else None
                kernel = enable_kernel_form(model)
                attention = attention or kernel or _unwrap(model).config._attn_implementation
                self._forms[key] = "packed"
                logger.info(
                    "prompt sharing (%s): packed forward (%s attention), once its probe passes",
                    role,
                    attention,
                )
            elif self.cache_allowed:
                self._forms[key] = "cache"
                logger.warning("prompt sharing (%s): key/value-cache form, as %s", role, reason)
            else:
                self._forms[key] = None
                logger.warning(
                    "prompt sharing (%s): per-row forward, as %s (and the cache form needs one "
                    "process without gradient checkpointing)",
                    role,
                    reason,
                )
        return self._forms[key]

    def _prove(
        self, model: torch.nn.Module, width: int, completion_len: int, autocast: Callable[[], Any]
    ) -> bool:
        """The packed form's probe (:func:`~.probe.probe_packed_forward`) at the run's longest
        width (``max_width``, or this batch's if longer), at the model's first shared forward
        and again at a batch longer than any proven. A model that fails it runs per row for
        the rest of the run, the measured difference logged."""
        key = id(model)
        if width <= self._proven.get(key, -1):
            return True
        target = max(width, self.max_width or 0)
        ok, summary = probe_packed_forward(model, target, completion_len, autocast=autocast)
        role = self._roles.get(key, "model")
        if ok:
            self._proven[key] = target
            logger.info("prompt sharing (%s): packed forward proven: %s", role, summary)
            return True
        self._forms[key] = None
        logger.warning(
            "prompt sharing (%s): per-row forward, as the packed forward is not exact on this "
            "model: %s",
            role,
            summary,
        )
        return False

    @contextmanager
    def prompts(self, kind: PromptKind) -> Iterator[None]:
        """The forwards inside read prompts of this kind."""
        before, self.kind = self.kind, kind
        try:
            yield
        finally:
            self.kind = before

    def _per_row(self, reason: str) -> None:
        """None (TRL's per-row forward runs), the reason logged the first time."""
        if reason not in self._said:
            self._said.add(reason)
            logger.warning("prompt sharing (%s prompts): per-row forward, as %s", self.kind, reason)
        return None

    def forward(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        *,
        batch_size: int | None,
        compute_entropy: bool,
        compute_aux_loss: bool,
        extra: dict[str, Any],
        autocast: Callable[[], Any] = nullcontext,
    ) -> LogpsAndEntropies | None:
        """TRL's ``_get_per_token_logps_and_entropies`` outputs (log-probs (B, C), entropies
        (B, C) or None, no router loss) from the shared form, or None where the per-row
        forward must run. ``input_ids`` (B, P + C) are left-padded prompts then right-padded
        completions, as TRL builds them; ``extra`` are TRL's multimodal arguments.

        Every forward the trainer makes comes here, so its tokens are counted here
        (:attr:`tokens`, inside the loss only): the rows', and what the form that ran
        encoded (the per-row forward's are the rows')."""
        self._ran = None
        out = self._shared_forward(
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=batch_size,
            compute_entropy=compute_entropy,
            compute_aux_loss=compute_aux_loss,
            extra=extra,
            autocast=autocast,
        )
        if self.tokens.on:
            rows = row_tokens(attention_mask)
            prompt_len = input_ids.size(1) - logits_to_keep
            prompt = (input_ids[:, :prompt_len], attention_mask[:, :prompt_len])
            completion_mask = attention_mask[:, prompt_len:]
            if self._ran == "packed":
                chunk = None if torch.is_grad_enabled() else batch_size
                encoded = packed_tokens(*prompt, completion_mask, chunk_rows=chunk)
            elif self._ran == "cache":
                encoded = cache_tokens(*prompt, completion_mask)
            else:
                encoded = rows
            self.tokens.add(self.kind, rows, encoded)
        return out

    def _shared_forward(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        *,
        batch_size: int | None,
        compute_entropy: bool,
        compute_aux_loss: bool,
        extra: dict[str, Any],
        autocast: Callable[[], Any],
    ) -> LogpsAndEntropies | None:
        """:meth:`forward`'s outputs; sets ``_ran`` to the shared form that ran, if one did."""
        if not self.enabled[self.kind]:
            return None
        if compute_aux_loss:
            return self._per_row("a MoE router loss is asked for (packing changes its tokens)")
        if any(value is not None for value in extra.values()):
            return self._per_row("the inputs are multimodal")
        form = self._forms.get(id(model))
        if form == "packed" and not self._prove(model, input_ids.size(1), logits_to_keep, autocast):
            form = None
        if form is None:
            return None
        prompt_len = input_ids.size(1) - logits_to_keep
        tensors = (
            input_ids[:, :prompt_len],
            attention_mask[:, :prompt_len],
            input_ids[:, prompt_len:],
            attention_mask[:, prompt_len:],
        )
        if form == "cache":
            # Pass 1 encodes each prompt less its last token: it must not be empty.
            if compute_entropy:
                return self._per_row("the key/value-cache form gives no entropies (TRL's loss)")
            if int(tensors[1].sum(1).min()) < 2:
                return self._per_row("a prompt has fewer than 2 tokens (the cache form's pass 1)")
            with autocast():
                out = shared_prefix_logps(model, *tensors), None, None
            self._ran = "cache"
            return out
        # Under gradient: one forward for the micro-batch (DDP, ZeRO and checkpointing need
        # one forward per backward). Without: TRL's chunking of the generation batch.
        chunk = None if torch.is_grad_enabled() else batch_size
        try:
            with autocast():
                logps, entropies = packed_prefix_forward(
                    model, *tensors, chunk_rows=chunk, entropy=compute_entropy
                )
        except PackedPrefixUnsupported as err:  # this batch only (flash varlen's holes)
            return self._per_row(str(err))
        self._ran = "packed"
        return logps, entropies, None


#: Prompts of the train dataset measured for the run's longest width (the first ones: a
#: longer prompt later is proven when its batch comes, see :meth:`PromptSharing._prove`).
WIDTH_SAMPLE = 512


def prompt_length(tokenizer: Any, prompt: Any) -> int:
    """Tokens of one dataset prompt as the trainer renders it: chat messages through the
    tokenizer's template with the generation header, text as it is."""
    if isinstance(prompt, list):  # chat messages
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    else:
        ids = tokenizer(prompt)["input_ids"]
    return len(ids)


def reachable_width(
    prompts: list,
    tokenizer: Any,
    max_positions: int | None,
    *,
    max_completion_length: int,
    bicc_context_ratio: float | None = None,
    bicc_max_seq_len: int | None = None,
) -> int | None:
    """The longest prompt + context + completion a run can give a forward: the longest of
    ``prompts`` (text or chat messages, tokenized as TRL does; the first
    :data:`WIDTH_SAMPLE`), plus BiCC's context budget at that prompt
    (:func:`~contrastive_rlvr.algorithms.context_budget`) when BiCC is on (a
    ``bicc_context_ratio``), plus ``max_completion_length``; capped at ``max_positions``.
    None without prompts or a tokenizer (the probe then takes the first batch's width, and
    a longer batch's)."""
    from ..algorithms import context_budget

    if not prompts or tokenizer is None:
        return None

    longest = max(prompt_length(tokenizer, p) for p in prompts[:WIDTH_SAMPLE])
    context = 0
    if bicc_context_ratio is not None:
        context = context_budget(
            bicc_context_ratio,
            longest_prompt=longest,
            max_completion_length=max_completion_length,
            max_seq_len=bicc_max_seq_len,
        )
    width = longest + context + max_completion_length
    return min(width, max_positions) if max_positions else width


def dataset_reachable_width(dataset, tokenizer, model, **widths: Any) -> int | None:
    """The longest forward a run on ``dataset`` can reach, for the shared forward's probe
    (:func:`reachable_width` over the first :data:`WIDTH_SAMPLE` prompts, with its keyword
    ``widths``); None when the dataset cannot be sampled (an iterable one: the probe then
    follows the batches' widths)."""
    columns = getattr(dataset, "column_names", None) or ()
    if "prompt" not in columns or not hasattr(dataset, "select"):
        return None
    sample = dataset.select(range(min(WIDTH_SAMPLE, len(dataset))))
    positions = getattr(model.config, "max_position_embeddings", None)
    return reachable_width(list(sample["prompt"]), tokenizer, positions, **widths)
