"""The pipeline of a run, built once from its config: the one place that decides from the
method switches (``bicc``, ``rcc``, ``verigate``, ``reco``, ``oc_grpo``,
``dynamic_sampling``) which stages run. The table in
docs/architecture.md lists the stages, what they read and write, and their switch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ...algorithms.bicc_rows import chat_renderer, template_encoder
from ..token_method_inputs import build_process_scorer
from ..training_diagnostics import reads_batch_delta
from ..trl_settings import effective_recipe, keeps_trl_advantages
from .advantages import Advantages
from .base import Pipeline
from .batch_diagnostics import BatchDiagnostics
from .bicc import ConditionedPrompts
from .bicc_teacher import TeacherPrompts
from .dynamic_sampling import DynamicSampling
from .hinted_round import HintedRound
from .logprobs import LogProbPasses
from .nonfinite import RestoreSkippedRewards, SkipNonFiniteGroups
from .reco import OccurrenceWeights
from .rewards import RowRewards
from .verigate import ProcessAdvantages

logger = logging.getLogger(__name__)


def needs_reference(cfg) -> bool:
    """A frozen reference is needed for KL, for RCC's delta and for the delta diagnostics."""
    teacher = cfg.bicc and cfg.bicc_form == "distill" and cfg.bicc_teacher == "reference"
    return (
        cfg.beta > 0 or (cfg.rcc and cfg.rcc_reference == "reference") or cfg.log_delta or teacher
    )


@dataclass
class RunFacts:
    """What the pipeline needs to know about the run besides the config.

    ``render_chat``: chat messages -> token ids with the generation header, rendered
    exactly as the trainer renders its prompts (TRL: ``apply_chat_template`` with its
    tools, training chat template and ``chat_template_kwargs``), for BiCC's user-turn
    placement. None: the tokenizer's own chat template with the config's
    ``chat_template_kwargs`` (the BiCC stage checks it reproduces the prompt ids).
    """

    tokenizer: Any
    group_size: int
    has_reference: bool
    eos_token_ids: Collection[int] = ()
    dataset_columns: Sequence[str] | None = None
    num_processes: int = 1
    render_chat: Callable[[list[dict]], Sequence[int]] | None = None
    #: The (B_global,) rows of groups skipped for a non-finite reward at the batch's last
    #: scoring (``nonfinite_rewards="skip_group"``; the trainer's reward check sets it).
    skipped_rows: Callable[[], Any] | None = None
    #: (global_step, max_steps) now: which generation batches the diagnostics will read.
    progress: Callable[[], tuple[int, int]] | None = None


def tokenizer_chat_renderer(tokenizer, chat_template_kwargs: dict | None):
    """Chat messages -> token ids with the tokenizer's chat template and the generation
    header (TRL's rendering of a prompt without tools); None if the tokenizer has none.
    The verl trainer renders with the same function (:func:`chat_renderer`)."""
    return chat_renderer(tokenizer, chat_template_kwargs)


def rcc_delta_pass_reason(cfg, group_size: int) -> str | None:
    """Why RCC's delta needs a separate no-grad policy pass, or None when the loss's own
    forward gives log pi_theta(o | q) on on-policy batches (``rcc_delta_pass="auto"``)."""
    if not (cfg.rcc and cfg.rcc_reference == "reference"):
        return "RCC with the frozen reference is off"
    if cfg.rcc_delta_pass == "stage":
        return "rcc_delta_pass='stage'"
    for switch in ("bicc", "verigate", "oc_grpo"):  # their loss forward is not log pi(o | q)
        if getattr(cfg, switch):  # or they need the RCC advantages before the loss
            return f"{switch} is on"
    if cfg.per_device_train_batch_size % group_size:
        return (
            f"per_device_train_batch_size={cfg.per_device_train_batch_size} does not hold "
            f"whole groups of {group_size}"
        )
    return None


def build_stages(cfg, facts: RunFacts, loss_reads: Sequence[str] = ()) -> dict[str, Pipeline]:
    """The training and evaluation pipelines (evaluation does not sample again), each
    checked to give the loss what it reads (``loss_reads``: the loss object's ``reads``).

    In the order of the papers' step: sample again where a group carries no signal
    (OC-GRPO's hinted round, DAPO's dynamic sampling), take the rows' rewards, the
    old / reference log-probs and delta, the recipe's advantages (RCC-corrected), then
    the per-method inputs of the loss (VeriGate's process advantages, ReCo's weights,
    BiCC's conditioned prompts), and the diagnostics last."""
    recipe = effective_recipe(cfg)  # with the run's scale_rewards
    rcc_reference = cfg.rcc and cfg.rcc_reference == "reference"
    resample = _resampling_stages(cfg, facts)
    skip, restore = _skip_stages(cfg, facts, resampling=bool(resample))
    stages: list = [RowRewards()]
    passes = _log_prob_passes(cfg, facts)  # the log-prob stage of each mode, if any
    if passes:
        stages.append(passes["train"])
    # scale_rewards='batch' / normalize_then_sum: TRL's advantages stay (trl_settings.py).
    # ConSPO always: the stage counts its usable groups (the loss's normaliser).
    if recipe.objective == "contrastive" or not keeps_trl_advantages(cfg) or rcc_reference:
        stages.append(
            Advantages(
                recipe,
                rcc=rcc_reference,
                rcc_coef=cfg.rcc_coef,
                rcc_bound=cfg.rcc_bound,
                eps=cfg.adv_eps,
                threshold=cfg.reward_threshold,
            )
        )
    stages += _loss_input_stages(cfg, facts, recipe.scale_by_std)
    stages.append(
        BatchDiagnostics(
            threshold=cfg.reward_threshold,
            rcc_coef=cfg.rcc_coef if cfg.rcc else None,
            rcc_bound=cfg.rcc_bound,
        )
    )
    eval_stages = [passes["eval"] if s is passes.get("train") else s for s in stages]
    return {
        "train": Pipeline(skip + resample + restore + stages, loss_reads),
        "eval": Pipeline(skip + eval_stages, loss_reads),
    }


def _resampling_stages(cfg, facts: RunFacts) -> list:
    """The stages that sample again (training only): OC-GRPO's hinted round, then DAPO's
    dynamic sampling."""
    resample: list = []
    if cfg.oc_grpo:
        hinted = HintedRound(
            column=cfg.oc_solution_column,
            fraction=cfg.oc_hint_fraction,
            unit=cfg.oc_hint_unit,
            template=cfg.oc_hint_template,
            threshold=cfg.reward_threshold,
            merge=cfg.oc_merge,
        )
        hinted.check_setup(
            facts.dataset_columns,
            beta=cfg.beta,
            has_reference=facts.has_reference,
            num_processes=facts.num_processes,
        )
        resample.append(hinted)
    if cfg.dynamic_sampling:
        resample.append(DynamicSampling(max_rounds=cfg.dynamic_sampling_max_rounds))
    return resample


def _log_prob_passes(cfg, facts: RunFacts) -> dict[str, LogProbPasses]:
    """The log-prob stage of each mode (``train``, ``eval``; evaluation never defers RCC's
    delta), or none: BiCC's paper ratio needs pi_old(o | q), a reference its log-probs."""
    old_for_bicc = cfg.bicc and cfg.bicc_ratio_mode == "paper"
    if not (old_for_bicc or facts.has_reference):
        return {}
    reason = rcc_delta_pass_reason(cfg, facts.group_size)
    if cfg.rcc and cfg.rcc_reference == "reference" and reason is not None:
        logger.info("RCC: delta from a separate no-grad policy pass, as %s", reason)
    return {
        mode: LogProbPasses(
            old=old_for_bicc,
            reference=facts.has_reference,
            keep_reference=cfg.beta > 0,
            delta_reduce=cfg.rcc_delta,
            defer_delta=_defer_delta(cfg, facts) if mode == "train" and not reason else None,
        )
        for mode in ("train", "eval")
    }


def _loss_input_stages(cfg, facts: RunFacts, scale_by_std: bool) -> list:
    """Each method's inputs to the loss, after the advantages: VeriGate's process
    advantages, ReCo's occurrence weights, BiCC's conditioned prompts."""
    stages: list = []
    if cfg.verigate:
        stages.append(
            ProcessAdvantages(
                build_process_scorer(cfg.verigate_scorer),
                step_rule=cfg.verigate_step_rule,
                step_pattern=cfg.verigate_step_pattern,
                scale_by_std=scale_by_std,
                eps=cfg.adv_eps,
                process_norm=cfg.verigate_process_norm,
            )
        )
    if cfg.reco:
        stages.append(
            OccurrenceWeights(
                identity=cfg.reco_identity,
                factor_norm=cfg.reco_factor_norm,
                weights=cfg.reco_weights,
                factor=cfg.reco_factor,
            )
        )
    if cfg.bicc:
        stages.append(_conditioned_prompts(cfg, facts))
    return stages


def _defer_delta(cfg, facts: RunFacts) -> Callable[[], bool]:
    """Whether this training batch's delta may wait for the loss: not on the batches the
    gradient-variance and deltas.jsonl diagnostics read whole (``reads_batch_delta``)."""

    def defer() -> bool:
        if facts.progress is None:
            return cfg.diagnostics_every <= 0 and cfg.deltas_every <= 0
        return not reads_batch_delta(cfg, *facts.progress())

    return defer


def _skip_stages(cfg, facts: RunFacts, *, resampling: bool) -> tuple[list, list]:
    """``nonfinite_rewards="skip_group"``: the stage that masks skipped groups first, and
    (with stages that sample again) the one that restores their rewards after those."""
    if cfg.nonfinite_rewards != "skip_group":
        return [], []
    if facts.skipped_rows is None:
        raise ValueError("nonfinite_rewards='skip_group' needs RunFacts.skipped_rows")
    skip = SkipNonFiniteGroups(
        facts.skipped_rows, hold_for_resampling=resampling, threshold=cfg.reward_threshold
    )
    return [skip], [RestoreSkippedRewards()] if resampling else []


def _conditioned_prompts(cfg, facts: RunFacts) -> ConditionedPrompts:
    tokenizer = facts.tokenizer
    template = cfg.bicc_template.encode(template_encoder(tokenizer), max_items=facts.group_size)
    strip = {t for t in (*facts.eos_token_ids, tokenizer.pad_token_id) if t is not None}
    shared = dict(
        context_ratio=cfg.bicc_context_ratio,
        max_seq_len=cfg.bicc_max_seq_len,
        max_completion_length=cfg.max_completion_length,
        truncation=cfg.bicc_truncation,
        placement=cfg.bicc_placement,
        threshold=cfg.reward_threshold,
        strip_token_ids=strip,
        framing=cfg.bicc_framing_budget,
        pairing=cfg.bicc_pairing,
        render_chat=facts.render_chat
        or tokenizer_chat_renderer(tokenizer, getattr(cfg, "chat_template_kwargs", None)),
    )
    if cfg.bicc_form == "distill":
        # The loss reads the plain prompt: its old / reference log-probs stay TRL's.
        return TeacherPrompts(
            template,
            teacher=cfg.bicc_teacher,
            taught=cfg.bicc_distill_rows,
            keep_plain=False,
            reference_kl=False,
            **shared,
        )
    return ConditionedPrompts(
        template,
        ratio_mode=cfg.bicc_ratio_mode,
        # The plain pi_old: the mix's plain share, and RCC's sampling delta (the plain shift).
        keep_plain=cfg.bicc_mix < 1.0 or (cfg.rcc and cfg.rcc_reference == "sampling"),
        # conditioned_old: the policy reads the plain prompt, so does its KL term.
        reference_kl=cfg.bicc_kl_reference == "conditioned"
        and cfg.beta > 0
        and cfg.bicc_ratio_mode != "conditioned_old",
        off_policy_mask=cfg.off_policy_mask_threshold is not None,
        **shared,
    )
