"""BiCC's conditioned prompts (docs/bicc.md): each completion's prompt followed by its
group's opposite-outcome completions, and the old / reference log-probs its ratio
mode asks for. For chat prompts (``placement`` ``"auto"`` or ``"user_turn"``) the
attempts go at the end of the last user message and the conversation is rendered
again with the chat template, so the model reads them as the user's material."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

import torch
from trl.data_utils import is_conversational

from ...algorithms.bicc_rows import BiCCRowBuilder
from ...algorithms.ops import group_view
from ..batching import unpad
from .base import Batch, StageContext

logger = logging.getLogger(__name__)

#: A run warns (once) when its contexts keep less than this share of the opposite
#: attempts' tokens: below half, most attempts have lost their reasoning or their answer.
CUT_WARNING_SHARE = 0.5

# Chat messages -> token ids of the rendered conversation with the generation header.
RenderChat = Callable[[list[dict]], Sequence[int]]


class ConditionedPrompts:
    """Writes ``bicc_prompt_ids`` / ``bicc_prompt_mask`` (B, P'), left-padded, and sets
    ``old_per_token_logps`` (and, with the conditioned KL reference, ``ref_per_token_logps``)
    for the loss's ratio; with ``mix < 1`` keeps the plain ones as ``plain_*``.

    Args:
        template: the framing text, encoded (:meth:`BiCCTemplate.encode`).
        ratio_mode: ``"paper"``: rho = pi_theta(o | [q; O_opp]) / pi_old(o | q);
            ``"consistent"``: rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp]);
            ``"conditioned_old"`` (what the authors' code intends): rho = pi_theta(o | q) /
            pi_old(o | [q; O_opp]).
        framing: ``"outside"``: the budget pays for the attempts' tokens, the framing
            text is added on top; ``"inside"``: the budget pays for both.
        pairing: ``"partition"`` (every opposite completion) or ``"one_opposite"``.
        context_ratio, max_seq_len, max_completion_length: the opposite completions'
            budget is ``floor(context_ratio * L)`` tokens, ``L = max_seq_len`` when set,
            else the run's own length (the batch's longest prompt +
            ``max_completion_length``), capped so that prompt + context + completion fit
            in the model's positions (:func:`~contrastive_rlvr.algorithms.context_budget`).
        truncation: how a long completion is cut.
        placement: where the context goes (:data:`~contrastive_rlvr.algorithms.BICC_PLACEMENTS`);
            ``"auto"``: the user turn for conversational prompts, after the prompt for text.
        render_chat: chat messages -> token ids with the generation header, rendered as
            the prompts were (for the user-turn placement; None: refused on chat prompts
            that need it).
        threshold: reward above which a completion is correct.
        strip_token_ids: tokens dropped from the quoted completions (EOS, padding).
        keep_plain: keep the plain old / reference log-probs (``mix < 1``: the plain
            share's ratio and KL; RCC's sampling reference: the plain-prompt delta). They
            are kept only where TRL computed them (off policy); absent means on policy.
        reference_kl: ``bicc_kl_reference='conditioned'`` with beta > 0: the KL term's
            reference on the conditioned prompt, pi_ref(o | [q; O_opp]).
        off_policy_mask: ``off_policy_mask_threshold`` is set: write what the mask needs to
            compare like with like (:meth:`_set_mask_logps`).
    """

    name = "conditioned_prompts"
    reads = ("rewards", "prompts?", "data.prompt_ids", "data.completion_ids")
    writes = (
        "data.bicc_prompt_ids",
        "data.bicc_prompt_mask",
        "data.old_per_token_logps",
        "data.ref_per_token_logps",
        "data.plain_old_per_token_logps",
        "data.plain_ref_per_token_logps",
        "data.bicc_mask_sampling_shift",
        "data.bicc_mask_old_per_token_logps",
    )

    def __init__(
        self,
        template,
        *,
        ratio_mode: str,
        context_ratio: float,
        max_seq_len: int | None,
        max_completion_length: int,
        truncation: str,
        placement: str,
        threshold: float,
        strip_token_ids: Collection[int],
        keep_plain: bool,
        reference_kl: bool,
        render_chat: RenderChat | None = None,
        framing: str = "outside",
        pairing: str = "partition",
        off_policy_mask: bool = False,
    ) -> None:
        self.ratio_mode = ratio_mode
        self.off_policy_mask = off_policy_mask
        # The one definition of a conditioned row, shared with the verl trainer.
        self.rows = BiCCRowBuilder(
            template=template,
            context_ratio=context_ratio,
            max_seq_len=max_seq_len,
            max_completion_length=max_completion_length,
            truncation=truncation,
            placement=placement,
            threshold=threshold,
            strip_token_ids=frozenset(strip_token_ids),
            framing=framing,
            pairing=pairing,
        )
        self.threshold = threshold
        self.keep_plain, self.reference_kl = keep_plain, reference_kl
        self.render_chat = render_chat
        self._warned_empty = self._warned_cut = False
        if ratio_mode == "paper":
            self.reads = (*self.reads, "shared.old_logps")

    def budget(self, longest_prompt: int, max_positions: int | None) -> int:
        """Tokens the context may add to a prompt (see the class docstring)."""
        return self.rows.budget(longest_prompt, max_positions)

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out = batch.data
        prompt_lists = ctx.gather_object(unpad(out["prompt_ids"], out["prompt_mask"]))
        completion_lists = ctx.gather_object(unpad(out["completion_ids"], out["completion_mask"]))
        built, budget = self.rows.build(
            prompt_lists,
            completion_lists,
            batch.rewards.cpu(),
            ctx.group_size,
            pad_token_id=ctx.tokenizer.pad_token_id,
            max_positions=ctx.max_positions,
            **self._chat_inputs(batch, ctx),
        )
        self._warn_if_nothing_fits(batch, ctx, built.conditioned, budget)
        self._log_attempts(built, ctx, budget)
        device = out["prompt_ids"].device
        rows = ctx.rows(out["completion_ids"].size(0))
        ids, attn = built.input_ids[rows], built.attention_mask[rows]
        keep = int(attn.sum(1).max())  # drop columns that are padding in every local row
        out["bicc_prompt_ids"] = ids[:, ids.size(1) - keep :].to(device)
        out["bicc_prompt_mask"] = attn[:, attn.size(1) - keep :].to(device)
        ctx.log("bicc/context_tokens", built.context_tokens.float().mean())
        ctx.log("bicc/conditioned_frac", built.conditioned.float().mean())
        self._set_ratio_logps(batch, ctx, built.conditioned[rows])
        return batch

    def _chat_inputs(self, batch: Batch, ctx: StageContext) -> dict:
        """The gathered prompt messages, the rendering and the decoding for the user-turn
        placement (the builder checks the rendering); {} for text prompts or a token-level
        placement."""
        rows = batch.data["prompt_ids"].size(0)
        chat = bool(batch.prompts) and is_conversational(batch.prompts[0])
        if not self.rows.needs_chat(chat):
            return {}
        if len(batch.prompts) != rows:
            raise RuntimeError(
                f"BiCC user_turn placement: the batch has {rows} rows but {len(batch.prompts)} "
                "prompt messages (a stage that replaced rows did not update batch.prompts); "
                "use bicc_placement=after_prompt"
            )
        tokenizer = ctx.tokenizer
        return dict(
            messages=ctx.gather_object([row["prompt"] for row in batch.prompts]),
            decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
            render=self.render_chat,
        )

    def _log_attempts(self, built, ctx: StageContext, budget: int) -> None:
        """Whole and cut attempts per conditioned row, and the share of the attempts' tokens
        kept; warns once when that share is below :data:`CUT_WARNING_SHARE`."""
        rows = built.conditioned
        if not rows.any():
            return
        whole, cut = built.whole_attempts[rows].float(), built.cut_attempts[rows].float()
        total = built.attempt_tokens[rows].sum().clamp(min=1)
        kept = built.kept_attempt_tokens[rows].sum() / total
        ctx.log("bicc/whole_attempts", whole.mean())
        ctx.log("bicc/cut_attempts", cut.mean())
        ctx.log("bicc/attempt_tokens_kept", kept)
        if not self._warned_cut and float(kept) < CUT_WARNING_SHARE:
            logger.warning(
                "BiCC: the context keeps %.0f%% of the opposite attempts' tokens (%.1f whole, "
                "%.1f cut or left out per conditioned row; budget %d tokens, framing %s it): "
                "the model reads fragments; raise bicc_context_ratio or bicc_max_seq_len",
                100 * float(kept),
                float(whole.mean()),
                float(cut.mean()),
                budget,
                self.rows.framing,
            )
            self._warned_cut = True

    def _warn_if_nothing_fits(self, batch: Batch, ctx: StageContext, conditioned, budget: int):
        """Mixed groups but no conditioned row: the budget cannot hold even the framing."""
        if self._warned_empty or conditioned.any():
            return
        positive = group_view(batch.rewards > self.threshold, ctx.group_size)
        if (positive.any(1) & ~positive.all(1)).any():
            logger.warning(
                "BiCC: no prompt was conditioned although some groups are mixed: the context "
                "budget of %d tokens cannot hold the framing and one attempt; raise "
                "bicc_context_ratio or set bicc_max_seq_len",
                budget,
            )
            self._warned_empty = True

    def _set_ratio_logps(
        self, batch: Batch, ctx: StageContext, conditioned_rows: torch.Tensor | None = None
    ) -> None:
        """The old / reference log-probs of the ratio mode (``conditioned_rows`` (B,) bool,
        the local rows that got a context, is read by :class:`TeacherPrompts`)."""
        out = batch.data
        conditioned = (
            out["bicc_prompt_ids"],
            out["bicc_prompt_mask"],
            out["completion_ids"],
            out["completion_mask"],
        )
        plain_old = out.get("old_per_token_logps")  # TRL's pi_old(o | q); None on policy
        if self.keep_plain:
            for key in ("old_per_token_logps", "ref_per_token_logps"):
                if out.get(key) is not None:
                    out[f"plain_{key}"] = out[key]
        conditioned_old = None
        if self.ratio_mode == "paper":
            # rho = pi_theta(o | [q; O_opp]) / pi_old(o | q)
            out["old_per_token_logps"] = batch.shared["old_logps"]
        elif self.ratio_mode == "conditioned_old":
            # rho = pi_theta(o | q) / pi_old(o | [q; O_opp]): the policy reads the plain
            # prompt (the loss's forward), the conditioned log-probs are pi_old only.
            out["old_per_token_logps"] = ctx.policy_logps(*conditioned, share_prefix=True)
        elif plain_old is not None:
            # rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp]); on-policy TRL leaves
            # old unset and the loss uses the detached current log-probs: the same thing.
            conditioned_old = ctx.policy_logps(*conditioned, share_prefix=True)
            out["old_per_token_logps"] = conditioned_old
        if self.reference_kl:  # bicc_kl_reference='conditioned' with beta > 0
            out["ref_per_token_logps"] = ctx.reference_logps(*conditioned, share_prefix=True)
        if self.off_policy_mask:
            self._set_mask_logps(batch, ctx, plain_old, conditioned_old)

    def _set_mask_logps(self, batch: Batch, ctx: StageContext, plain_old, conditioned_old) -> None:
        """What the off-policy mask compares under BiCC, like with like (docs/bicc.md).

        The mask (TRL's, DeepSeek-V3.2's) drops a negative row whose mean ``sampling -
        sg(log pi_theta)`` passes the threshold. The sampler read the plain prompt; the
        loss forward reads the conditioned one, so that difference would count the
        context's own shift as off-policyness. Split into two parts, each on one prompt:

        - ``bicc_mask_sampling_shift`` (B, T): the sampler's gap on the plain prompt,
          ``sampling - pi_old(o | q)`` (0 without sampling log-probs; NaN tokens 0);
        - ``bicc_mask_old_per_token_logps`` (B, T), off policy only: pi_old on the prompt
          the loss reads (conditioned, or plain in ``conditioned_old`` mode), so that the
          loss's drift since sampling is ``pi_old - pi_theta`` on one prompt. On policy
          the loss's detached log-probs are pi_old there.

        The loss then masks with ``sampling' = (pi_old on its prompt) + shift`` in place
        of the sampling log-probs."""
        out = batch.data
        mask = out["completion_mask"]
        sampling = out.get("sampling_per_token_logps")
        if sampling is None:
            shift = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
        else:
            reference = plain_old
            if reference is None:  # on policy: pi_old(o | q) is the policy now
                plain = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask)
                reference = ctx.policy_logps(*plain)
            shift = torch.nan_to_num(sampling - reference, nan=0.0) * mask
        out["bicc_mask_sampling_shift"] = shift
        if plain_old is None:
            return
        if self.ratio_mode == "conditioned_old":
            out["bicc_mask_old_per_token_logps"] = plain_old
            return
        if conditioned_old is None:  # paper mode: its ratio's pi_old is the plain one
            conditioned = (
                out["bicc_prompt_ids"],
                out["bicc_prompt_mask"],
                out["completion_ids"],
                mask,
            )
            conditioned_old = ctx.policy_logps(*conditioned, share_prefix=True)
        out["bicc_mask_old_per_token_logps"] = conditioned_old
