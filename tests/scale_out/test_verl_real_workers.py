"""The shipped verl recipes on verl's own workers: ``python -m verl.trainer.main_ppo``.

Each recipe of ``recipes/verl/`` runs as a user runs it, through verl 0.9.1's own
entry point, Ray, its sync trainer, FSDP2 actor and reference over gloo, a rollout
server with weight sync after every update, validation and checkpoints, with only
sizes, devices and the rollout backend overridden (:data:`SIZES`, :func:`devices`),
on the embedded tiny Llama and arithmetic task built here (no download), whose
reward (:mod:`verl_task_reward`) replaces the recipe's math-verify one (its answers
are chains, not boxed numbers). What makes verl run on a CPU is test-side, in
:mod:`verl_cpu`, loaded in every process through verl's ``VERL_USE_EXTERNAL_MODULES``
hook.

Per recipe: 3 steps, then 1 more after a resume from the checkpoint of step 3;
once on 2 ranks; the BiCC recipe once more with the paper's form (3 steps); each recipe
in each of verl's asynchronous modes (``crlvr_colocate_async``, ``crlvr_separate_async``:
3 steps, rollouts one version old from step 2).
Checked: exit 0; every step logged; finite gradient norms; BiCC's context
tokens and transfer measure (BiCC recipe), the distill form's metrics; RCC's
baseline shift; ConSPO's margin at each step's progress; that the weights reach
the rollout (the rollout server starts from random weights, ``load_format=dummy``,
and its log-probs of the sampled tokens match the actor's on the same tokens,
verl's ``training/rollout_*probs*`` metrics).

Slow (5-7 minutes a run on a shared 2-core machine): marked ``verl_real``, kept out of
``make test``; ``make test-verl-real`` runs it. Needs verl (.venv-verl).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("verl")

from verl_runs import TESTS, build_task, devices, main_ppo, mode_overrides, rollout_gpus

pytestmark = [pytest.mark.verl_real, pytest.mark.slow]

GROUP = 4  # rollout.n
PROMPTS = 4  # data.train_batch_size


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict[str, Path]:
    """The tiny Llama, its tokenizer with a chat template, and the task as verl parquet."""
    return build_task(tmp_path_factory.mktemp("verl_task"))


# Sizes only: the model, data, batch and sequence sizes, step counts, worker counts
# (verl starts 8 agent-loop, 8 reward and 8 storage processes by default), checkpoint
# and log places, and the task's reward. The algorithm settings are the recipe's.
def sizes(task: dict[str, Path], out: Path, steps: int) -> list[str]:
    return [
        f"data.train_files={task['train']}",
        f"data.val_files={task['val']}",
        f"data.train_batch_size={PROMPTS}",
        "data.max_prompt_length=16",
        "data.max_response_length=24",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={task['model']}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={GROUP}",
        f"actor_rollout_ref.rollout.n={GROUP}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=3",
        "trainer.test_freq=3",
        f"trainer.default_local_dir={out / 'checkpoints'}",
        "trainer.logger=[console,file]",
        f"reward.custom_reward_function.path={TESTS / 'verl_task_reward.py'}",
        "reward.custom_reward_function.name=compute_score",
    ]


def merged(*runs: dict[int, dict]) -> dict[int, dict]:
    """Step records of several runs, each step's metrics merged (the resumed run logs its
    validation at the checkpoint's step too)."""
    out: dict[int, dict] = {}
    for run in runs:
        for step, metrics in run.items():
            out.setdefault(step, {}).update(metrics)
    return out


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def check_training_steps(steps: dict[int, dict], expected: list[int], log: str) -> None:
    missing = [s for s in expected if s not in steps or "actor/pg_loss" not in steps[s]]
    assert not missing, f"steps {missing} not logged\n{tail(log)}"
    for s in expected:
        grad = steps[s]["actor/grad_norm"]
        assert math.isfinite(grad), f"step {s}: grad norm {grad}"
        # the rollout's probabilities of its own samples are the actor's on the same tokens
        # (verl's debug metrics over every response token): the rollout server began with
        # random weights, under which they would be uncorrelated; only the sync can do
        # that. Not exact: the actor runs in the recipe's bf16, the rollout in float32.
        corr = steps[s]["training/rollout_actor_probs_pearson_corr"]
        diff = steps[s]["training/rollout_probs_diff_mean"]
        assert corr > 0.999 and diff < 0.01, f"step {s}: rollout vs actor corr {corr}, {diff}"


def run_recipe(
    recipe: str,
    task,
    tmp_path: Path,
    ranks: int = 1,
    resume: bool = True,
    extra: tuple[str, ...] = (),
):
    out = tmp_path / recipe
    out.mkdir()
    overrides = [*sizes(task, out, 3), *devices(ranks), *extra]
    code, steps, log = main_ppo(recipe, overrides, out, "first")
    assert code == 0, f"{recipe}: exit {code}\n{tail(log)}"
    check_training_steps(steps, [1, 2, 3], log)
    assert (out / "checkpoints" / "global_step_3").is_dir()
    after = {}
    if resume:
        code, after, log2 = main_ppo(
            recipe,
            [*sizes(task, out, 4), *devices(ranks), *extra, "trainer.resume_mode=auto"],
            out,
            "resumed",
        )
        assert code == 0, f"{recipe} resumed: exit {code}\n{tail(log2)}"
        # the resumed run starts at step 4 and trains only it
        assert sorted(s for s in after if "actor/pg_loss" in after[s]) == [4], tail(log2)
        check_training_steps(after, [4], log2)
    return steps, after


def test_grpo_bicc_rcc_recipe_on_verls_workers(task, tmp_path):
    steps, after = run_recipe("grpo_bicc_rcc", task, tmp_path)
    every = merged(steps, after)
    for s in (1, 2, 3, 4):
        m = every[s]
        # BiCC (the shipped recipe's form, distill): rows of groups with both outcomes
        # get a conditioned teacher; the wrong ones are taught
        assert m["bicc/context_tokens"] > 0, f"step {s}: no context tokens"
        assert 0 < m["bicc/conditioned_frac"] <= 1
        assert 0 < m["bicc/taught_frac"] <= m["bicc/conditioned_frac"]
        assert math.isfinite(m["actor/bicc/distill_gap"])
        # RCC: the baseline moved off the group mean where delta varies
        assert math.isfinite(m["crlvr/rcc/baseline_shift_mean"])
    assert any(every[s].get("crlvr/rcc/baseline_shift_max_abs", 0) > 0 for s in every)
    # the transfer probe (bicc_transfer_every 10 by default): the first step, not step 4
    assert -1.0 <= every[1]["bicc/transfer_cos"] <= 1.0
    assert all("bicc/transfer_cos" not in every[s] for s in (2, 3, 4))


def test_grpo_bicc_paper_form_on_verls_workers(task, tmp_path):
    """The shipped BiCC recipe with the paper's form (``bicc_form: conditioned``, the
    ``paper`` ratio; 3 steps, no resume): the loss reads the conditioned rows, the
    transfer probe at every step."""
    loss = "actor_rollout_ref.actor.policy_loss."
    extra = (  # "+": fields the recipe file does not list
        f"{loss}bicc_form=conditioned",
        f"{loss}bicc_ratio_mode=paper",
        f"+{loss}bicc_transfer_every=1",
    )
    steps, _ = run_recipe("grpo_bicc_rcc", task, tmp_path, resume=False, extra=extra)
    for s in (1, 2, 3):
        m = steps[s]
        assert m["bicc/context_tokens"] > 0, f"step {s}: no context tokens"
        assert 0 < m["bicc/conditioned_frac"] <= 1
        assert "bicc/taught_frac" not in m and "actor/bicc/distill_gap" not in m
        # probed every step; NaN is the probe's word for "nothing to compare": the probed
        # micro-batch held only groups of equal rewards, so plain GRPO's gradient is 0
        # (seen at step 3 of this run). Step 1's rows carry signal (both outcomes).
        cos = m["bicc/transfer_cos"]
        assert math.isnan(cos) or -1.0 <= cos <= 1.0, f"step {s}: {cos}"
    assert -1.0 <= steps[1]["bicc/transfer_cos"] <= 1.0


def test_conspo_rcc_recipe_on_verls_workers(task, tmp_path):
    steps, after = run_recipe("conspo_rcc", task, tmp_path)
    every = merged(steps, after)
    # margin m_t = (0.01 / 2)(1 - cos(pi * min(progress / 0.3, 1))), progress = (t - 1) / T
    for s, total in ((1, 3), (2, 3), (3, 3), (4, 4)):
        progress = min((s - 1) / total / 0.3, 1.0)
        expected = 0.005 * (1 - math.cos(math.pi * progress))
        assert every[s]["crlvr/conspo/margin"] == pytest.approx(expected, abs=1e-9)
    assert any(every[s].get("crlvr/rcc/baseline_shift_max_abs", 0) > 0 for s in every)


def test_grpo_bicc_rcc_recipe_on_two_ranks(task, tmp_path):
    steps, _ = run_recipe("grpo_bicc_rcc", task, tmp_path, ranks=2, resume=False)
    assert all(steps[s]["bicc/context_tokens"] > 0 for s in (1, 2, 3))
    # the probe's dot products summed over the two ranks' FSDP shards
    assert -1.0 <= steps[1]["bicc/transfer_cos"] <= 1.0


@pytest.mark.parametrize("mode", ["crlvr_colocate_async", "crlvr_separate_async"])
@pytest.mark.parametrize("recipe", ["grpo_bicc_rcc", "conspo_rcc"])
def test_recipes_in_verls_async_modes(task, tmp_path, recipe, mode):
    """The shipped recipe in one of verl's asynchronous modes (3 steps, no resume): verl
    prefetches one batch (``num_warmup_batches: 1``), so from step 2 every row was sampled
    by the weights one version old, and the stale-rollout choices apply (docs/algorithms.md,
    "Stale rollouts": the sampler's log-probs in the ratio, RCC importance-weighted)."""
    out = tmp_path / recipe
    out.mkdir()
    overrides = [*sizes(task, out, 3), *devices(1, rollout_gpus(mode)), *mode_overrides(mode)]
    code, steps, log = main_ppo(recipe, overrides, out, "first")
    assert code == 0, f"{recipe} in {mode}: exit {code}\n{tail(log)}"
    check_training_steps(steps, [1, 2, 3], log)
    for s in (1, 2, 3):
        m, lag = steps[s], 0 if s == 1 else 1
        assert m["training/off_policy/trajectory_staleness/mean"] == lag, f"step {s}"
        assert m["crlvr/staleness/stale_frac"] == lag, f"step {s}"
        assert math.isfinite(m["crlvr/rcc/baseline_shift_mean"])
        if s > 1:  # stale rows: RCC's weights pi_proximal / pi_sampler
            assert 0 < m["crlvr/rcc/iw_effective_share"] <= 1, f"step {s}"
        if recipe == "grpo_bicc_rcc":
            assert m["bicc/context_tokens"] > 0, f"step {s}: no context tokens"
            assert 0 < m["bicc/taught_frac"] <= m["bicc/conditioned_frac"] <= 1
        else:
            progress = min((s - 1) / 3 / 0.3, 1.0)
            expected = 0.005 * (1 - math.cos(math.pi * progress))
            assert m["crlvr/conspo/margin"] == pytest.approx(expected, abs=1e-9)
            assert 0 <= m["crlvr/staleness/mixed_version_groups"] <= 1
