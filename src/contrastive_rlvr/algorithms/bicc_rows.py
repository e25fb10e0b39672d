"""BiCC's conditioned rows of a batch, as both engines build them (TRL stage and verl hook).

:func:`~contrastive_rlvr.algorithms.bicc.build_bicc_prompts` owns the partition,
the framing and the truncation; this module owns what each engine would
otherwise decide for itself: the context budget (:func:`context_budget` on
the batch's longest prompt, capped by ``bicc_max_seq_len`` and the model's
window), the placement (``auto``: the user turn for chat prompts), the check
that re-rendering a chat prompt reproduces the ids the rows were generated
from, and the token ids stripped from quoted attempts (:func:`end_token_ids`).
The TRL stage (``trainer/stages/bicc.py``) and the verl trainer
(``integrations/verl/bicc_hooks.py``) both call :meth:`BiCCRowBuilder.build`, so a
row means the same on either engine (tests/scale_out/test_verl_parity.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .bicc import (
    DEFAULT_FRAMING,
    BiCCPrompts,
    EncodedTemplate,
    Messages,
    RenderChat,
    build_bicc_prompts,
    context_budget,
    context_room,
    resolve_placement,
)
from .ops import Tensor


def end_token_ids(
    tokenizer_eos: int | None, generation_eos: int | Sequence[int] | None
) -> list[int]:
    """Every id that ends a completion: the model's generation-config EOS ids, with the
    tokenizer's EOS first when the config lacks it (TRL's ``GRPOTrainer`` rule)."""
    if generation_eos is None:
        ids: list[int] = []
    elif isinstance(generation_eos, int):
        ids = [generation_eos]
    else:
        ids = list(generation_eos)
    if tokenizer_eos is not None and tokenizer_eos not in ids:
        ids = [tokenizer_eos, *ids]
    return ids


def is_chat(prompt: Any) -> bool:
    """Whether a prompt is a list of chat messages (``{"role", "content"}`` dicts)."""
    return (
        isinstance(prompt, Sequence)
        and not isinstance(prompt, str)
        and len(prompt) > 0
        and all(isinstance(m, Mapping) and "role" in m for m in prompt)
    )


@dataclass(frozen=True)
class BiCCRowBuilder:
    """The settings of a run's conditioned rows and the one way to build them.

    Attributes:
        template: the framing text, encoded (:meth:`BiCCTemplate.encode`).
        context_ratio: share of ``L`` given to the added context, in (0, 1).
        max_seq_len: ``L`` when set (``bicc_max_seq_len``); None: the batch's longest
            prompt + ``max_completion_length``.
        max_completion_length: TRL's ``max_completion_length``, verl's
            ``data.max_response_length``.
        truncation, placement, threshold: as in :func:`build_bicc_prompts`.
        strip_token_ids: dropped from the end of quoted attempts (EOS list and pad).
        framing: what the budget pays for: ``"outside"``, the attempts' tokens (the
            framing text on top, the model's positions capping the whole context);
            ``"inside"``, framing and attempts together (``bicc_framing_budget``).
        pairing: ``"partition"`` or ``"one_opposite"`` (``bicc_pairing``).
    """

    template: EncodedTemplate
    context_ratio: float
    max_seq_len: int | None
    max_completion_length: int
    truncation: str
    placement: str
    threshold: float
    strip_token_ids: frozenset[int] = field(default_factory=frozenset)
    framing: str = DEFAULT_FRAMING
    pairing: str = "partition"

    def budget(self, longest_prompt: int, max_positions: int | None = None) -> int:
        """The context budget (:func:`context_budget`): the attempts' tokens with
        ``framing="outside"`` (the positions cap the whole context through :meth:`room`),
        everything added with ``"inside"`` (the positions cap it here)."""
        return context_budget(
            self.context_ratio,
            longest_prompt=longest_prompt,
            max_completion_length=self.max_completion_length,
            max_seq_len=self.max_seq_len,
            max_positions=max_positions if self.framing == "inside" else None,
        )

    def room(self, longest_prompt: int, max_positions: int | None = None) -> int | None:
        """What the model's positions leave for the whole context (``framing="outside"``;
        None otherwise or when the window is unknown)."""
        if self.framing == "inside" or max_positions is None:
            return None
        return context_room(longest_prompt, self.max_completion_length, max_positions)

    def needs_chat(self, conversational: bool) -> bool:
        """Whether the rows need the prompts' messages and the chat rendering."""
        return resolve_placement(self.placement, conversational) == "user_turn"

    def build(
        self,
        prompt_ids: Sequence[Sequence[int]],
        completion_ids: Sequence[Sequence[int]],
        rewards: Tensor,
        group_size: int,
        *,
        pad_token_id: int,
        budget: int | None = None,
        max_positions: int | None = None,
        messages: Sequence[Messages] | None = None,
        render: RenderChat | None = None,
        decode: Callable[[list[int]], str] | None = None,
        longest_prompt: int | None = None,
    ) -> tuple[BiCCPrompts, int]:
        """Every row's conditioned prompt, laid out group by group, and the budget used.

        Args:
            prompt_ids, completion_ids: B token-id lists without padding.
            rewards: (B,). group_size: G.
            budget: the context budget; None: :meth:`budget` of this batch.
            max_positions: the model's window (the budget's cap, or with the framing
                outside the whole context's, :meth:`room`).
            longest_prompt: the prompt length the budget and room are taken at, when the
                rows are part of a larger batch (verl builds one size class at a time);
                None: the longest of ``prompt_ids``.
            messages: B chat prompts row-aligned with ``prompt_ids`` (None: text prompts).
            render: chat messages -> ids with the generation header, rendered as the
                prompts were. decode: ids -> text, special tokens skipped.
        Raises:
            ValueError naming ``bicc_placement`` when the user-turn placement cannot
            reproduce the prompt ids from the messages.
        """
        longest = max(map(len, prompt_ids)) if longest_prompt is None else longest_prompt
        if budget is None:
            budget = self.budget(longest, max_positions)
        chat = self._chat_inputs(prompt_ids, messages, render, decode)
        built = build_bicc_prompts(
            prompt_ids,
            completion_ids,
            rewards,
            group_size,
            self.template,
            budget=budget,
            pad_token_id=pad_token_id,
            threshold=self.threshold,
            truncation=self.truncation,
            placement=self.placement,
            strip_token_ids=self.strip_token_ids,
            framing=self.framing,  # type: ignore[arg-type]
            room=self.room(longest, max_positions),
            pairing=self.pairing,  # type: ignore[arg-type]
            **chat,
        )
        return built, budget

    def _chat_inputs(self, prompt_ids, messages, render, decode) -> dict:
        """``prompt_messages``, ``decode`` and ``render`` for the user-turn placement; {} when
        the prompts are text or the placement is a token-level one."""
        if not self.needs_chat(messages is not None):
            return {}
        if render is None or decode is None:
            raise ValueError(
                "BiCC user_turn placement needs the chat template's rendering (render_chat); "
                "use bicc_placement=after_prompt"
            )
        # The attempts must land in the conversation the prompt ids came from: check the
        # rendering against the first row's prompt (tools, template and kwargs included).
        rendered = list(render([dict(m) for m in messages[0]]))
        if rendered != list(prompt_ids[0]):
            raise ValueError(
                "BiCC user_turn placement: rendering the prompt's messages gives "
                f"{len(rendered)} tokens that differ from the {len(prompt_ids[0])} prompt "
                "tokens generated from (another chat template, tools or a truncated prompt); "
                "use bicc_placement=after_prompt"
            )
        return dict(prompt_messages=messages, decode=decode, render=render)


def chat_renderer(
    tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None
) -> RenderChat | None:
    """Chat messages -> token ids with the tokenizer's chat template and the generation
    header (how TRL renders a prompt without tools, and verl's agent loop with
    ``data.apply_chat_template_kwargs``); None if the tokenizer has no chat template."""
    if not hasattr(tokenizer, "apply_chat_template"):
        return None
    kwargs = dict(chat_template_kwargs or {})

    def render(messages: list[dict]) -> list[int]:
        return list(
            tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False, **kwargs
            )
        )

    return render


def text_decoder(tokenizer: Any) -> Callable[[list[int]], str]:
    """Token ids -> text without special tokens, so a quoted attempt cannot close the turn."""
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=True)


def template_encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    """Template text -> token ids without special tokens (both engines encode the framing
    with this call)."""
    return lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])


__all__ = [
    "BiCCRowBuilder",
    "chat_renderer",
    "end_token_ids",
    "is_chat",
    "template_encoder",
    "text_decoder",
]
