"""The catalogue of the loss-side metrics a run writes to ``metrics.jsonl``, by loss route:
each key and its meaning (every key in docs/metrics.md).

The trainer's callbacks log under these keys and the report and plots read them back, so
the table lives below both.
"""

from __future__ import annotations

#: The loss-side keys of a run on the project's loss (gmpo, conspo, ReCo, OC-GRPO,
#: GSPO-token, rcc_reference='sampling', bicc_mix < 1: trl_settings.project_loss_reason).
PROJECT_LOSS_METRIC_KEYS = {
    "loss/policy": "the policy term of the loss, without KL (policy recipes)",
    "clip_ratio/region_mean": "share of tokens (rows for gspo) where clipping zeroes the "
    "gradient (gmpo: its clipped log-ratio)",
    "clip_ratio/low_mean": "the same, ratio below 1 - clip_low with A < 0",
    "clip_ratio/high_mean": "the same, ratio above 1 + clip_high with A > 0",
    "ratio/mean": "mean importance ratio (rows for gspo; gmpo's geometric-mean weight)",
    "kl": "(reference log-probs in the batch: beta > 0) mean per-token k3 KL",
    "conspo/valid_groups": "(conspo) share of groups with both positives and negatives",
    "conspo/pos_prob": "(conspo) mean InfoNCE probability of the positives",
    "conspo/score_gap": "(conspo) mean score of the positives minus the negatives",
    "aux_loss": "(a MoE model) the router load-balancing loss, as TRL logs it",
}

#: The loss-side keys of a run on TRL's own _compute_loss (grpo, dr_grpo, dapo, gspo
#: otherwise), under TRL's names; per token, per sequence for gspo (sequence-level ratio).
TRL_LOSS_METRIC_KEYS = {
    "clip_ratio/low_mean": "share of tokens (rows for gspo) with ratio < 1 - epsilon and A < 0",
    "clip_ratio/high_mean": "share of tokens (rows for gspo) with ratio > 1 + epsilon_high, A > 0",
    "clip_ratio/region_mean": "share of tokens (rows for gspo) in either clipped region",
    "clip_ratio/low_min": "lowest share of low-clipped tokens in one completion",
    "clip_ratio/high_max": "highest share of high-clipped tokens in one completion",
    "entropy": "mean per-token entropy of the policy over completion tokens",
    "kl": "(beta > 0) mean per-token KL to the reference (TRL's k3, or its bias-corrected one)",
    "policy_loss": "(entropy_coef set) the loss before the entropy bonus",
    "entropy_coef": "(entropy_coef set) the entropy bonus coefficient of the step",
    "aux_loss": "(a MoE model) the router load-balancing loss",
}

#: The core losses' metric names (``contrastive_rlvr.algorithms``) -> the name a run logs:
#: TRL's, for the quantities TRL's ``_compute_loss`` logs too (the same definitions), so
#: one quantity has one key whichever loss route computed it. The core keeps its names:
#: verl logs them as ``crlvr/<core key>``, which renaming them would change.
LOGGED_NAMES = {
    "clip/frac": "clip_ratio/region_mean",
    "clip/low_frac": "clip_ratio/low_mean",
    "clip/high_frac": "clip_ratio/high_mean",
    "kl/mean": "kl",
}


def logged_name(core_key: str) -> str:
    """The metrics.jsonl key of a core loss metric (:data:`LOGGED_NAMES`)."""
    return LOGGED_NAMES.get(core_key, core_key)


#: The share clipped to zero gradient, on either loss route (tokens; rows for GSPO).
CLIP_FRACTION_KEYS = ("clip_ratio/region_mean",)
FIRST_UPDATE_CLIP_KEY = "bicc/first_update_clip_frac"
