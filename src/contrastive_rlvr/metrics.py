"""The catalogue of metrics a run writes to ``metrics.jsonl``: each key and its meaning
(also in docs/metrics.md).

The trainer's callbacks log under these keys and the report and plots read them back, so
the table lives below both.
"""

from __future__ import annotations

#: metrics.jsonl keys every run logs whichever loss it uses (the stages', the guards', the
#: verifier's and TRL's generation-side ones), and their meaning (also in docs/metrics.md).
METRIC_KEYS = {
    "step": "optimizer step",
    "reward": "mean total reward of the step's completions (TRL)",
    "reward/accuracy": "share of completions with reward > reward_threshold",
    "reward/unscorable": "rows every reward function left unscored (counted as reward 0)",
    "adv/collapse_rate": "share of groups whose rewards are all equal (zero advantage)",
    "adv/collapse_wrong_rate": "share of groups whose rewards are all equal and all wrong "
    "(<= reward_threshold, e.g. all 0)",
    "adv/collapse_correct_rate": "share of groups whose rewards are all equal and all "
    "correct (> reward_threshold, e.g. all 1)",
    "rcc/cov": "mean over groups of the population Cov(R, delta)",
    "rcc/delta_mean": "mean delta of all completions",
    "rcc/delta_correct": "mean delta of the correct completions",
    "rcc/delta_wrong": "mean delta of the wrong completions",
    "rcc/baseline_shift": "(RCC on) mean |b* - mean_g R| over groups",
    "bicc/context_tokens": "(BiCC on) mean tokens of BiCC context added per row",
    "bicc/conditioned_frac": "(BiCC on) share of rows given a conditioned prompt",
    "bicc/first_update_clip_frac": "(BiCC on) clip_ratio/region_mean of the run's first "
    "optimizer update, logged once (docs/bicc.md, ratio modes)",
    # What the loss's forwards process in one optimizer step (shared_forward/tokens.py).
    "tokens/loss_rows_plain": "real tokens of the rows the loss reads on the plain prompt "
    "(prompt + completion each), summed over micro-batches and processes",
    "tokens/loss_forward_plain": "tokens the loss's plain-prompt forwards encoded (packed: "
    "each shared prompt once); the rows' when each row runs alone",
    "tokens/loss_rows_conditioned": "(BiCC) the same rows' tokens on the conditioned prompt",
    "tokens/loss_forward_conditioned": "(BiCC) tokens the conditioned forwards encoded",
    "reward/skipped_groups": "groups skipped for a non-finite reward (skip_group)",
    "loss/nonfinite_total": "training losses found non-finite so far",
    "loss/skipped_updates_total": "optimizer steps skipped for a non-finite loss or gradient",
    "guard/rolled_back_total": "optimizer steps rolled back for non-finite parameters",
    # The verifier's counters (math_verify rewards; cumulative since the reward was made,
    # summed over reward functions and processes; VerifierCountersCallback).
    "verifier/timeouts": "answers whose verifier worker's alarm fired (scored 0)",
    "verifier/killed": "answers whose worker missed the deadline and was killed (scored 0)",
    "verifier/crashed": "answers whose worker died while checking them (scored 0)",
    "verifier/errors": "answers on which math-verify raised (scored 0)",
    "verifier/worker_restarts": "verifier workers started to replace killed or dead ones",
    "verifier/worker_crashes": "verifier worker processes found dead",
    "verifier/server_restarts": "verifier servers found dead and started again",
    "loss": "training loss (TRL)",
    "step_time": "seconds of the optimizer step, generation included (TRL)",
}

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
