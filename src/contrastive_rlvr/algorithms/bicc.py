"""BiCC: Bilateral Context Conditioning (the BiCC paper, "When Right Meets Wrong", 2026).

For the loss only, each correct completion of a group is scored as the
continuation of ``[q ; O-]`` (the prompt followed by the group's wrong
completions), each wrong one as the continuation of ``[q ; O+]``. Generation
and evaluation never see this context: no extra sampling, no inference cost.

This module builds the conditioned prompts as token ids. Who computes the
log-probs chooses the ratio mode (:data:`BICC_RATIO_MODES`):

- ``"paper"``: ``rho = pi_theta(o | [q; O_opp]) / pi_old(o | q)``, the ratio the
  paper states; the old (and reference) log-probs are the ones of the plain
  prompt, computed at sampling time. This ratio is not 1 even on-policy.
- ``"consistent"``: ``rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp])``;
  the old log-probs are recomputed on the conditioned prompt, so the ratio is
  1 on-policy and clipping means what it means in PPO.

Where the context goes (:data:`BICC_PLACEMENTS`): for a conversational prompt
(chat messages) ``"user_turn"`` appends the framed attempts to the last user
message, after the question, and renders the conversation again with the
tokenizer's chat template, so the conditioned prompt is a well-formed
conversation that still ends in the assistant generation header (the attempts
are the user's material, not the model's own output); ``"after_prompt"``
appends the framing tokens after the rendered prompt (the paper's ``[q ; O]``,
right for plain-text prompts; on a chat prompt it lands inside the assistant
turn); ``"before_prompt"`` puts them ahead of it. ``"auto"`` is ``user_turn``
for conversational prompts and ``after_prompt`` otherwise.

Context budget (the paper's "context ratio", Table 3): we read it as a token
budget ``floor(context_ratio * L)``, with ``L`` the run's own sequence length,
longest prompt plus ``max_completion_length`` (:func:`context_budget`), so the
ratio is the share of the sequence given to the opposite attempts. The
default pays the framing text on top (``framing="outside"``,
:func:`context_plan`); ``"inside"`` counts it in the budget. The budget is
shared among the
opposite completions by water-filling: completions shorter than an equal share
keep all their tokens and leave the rest to the longer ones, which are cut
by the ``truncation`` rule (``"middle"`` keeps the head and the tail, so both
the start of the reasoning and the final answer stay; ``"head"``, ``"tail"``).
Completions are taken in group order; if even one token of each cannot fit,
the last ones are left out. Rows of one-sided groups keep their plain prompt.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch

from .ops import Tensor, check_rows, group_view, num_groups

# Each set of choices is one Literal (what the configs of both engines annotate their
# field with); the tuple beside it is read from it, so a choice is added in one place.
#: The old log-probs of BiCC's ratio (module docstring).
BiCCRatioMode = Literal["paper", "consistent", "conditioned_old"]
BICC_RATIO_MODES: tuple[str, ...] = get_args(BiCCRatioMode)
#: What the context budget pays for: ``"outside"``, the attempts' tokens only (the
#: framing text on top); ``"inside"``, the framing and the attempts together.
FramingBudget = Literal["outside", "inside"]
FRAMING_BUDGETS: tuple[str, ...] = get_args(FramingBudget)
#: The one default of ``framing`` (the functions here, the rows' builder, the stage and
#: ``bicc_framing_budget`` on both engines).
DEFAULT_FRAMING: FramingBudget = "outside"
#: Which opposite completions a row reads: ``"partition"``, all of them (the paper);
#: ``"one_opposite"``, one each (the authors' public code, docs/bicc.md).
Pairing = Literal["partition", "one_opposite"]
BICC_PAIRINGS: tuple[str, ...] = get_args(Pairing)
#: How an opposite completion longer than its share is cut.
Truncation = Literal["middle", "head", "tail"]
TRUNCATIONS: tuple[str, ...] = get_args(Truncation)
Placement = Literal["auto", "user_turn", "after_prompt", "before_prompt"]
BICC_PLACEMENTS: tuple[str, ...] = get_args(Placement)
Messages = Sequence[Mapping[str, Any]]
# Renders chat messages with the chat template and the assistant generation
# header, as token ids (e.g. ``tokenizer.apply_chat_template(m,
# add_generation_prompt=True, tokenize=True)``).
RenderChat = Callable[[list[dict[str, Any]]], Sequence[int]]


@dataclass(frozen=True)
class BiCCTemplate:
    """The text framing the opposite partition's completions.

    ``header_correct`` introduces correct completions (shown to the wrong
    ones), ``header_wrong`` wrong completions (shown to the correct ones);
    ``item_prefix`` may use ``{index}`` (1-based).
    """

    header_correct: str = "\nCorrect attempts at this problem:\n"
    header_wrong: str = "\nIncorrect attempts at this problem:\n"
    item_prefix: str = "Attempt {index}: "
    item_suffix: str = "\n"
    footer: str = "Your attempt:\n"

    def __post_init__(self) -> None:
        # item_prefix is formatted once per attempt, when the first context is built: a
        # field other than {index} (or a stray brace) would fail there, mid-run.
        try:
            self.item_prefix.format(index=1)
        except Exception as err:
            what = f"unknown field {err}" if isinstance(err, KeyError | IndexError) else err
            raise ValueError(
                f"bicc_item_prefix={self.item_prefix!r} is invalid ({what}): it may use "
                "{index} (the attempt's number, from 1) and no other field; write a "
                "literal brace as {{ or }}"
            ) from err

    @classmethod
    def from_fields(cls, config: object) -> BiCCTemplate:
        """The template of a config's ``bicc_header_correct``, ``bicc_header_wrong``,
        ``bicc_item_prefix``, ``bicc_item_suffix`` and ``bicc_footer`` fields (the same
        names on the TRL and the verl config)."""
        names = ("header_correct", "header_wrong", "item_prefix", "item_suffix", "footer")
        return cls(**{name: getattr(config, f"bicc_{name}") for name in names})

    def encode(self, encode: Callable[[str], list[int]], max_items: int) -> EncodedTemplate:
        """Token ids of every piece, with ``encode`` the tokenizer (no special tokens)."""
        return EncodedTemplate(
            header_correct=list(encode(self.header_correct)),
            header_wrong=list(encode(self.header_wrong)),
            item_prefixes=[
                list(encode(self.item_prefix.format(index=i + 1))) for i in range(max_items)
            ],
            item_suffix=list(encode(self.item_suffix)),
            footer=list(encode(self.footer)),
        )


@dataclass(frozen=True)
class EncodedTemplate:
    """A :class:`BiCCTemplate` as token ids; ``item_prefixes[k]`` frames the k-th item."""

    header_correct: list[int]
    header_wrong: list[int]
    item_prefixes: list[list[int]]
    item_suffix: list[int]
    footer: list[int]


@dataclass
class BiCCPrompts:
    """Conditioned prompts of a batch, one per row, left-padded.

    Attributes:
        input_ids: (B, P) token ids, left-padded with the pad id.
        attention_mask: (B, P), 1 on real tokens.
        context_tokens: (B,) tokens added to each row's prompt (0 if plain).
        conditioned: (B,) whether the row got a context.
        positive: (B,) whether the row is in its group's correct partition.
        prefix_index: (B,) rows with identical conditioned prompts share the
            index of the first such row: one partition of a group shares one
            prefix, so its encoding can be computed once.
        whole_attempts, cut_attempts: (B,) opposite attempts the row's context holds in
            full, and those cut or left out by the budget (0, 0 for a plain row).
        kept_attempt_tokens, attempt_tokens: (B,) the attempts' tokens the context kept,
            and their full lengths.
    """

    input_ids: Tensor
    attention_mask: Tensor
    context_tokens: Tensor
    conditioned: Tensor
    positive: Tensor
    prefix_index: Tensor
    whole_attempts: Tensor
    cut_attempts: Tensor
    kept_attempt_tokens: Tensor
    attempt_tokens: Tensor


def partition_by_reward(
    rewards: Tensor, group_size: int, *, threshold: float = 0.5
) -> tuple[Tensor, Tensor]:
    """Split every group into correct (R > threshold) and wrong rows.

    Args:
        rewards: (B,).
    Returns:
        ``positive`` (B,) bool and ``two_sided`` (B,) bool: whether the row's
        group has both a correct and a wrong completion.
    """
    num_groups(rewards.shape[0], group_size, min_size=2, what="partition_by_reward")
    pos = group_view(rewards > threshold, group_size)
    two_sided = (pos.any(1) & (~pos).any(1)).unsqueeze(1).expand_as(pos)
    return pos.reshape(-1), two_sided.reshape(-1)


def truncate(ids: Sequence[int], n: int, rule: Truncation) -> list[int]:
    """Keep ``n`` of ``ids`` by ``rule``: ``head`` (first n), ``tail`` (last n) or
    ``middle`` (drop the middle: first ceil(n/2) and last floor(n/2))."""
    ids = list(ids)
    if n >= len(ids):
        return ids
    if n <= 0:
        return []
    if rule == "head":
        return ids[:n]
    if rule == "tail":
        return ids[len(ids) - n :]
    if rule == "middle":
        head = (n + 1) // 2
        return ids[:head] + ids[len(ids) - (n - head) :]
    raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {rule!r}")


def water_fill(lengths: Sequence[int], budget: int) -> list[int]:
    """Share ``budget`` tokens among items of the given lengths.

    Items shorter than an equal share keep their length; the rest is split
    equally among the longer ones; the few tokens that integer division leaves
    go one each to the cut items, in input order. Returns the kept length of
    each item, in input order.
    """
    n = len(lengths)
    kept = list(lengths)
    left = max(budget, 0)
    order = sorted(range(n), key=lambda i: (lengths[i], i))
    for rank, i in enumerate(order):
        share = left // (n - rank)
        if lengths[i] > share:
            # This item and every longer one are cut to the equal share.
            cut = sorted(order[rank:])
            extra = left - share * len(cut)
            for position, j in enumerate(cut):
                kept[j] = share + (1 if position < extra else 0)
            break
        left -= lengths[i]
    return kept


def context_plan(
    lengths: Sequence[int],
    header: list[int],
    template: EncodedTemplate,
    budget: int,
    *,
    framing: FramingBudget = DEFAULT_FRAMING,
    room: int | None = None,
) -> list[int]:
    """How many tokens of each attempt (of the given lengths, in group order) a context
    keeps, for the attempts it holds: the last ones may be left out (a shorter list).

    ``framing="inside"``: ``budget`` pays for everything added (header, item prefixes and
    suffixes, footer and the attempts' tokens). ``"outside"``: ``budget`` is the attempts'
    share only; the framing is paid on top. ``room``: a hard limit on everything added
    (the model's positions left over), either way. Attempts are left out from the end
    while not even one token of each fits.
    """
    if framing not in FRAMING_BUDGETS:
        raise ValueError(f"framing must be one of {FRAMING_BUDGETS}, got {framing!r}")
    fixed = len(header) + len(template.footer)
    k = min(len(lengths), len(template.item_prefixes))
    while k > 0:
        overhead = fixed + sum(len(template.item_prefixes[i]) for i in range(k))
        overhead += k * len(template.item_suffix)
        content = budget if framing == "outside" else budget - overhead
        if room is not None:
            content = min(content, room - overhead)
        if content >= k:  # at least one content token each
            return water_fill(list(lengths[:k]), content)
        k -= 1
    return []


def build_context(
    completions: Sequence[Sequence[int]],
    header: list[int],
    template: EncodedTemplate,
    budget: int,
    truncation: Truncation,
    *,
    framing: FramingBudget = DEFAULT_FRAMING,
    room: int | None = None,
) -> list[int]:
    """Token ids of ``header + [prefix_k + completion_k + suffix]... + footer`` within
    ``budget`` (:func:`context_plan` says how ``framing`` and ``room`` count).

    Returns [] when not even one token of one completion fits.
    """
    kept = context_plan(
        [len(c) for c in completions], header, template, budget, framing=framing, room=room
    )
    return _assemble(completions, header, template, kept, truncation)


def _assemble(
    completions: Sequence[Sequence[int]],
    header: list[int],
    template: EncodedTemplate,
    kept: Sequence[int],
    truncation: Truncation,
) -> list[int]:
    """The context of the first ``len(kept)`` completions, each cut to its ``kept``
    tokens ([] when ``kept`` is empty)."""
    if not kept:
        return []
    out = list(header)
    for i in range(len(kept)):
        out += template.item_prefixes[i] + truncate(completions[i], kept[i], truncation)
        out += template.item_suffix
    return out + template.footer


def context_budget(
    context_ratio: float,
    *,
    longest_prompt: int,
    max_completion_length: int,
    max_seq_len: int | None = None,
    max_positions: int | None = None,
) -> int:
    """Tokens the opposite attempts (with their framing) may add to a prompt.

    ``floor(context_ratio * L)`` with ``L = max_seq_len`` when given, else the
    run's own sequence length ``longest_prompt + max_completion_length``; then
    capped so that prompt + context + completion fit in ``max_positions`` (the
    model's window) when given. Example: ratio 0.4, prompts of at most 60
    tokens, completions of at most 200: ``floor(0.4 * 260) = 104``.
    """
    if not 0.0 < context_ratio < 1.0:
        raise ValueError(f"context_ratio must be in (0, 1), got {context_ratio}")
    if longest_prompt < 0 or max_completion_length < 1:
        raise ValueError(
            f"longest_prompt must be >= 0 and max_completion_length >= 1, got "
            f"{longest_prompt} and {max_completion_length}"
        )
    if max_seq_len is not None and max_seq_len < 1:
        raise ValueError(f"max_seq_len must be >= 1 or None, got {max_seq_len}")
    base = max_seq_len if max_seq_len is not None else longest_prompt + max_completion_length
    budget = int(context_ratio * base)
    if max_positions is not None:
        budget = min(budget, max(max_positions - longest_prompt - max_completion_length, 0))
    return budget


def context_room(longest_prompt: int, max_completion_length: int, max_positions: int) -> int:
    """Tokens the model's positions leave for a context: ``W - P - C`` (at least 0)."""
    return max(max_positions - longest_prompt - max_completion_length, 0)


def resolve_placement(placement: str, conversational: bool) -> str:
    """``"auto"`` becomes ``"user_turn"`` for chat prompts, ``"after_prompt"`` for text;
    ``"user_turn"`` without chat messages raises."""
    if placement not in BICC_PLACEMENTS:
        raise ValueError(f"placement must be one of {BICC_PLACEMENTS}, got {placement!r}")
    if placement == "auto":
        return "user_turn" if conversational else "after_prompt"
    if placement == "user_turn" and not conversational:
        raise ValueError(
            "placement 'user_turn' needs conversational prompts (chat messages and the chat "
            "template); use 'after_prompt' or 'auto' for plain-text prompts"
        )
    return placement


def with_context_in_user_turn(messages: Messages, context: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` with ``context`` appended to the last user message.

    The question stays first in that message and the attempts follow it; every
    other message is unchanged. Raises if there is no user message with text
    content.
    """
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            if not isinstance(m.get("content"), str):
                raise ValueError(
                    "BiCC user_turn placement needs the user message's content as text, got "
                    f"{type(m.get('content')).__name__}; use bicc_placement=after_prompt"
                )
            m["content"] = m["content"] + context
            return out
    raise ValueError(
        f"BiCC user_turn placement: no user message in the prompt (roles "
        f"{[m.get('role') for m in messages]}); use bicc_placement=after_prompt"
    )


def chat_conditioned_prompt(
    messages: Messages,
    context_ids: Sequence[int],
    *,
    decode: Callable[[list[int]], str],
    render: RenderChat,
) -> list[int]:
    """Token ids of the conversation with the decoded context in the user turn.

    ``context_ids``: the framed attempts from :func:`build_context` (empty:
    the plain prompt, rendered). ``decode`` turns them into text (skip special
    tokens, so an attempt cannot close the turn); ``render`` renders the
    messages with the chat template and the assistant generation header.
    """
    if not context_ids:
        return list(render([dict(m) for m in messages]))
    return list(render(with_context_in_user_turn(messages, decode(list(context_ids)))))


def build_bicc_prompts(
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    rewards: Tensor,
    group_size: int,
    template: EncodedTemplate,
    *,
    pad_token_id: int,
    budget: int,
    threshold: float = 0.5,
    truncation: Truncation = "middle",
    placement: Placement = "after_prompt",
    strip_token_ids: Collection[int] = (),
    prompt_messages: Sequence[Messages] | None = None,
    decode: Callable[[list[int]], str] | None = None,
    render: RenderChat | None = None,
    framing: FramingBudget = DEFAULT_FRAMING,
    room: int | None = None,
    pairing: Pairing = "partition",
) -> BiCCPrompts:
    """Build every row's conditioned prompt ``[q ; O_opposite]``.

    Args:
        prompt_ids: B prompts as token ids without padding (equal within a group).
        completion_ids: B completions as token ids without padding.
        rewards: (B,).
        group_size: G >= 2.
        template: the framing, from :meth:`BiCCTemplate.encode`.
        pad_token_id: id used for left padding.
        budget: the context budget in tokens, e.g. from :func:`context_budget`.
        threshold: reward above which a completion is correct.
        truncation: how a completion longer than its share is cut.
        placement: one of :data:`BICC_PLACEMENTS` (module docstring).
        strip_token_ids: ids removed from the end of each context completion
            (EOS and pad: an EOS inside a prompt would end the text).
        prompt_messages: B chat prompts (lists of ``{"role", "content"}``) when
            the prompts are conversational, row-aligned with ``prompt_ids``.
        decode, render: for ``user_turn``: token ids to text, and chat
            messages to token ids (see :func:`chat_conditioned_prompt`).
        framing, room: what ``budget`` pays for and the hard limit on what is added
            (:func:`context_plan`).
        pairing: ``"partition"`` (the paper): every opposite completion of the group;
            ``"one_opposite"`` (what the authors' code pairs): one, the k-th row of a side
            reading the opposite side's ``k mod n``-th completion (so each is read).
    Returns:
        :class:`BiCCPrompts`.
    """
    n_rows = len(prompt_ids)
    num_groups(n_rows, group_size, min_size=2, what="build_bicc_prompts")
    if len(completion_ids) != n_rows:
        raise ValueError(f"{n_rows} prompts but {len(completion_ids)} completions")
    check_rows("rewards", rewards, n_rows)
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
    if prompt_messages is not None and len(prompt_messages) != n_rows:
        raise ValueError(f"{n_rows} prompts but {len(prompt_messages)} prompt_messages")
    placement = resolve_placement(placement, prompt_messages is not None)
    if placement == "user_turn" and (decode is None or render is None):
        raise ValueError("placement 'user_turn' needs decode and render (the chat template)")
    if pairing not in BICC_PAIRINGS:
        raise ValueError(f"pairing must be one of {BICC_PAIRINGS}, got {pairing!r}")
    plan = _Rows(template, budget, truncation, placement, framing, room, pairing, decode, render)
    attempts = [_strip_end(list(ids), set(strip_token_ids)) for ids in completion_ids]
    positive, two_sided = partition_by_reward(rewards, group_size, threshold=threshold)
    rows: list[list[int]] = []
    counts: list[tuple[int, ...]] = []  # added tokens, whole, cut, kept tokens, attempt tokens
    for g in range(0, n_rows, group_size):
        members = range(g, g + group_size)
        if not bool(two_sided[g]):
            rows += [list(prompt_ids[i]) for i in members]
            counts += [(0, 0, 0, 0, 0)] * group_size
            continue
        for row, count in plan.group(members, positive, prompt_ids, attempts, prompt_messages):
            rows.append(row)
            counts.append(count)
    # Identical prompts share the first row's index (plain prompts of one group too).
    first_seen: dict[tuple[int, ...], int] = {}
    prefix_index = [first_seen.setdefault(tuple(r), i) for i, r in enumerate(rows)]
    input_ids, attention_mask = _left_padded(rows, pad_token_id)
    stats = torch.tensor(counts, dtype=torch.long).reshape(n_rows, 5)
    return BiCCPrompts(
        input_ids=input_ids,
        attention_mask=attention_mask,
        context_tokens=stats[:, 0],
        conditioned=stats[:, 0] > 0,
        positive=positive,
        prefix_index=torch.tensor(prefix_index, dtype=torch.long),
        whole_attempts=stats[:, 1],
        cut_attempts=stats[:, 2],
        kept_attempt_tokens=stats[:, 3],
        attempt_tokens=stats[:, 4],
    )


def _strip_end(ids: list[int], strip: Collection[int]) -> list[int]:
    """``ids`` without the ``strip`` ids at its end (an EOS inside a prompt ends the text)."""
    while ids and ids[-1] in strip:
        ids.pop()
    return ids


@dataclass(frozen=True)
class _Rows:
    """How :func:`build_bicc_prompts` builds the rows of a two-sided group: its settings."""

    template: EncodedTemplate
    budget: int
    truncation: Truncation
    placement: str
    framing: FramingBudget
    room: int | None
    pairing: Pairing
    decode: Callable[[list[int]], str] | None
    render: RenderChat | None

    def context(self, attempts: list[list[int]], side: bool) -> tuple[list[int], tuple]:
        """The context a row of ``side`` reads (the opposite ``attempts``, framed) and its
        counts: attempts whole, cut or left out, kept tokens, the attempts' tokens."""
        header = self.template.header_correct if not side else self.template.header_wrong
        lengths = [len(a) for a in attempts]
        kept = context_plan(
            lengths, header, self.template, self.budget, framing=self.framing, room=self.room
        )
        whole = sum(1 for n, m in zip(kept, lengths, strict=False) if n >= m)
        context = _assemble(attempts, header, self.template, kept, self.truncation)
        return context, (whole, len(attempts) - whole, sum(kept), sum(lengths))

    def group(
        self,
        members: range,
        positive: Tensor,
        prompt_ids: Sequence[Sequence[int]],
        attempts: list[list[int]],
        messages: Sequence[Messages] | None,
    ) -> list[tuple[list[int], tuple]]:
        """Each row of a two-sided group (``members``) with its counts: tokens added, then
        :meth:`context`'s. ``attempts``: every row's completion, its end ids stripped. A
        context is built (and rendered) once per side and pick."""
        sides = {side: [j for j in members if bool(positive[j]) == side] for side in (True, False)}
        contexts: dict[tuple[bool, int], tuple[list[int], tuple]] = {}  # (side, pick) -> ...
        rendered: dict[tuple[bool, int], list[int]] = {}  # one chat rendering per context
        out = []
        for i in members:
            side = bool(positive[i])
            # Rows on `side` see completions of the other side: all, or one (round robin).
            opposite = sides[not side]
            pick = sides[side].index(i) % len(opposite) if self.pairing == "one_opposite" else -1
            key = (side, pick)
            if key not in contexts:
                chosen = opposite if pick < 0 else [opposite[pick]]
                contexts[key] = self.context([attempts[j] for j in chosen], side)
            context, count = contexts[key]
            prompt = list(prompt_ids[i])
            if not context:
                row = prompt
            elif self.placement == "user_turn":
                if key not in rendered:
                    rendered[key] = chat_conditioned_prompt(
                        messages[i], context, decode=self.decode, render=self.render
                    )
                row = rendered[key]
            elif self.placement == "after_prompt":
                row = prompt + context
            else:
                row = context + prompt
            # The chat rendering re-tokenises the decoded context: count what it added.
            out.append((row, (len(row) - len(prompt), *count)))
        return out


def _left_padded(rows: list[list[int]], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """(B, P) ids left-padded with ``pad_token_id`` and their (B, P) attention mask."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            input_ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
            attention_mask[i, width - len(r) :] = 1
    return input_ids, attention_mask
