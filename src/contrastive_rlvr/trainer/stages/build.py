"""The pipeline of a run, built once from its config: the one place that reads the
method switches (``bicc``, ``rcc``, ``verigate``, ``reco``, ``oc_grpo``,
``dynamic_sampling``) to decide which stages run. The table in
docs/architecture.md lists the stages, what they read and write, and their switch.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ..seed_inputs import build_process_scorer
from ..trl_settings import effective_recipe, keeps_trl_advantages
from .advantages import Advantages
from .base import Pipeline
from .bicc import ConditionedPrompts
from .diagnostics import BatchDiagnostics
from .dynamic_sampling import DynamicSampling
from .hinted_round import HintedRound
from .logprobs import LogProbPasses
from .reco import OccurrenceWeights
from .rewards import RowRewards
from .verigate import ProcessAdvantages


def needs_reference(cfg) -> bool:  # noqa: ANN001
    """A frozen reference is needed for KL, for RCC's delta and for the delta diagnostics."""
    return cfg.beta > 0 or (cfg.rcc and cfg.rcc_reference == "reference") or cfg.log_delta


@dataclass
class RunFacts:
    """What the pipeline needs to know about the run besides the config."""

    tokenizer: Any
    group_size: int
    has_reference: bool
    eos_token_ids: Collection[int] = ()
    dataset_columns: Sequence[str] | None = None
    num_processes: int = 1


def build_stages(cfg, facts: RunFacts) -> dict[str, Pipeline]:  # noqa: ANN001
    """The training and evaluation pipelines (evaluation does not sample again).

    In the order of the papers' step: sample again where a group carries no signal
    (OC-GRPO's hinted round, DAPO's dynamic sampling), take the rows' rewards, the
    old / reference log-probs and delta, the recipe's advantages (RCC-corrected), then
    the per-method inputs of the loss (VeriGate's process advantages, ReCo's weights,
    BiCC's conditioned prompts), and the diagnostics last."""
    recipe = effective_recipe(cfg)  # with the run's scale_rewards
    rcc_reference = cfg.rcc and cfg.rcc_reference == "reference"
    resample = []
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

    stages: list = [RowRewards()]
    old_for_bicc = cfg.bicc and cfg.bicc_ratio_mode == "paper"
    if old_for_bicc or facts.has_reference:
        stages.append(
            LogProbPasses(
                old=old_for_bicc,
                reference=facts.has_reference,
                keep_reference=cfg.beta > 0,
                delta_reduce=cfg.rcc_delta,
            )
        )
    # scale_rewards='batch' / normalize_then_sum: TRL's advantages stay (trl_settings.py).
    if (recipe.objective == "policy" and not keeps_trl_advantages(cfg)) or rcc_reference:
        stages.append(Advantages(recipe, rcc=rcc_reference, rcc_coef=cfg.rcc_coef, eps=cfg.adv_eps))
    if cfg.verigate:
        stages.append(
            ProcessAdvantages(
                build_process_scorer(cfg.verigate_scorer),
                step_rule=cfg.verigate_step_rule,
                step_pattern=cfg.verigate_step_pattern,
                scale_by_std=recipe.scale_by_std,
                eps=cfg.adv_eps,
                process_norm=cfg.verigate_process_norm,
            )
        )
    if cfg.reco:
        stages.append(
            OccurrenceWeights(identity=cfg.reco_identity, factor_norm=cfg.reco_factor_norm)
        )
    if cfg.bicc:
        stages.append(_conditioned_prompts(cfg, facts))
    stages.append(
        BatchDiagnostics(threshold=cfg.reward_threshold, rcc_coef=cfg.rcc_coef if cfg.rcc else None)
    )
    return {"train": Pipeline(resample + stages), "eval": Pipeline(stages)}


def _conditioned_prompts(cfg, facts: RunFacts) -> ConditionedPrompts:  # noqa: ANN001
    tokenizer = facts.tokenizer
    template = cfg.bicc_template.encode(
        lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
        max_items=facts.group_size,
    )
    strip = {t for t in (*facts.eos_token_ids, tokenizer.pad_token_id) if t is not None}
    return ConditionedPrompts(
        template,
        ratio_mode=cfg.bicc_ratio_mode,
        context_ratio=cfg.bicc_context_ratio,
        max_seq_len=cfg.bicc_max_seq_len,
        truncation=cfg.bicc_truncation,
        placement=cfg.bicc_placement,
        threshold=cfg.reward_threshold,
        strip_token_ids=strip,
        keep_plain=cfg.bicc_mix < 1.0,
        reference_kl=cfg.bicc_ratio_mode == "consistent" and cfg.beta > 0,
    )
