"""BiCC's conditioned prompts (docs/bicc.md): each completion's prompt followed by its
group's opposite-outcome completions, and the old / reference log-probs its ratio
mode asks for."""

from __future__ import annotations

from collections.abc import Collection

from ...algorithms import build_bicc_prompts
from ..batching import unpad
from .base import Batch, StageContext

# Length the context budget is a share of when neither the config nor the model says.
FALLBACK_SEQ_LEN = 4096


class ConditionedPrompts:
    """Writes ``bicc_prompt_ids`` / ``bicc_prompt_mask`` (B, P'), left-padded, and sets
    ``old_per_token_logps`` (and, in the consistent mode with KL, ``ref_per_token_logps``)
    for the loss's ratio; with ``mix < 1`` keeps the plain ones as ``plain_*``.

    Args:
        template: the framing text, encoded (:meth:`BiCCTemplate.encode`).
        ratio_mode: ``"paper"``: rho = pi_theta(o | [q; O_opp]) / pi_old(o | q);
            ``"consistent"``: rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp]).
        context_ratio, max_seq_len: the opposite completions' budget is
            ``context_ratio * max_seq_len`` tokens (None: the model's positions), capped so
            that prompt + context + completion fit in the model's positions.
        truncation, placement: how a long completion is cut, where the context goes.
        threshold: reward above which a completion is correct.
        strip_token_ids: tokens dropped from the quoted completions (EOS, padding).
        keep_plain: ``mix < 1``: the plain-prompt share of the loss needs the plain
            old / reference log-probs.
        reference_kl: the consistent mode with beta > 0 needs the reference on the
            conditioned prompt.
    """

    name = "conditioned_prompts"
    writes = (
        "data.bicc_prompt_ids",
        "data.bicc_prompt_mask",
        "data.old_per_token_logps",
        "data.ref_per_token_logps",
        "data.plain_old_per_token_logps",
        "data.plain_ref_per_token_logps",
    )

    def __init__(
        self,
        template,  # noqa: ANN001
        *,
        ratio_mode: str,
        context_ratio: float,
        max_seq_len: int | None,
        truncation: str,
        placement: str,
        threshold: float,
        strip_token_ids: Collection[int],
        keep_plain: bool,
        reference_kl: bool,
    ) -> None:
        self.template, self.ratio_mode = template, ratio_mode
        self.context_ratio, self.max_seq_len = context_ratio, max_seq_len
        self.truncation, self.placement, self.threshold = truncation, placement, threshold
        self.strip_token_ids = set(strip_token_ids)
        self.keep_plain, self.reference_kl = keep_plain, reference_kl
        self.reads = ("rewards", "data.prompt_ids", "data.completion_ids")
        if ratio_mode == "paper":
            self.reads += ("shared.old_logps",)

    def budget_base(self, longest_prompt: int, completion_width: int, positions: int | None):
        """The length the context budget is a share of (see the class docstring)."""
        base = self.max_seq_len or positions or FALLBACK_SEQ_LEN
        if positions:
            room = positions - longest_prompt - completion_width
            base = min(base, max(room, 0) / self.context_ratio)
        return int(base)

    def __call__(self, batch: Batch, ctx: StageContext) -> Batch:
        out = batch.data
        prompt_lists = ctx.gather_object(unpad(out["prompt_ids"], out["prompt_mask"]))
        completion_lists = ctx.gather_object(unpad(out["completion_ids"], out["completion_mask"]))
        width = out["completion_ids"].size(1)
        built = build_bicc_prompts(
            prompt_lists,
            completion_lists,
            batch.rewards.cpu(),
            ctx.group_size,
            self.template,
            max_seq_len=self.budget_base(max(map(len, prompt_lists)), width, ctx.max_positions),
            pad_token_id=ctx.tokenizer.pad_token_id,
            context_ratio=self.context_ratio,
            threshold=self.threshold,
            truncation=self.truncation,
            placement=self.placement,
            strip_token_ids=self.strip_token_ids,
        )
        device = out["prompt_ids"].device
        rows = ctx.rows(out["completion_ids"].size(0))
        ids, attn = built.input_ids[rows], built.attention_mask[rows]
        keep = int(attn.sum(1).max())  # drop columns that are padding in every local row
        out["bicc_prompt_ids"] = ids[:, ids.size(1) - keep :].to(device)
        out["bicc_prompt_mask"] = attn[:, attn.size(1) - keep :].to(device)
        ctx.log("bicc/context_tokens", built.context_tokens.float().mean())
        ctx.log("bicc/conditioned_frac", built.conditioned.float().mean())
        self._set_ratio_logps(batch, ctx)
        return batch

    def _set_ratio_logps(self, batch: Batch, ctx: StageContext) -> None:
        out = batch.data
        conditioned = (
            out["bicc_prompt_ids"],
            out["bicc_prompt_mask"],
            out["completion_ids"],
            out["completion_mask"],
        )
        if self.keep_plain:
            for key in ("old_per_token_logps", "ref_per_token_logps"):
                if out.get(key) is not None:
                    out[f"plain_{key}"] = out[key]
        if self.ratio_mode == "paper":
            # rho = pi_theta(o | [q; O_opp]) / pi_old(o | q)
            out["old_per_token_logps"] = batch.shared["old_logps"]
        elif out.get("old_per_token_logps") is not None:
            # rho = pi_theta(o | [q; O_opp]) / pi_old(o | [q; O_opp]); on-policy TRL leaves
            # old unset and the loss uses the detached current log-probs: the same thing.
            out["old_per_token_logps"] = ctx.policy_logps(*conditioned, share_prefix=True)
        if self.ratio_mode == "consistent" and self.reference_kl:
            out["ref_per_token_logps"] = ctx.reference_logps(*conditioned, share_prefix=True)
