"""The project's trainers in verl's asynchronous v1 modes, the stale-rollout choices, and the
start checks that run before Ray.

- the three ``crlvr_*`` trainers are registered, each on verl's trainer of its mode, and
  tell verl their mode's own name (its replay buffer, checkpoints, ``trainer.v1.<mode>``);
- ``separate_async`` with BiCC gets the worker that keeps verl's weight save / restore;
- the stale-rollout choices (:mod:`contrastive_rlvr.integrations.verl.staleness`) on
  hand-made batches, with numbers worked out by hand: the sampler's log-probs in the
  update, RCC's importance-weighted baseline, the version checks;
- refusals: each bad setting made, each refused in one line naming the setting; verl's
  experimental trainers and verl's own modes with BiCC / RCC refused through verl's own
  entry points before Ray starts (``ray init kwargs`` is never printed).

Needs verl (.venv-verl).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("verl")

from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.trainer.ppo.utils import Role
from verl.trainer.ppo.v1 import (
    PPOTrainer,
    PPOTrainerColocateAsync,
    PPOTrainerSeparateAsync,
    PPOTrainerSync,
    get_trainer_cls,
)
from verl_fakes import FakeTQ
from verl_runs import RECIPES, ROOT, TESTS, compose_recipe, with_overrides

from contrastive_rlvr.integrations.verl import offpolicy, transfer
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.launch import check_launch
from contrastive_rlvr.integrations.verl.settings import check_settings
from contrastive_rlvr.integrations.verl.trainer import (
    CrlvrColocateAsyncTrainer,
    CrlvrSeparateAsyncTrainer,
    CrlvrTrainer,
)
from contrastive_rlvr.integrations.verl.worker import (
    CrlvrActorRolloutRefWorker,
    CrlvrDetachActorWorker,
)

torch.set_num_threads(1)

PL = "actor_rollout_ref.actor.policy_loss."
MODE = "trainer.v1.trainer_mode"
SAMPLER = "actor_rollout_ref.rollout.calculate_log_probs"
COLOCATE, SEPARATE = "colocate_async", "separate_async"


@pytest.fixture(scope="module")
def recipes():
    return {name: compose_recipe(name) for name in ("grpo_bicc_rcc", "conspo_rcc")}


# ----------------------------------------------------------------------------- the trainers


@pytest.mark.parametrize(
    "name, cls, verl_cls, mode",
    [
        ("crlvr_sync", CrlvrTrainer, PPOTrainerSync, "sync"),
        ("crlvr_colocate_async", CrlvrColocateAsyncTrainer, PPOTrainerColocateAsync, COLOCATE),
        ("crlvr_separate_async", CrlvrSeparateAsyncTrainer, PPOTrainerSeparateAsync, SEPARATE),
    ],
)
def test_each_mode_is_verls_trainer_of_that_mode_under_its_own_mode_name(name, cls, verl_cls, mode):
    assert get_trainer_cls(name) is cls and issubclass(cls, verl_cls)
    trainer = object.__new__(cls)
    trainer.trainer_mode = name  # what PPOTrainer.__init__ assigns
    # verl compares with "sync" and reads trainer.v1.<mode> under this name
    assert trainer.trainer_mode == mode
    other = "separate_async" if mode != "separate_async" else "sync"
    with pytest.raises(ValueError, match=name):
        trainer.trainer_mode = other


@pytest.mark.parametrize(
    "cls, verl_worker, expected",
    [
        (CrlvrColocateAsyncTrainer, "verl's ActorRolloutRefWorker", CrlvrActorRolloutRefWorker),
        (CrlvrSeparateAsyncTrainer, DetachActorWorker, CrlvrDetachActorWorker),
    ],
)
def test_bicc_worker_keeps_what_the_mode_needs(monkeypatch, cls, verl_worker, expected):
    # separate_async computes old log-probs with the weights saved at the start of its
    # cycle (DetachActorWorker.save_model_to_cpu / restore_model_from_cpu): BiCC's worker
    # must keep them, as well as the distill loss and the probe.
    assert issubclass(CrlvrDetachActorWorker, DetachActorWorker)
    assert issubclass(CrlvrDetachActorWorker, CrlvrActorRolloutRefWorker)
    for method in ("save_model_to_cpu", "restore_model_from_cpu", "crlvr_transfer_probe"):
        assert hasattr(CrlvrDetachActorWorker, method)

    def verls(self):
        self.role_worker_mapping = {Role.ActorRolloutRef: verl_worker}

    monkeypatch.setattr(PPOTrainer, "_init_resource_pool_mgr", verls)
    monkeypatch.setattr(PPOTrainerSeparateAsync, "_init_resource_pool_mgr", verls)
    trainer = object.__new__(cls)
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True)
    trainer._init_resource_pool_mgr()
    remote = trainer.role_worker_mapping[Role.ActorRolloutRef]
    assert remote.__ray_metadata__.modified_class.__mro__[1] is expected


# ----------------------------------------------------------------------------- engine-free math


def test_row_staleness_and_mixed_groups_from_verls_version_tags():
    tags = [
        {"min_global_steps": 2, "max_global_steps": 2},
        {"min_global_steps": 1, "max_global_steps": 1},
        {"min_global_steps": 3, "max_global_steps": 3},
        {},  # padding: the current version
    ]
    # step 4 trains version 3: lags 1, 2, 0, 0
    assert offpolicy.row_staleness(tags, 4).tolist() == [1, 2, 0, 0]
    tags = [
        {"min_global_steps": 1, "max_global_steps": 1},  # a: one version
        {"min_global_steps": 1, "max_global_steps": 1},
        {"min_global_steps": 1, "max_global_steps": 1},  # b: ends on two versions
        {"min_global_steps": 2, "max_global_steps": 2},
        {"min_global_steps": 1, "max_global_steps": 2},  # c: one row spans two
        {"min_global_steps": 1, "max_global_steps": 2},
    ]
    index = ["a", "a", "b", "b", "c", "c"]
    assert offpolicy.mixed_version_groups(index, tags, 3) == ["b", "c"]


def test_weighted_rcc_baseline_by_hand_and_equal_weights_give_rcc():
    # R = [1, 0], delta = [0.5, -0.5], w = [3, 1] -> v = [0.75, 0.25]:
    # mean_w R = 0.75, mean_w d = 0.25, Cov_w = 0.75*0.25*0.25 + 0.25*(-0.75)*(-0.75) = 0.1875
    r, d = torch.tensor([1.0, 0.0]), torch.tensor([0.5, -0.5])
    log_w = torch.tensor([math.log(3.0), 0.0])
    b = offpolicy.weighted_rcc_baselines(r, d, log_w, ["g", "g"], coef=1.0, bound="none")
    assert b.tolist() == pytest.approx([0.9375, 0.9375])
    b = offpolicy.weighted_rcc_baselines(r, d, log_w, ["g", "g"], coef=2.0, bound="none")
    assert b.tolist() == pytest.approx([1.125, 1.125])
    b = offpolicy.weighted_rcc_baselines(r, d, log_w, ["g", "g"], coef=2.0, bound="reward_range")
    assert b.tolist() == pytest.approx([1.0, 1.0])  # clamped to max R
    adv = offpolicy.weighted_rcc_advantages(
        r, d, log_w, ["g", "g"], coef=1.0, bound="none", scale_by_std=True, eps=0.0
    )
    assert adv.tolist() == pytest.approx([0.0625 / math.sqrt(0.5), -0.9375 / math.sqrt(0.5)])
    # equal weights: RCC's population mean and covariance (0.5 + 1 * 0.25)
    from contrastive_rlvr.algorithms import rcc_advantages

    gen = torch.Generator().manual_seed(0)
    r8 = torch.randint(0, 2, (8,), generator=gen).float()
    d8 = torch.randn(8, generator=gen)
    idx = ["x"] * 4 + ["y"] * 4
    same = offpolicy.weighted_rcc_advantages(
        r8, d8, torch.full((8,), -3.0), idx, coef=2.0, bound="reward_range",
        scale_by_std=True, eps=1e-4,
    )  # fmt: skip
    expected = rcc_advantages(r8, d8, 4, coef=2.0, bound="reward_range", eps=1e-4)
    assert torch.allclose(same, expected, atol=1e-6)
    # an all-equal group has no contrast
    flat = offpolicy.weighted_rcc_advantages(
        torch.ones(2), d, log_w, ["g", "g"], coef=1.0, bound="none", scale_by_std=True, eps=0
    )
    assert flat.tolist() == [0.0, 0.0]


def test_sequence_log_weights_and_effective_share():
    proximal = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]])
    sampler = torch.tensor([[-1.5, -2.5], [-1.5, -9.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    stale = torch.tensor([True, False])
    # row 0: 0.5 + 0.5; row 1 is of the current version: weight 1
    assert offpolicy.sequence_log_weights(proximal, sampler, mask, stale).tolist() == [1.0, 0.0]
    assert offpolicy.effective_share(torch.zeros(4), ["a"] * 4) == pytest.approx(1.0)
    # one row takes (almost) all the weight: 1 / G
    lopsided = torch.tensor([0.0, -60.0, -60.0, -60.0])
    assert offpolicy.effective_share(lopsided, ["a"] * 4) == pytest.approx(0.25)


# ----------------------------------------------------------------------------- the hooks


def row(response, reward, old, ref, sampler):
    n = len(response)
    scores = torch.zeros(n)
    scores[-1] = reward
    return {
        "prompts": torch.tensor([1, 2]),
        "responses": torch.tensor(response),
        "input_ids": torch.tensor([1, 2, *response]),
        "response_mask": torch.ones(n, dtype=torch.int64),
        "rm_scores": scores,
        "old_log_probs": torch.full((n,), old),
        "ref_log_prob": torch.full((n,), ref),
        "rollout_log_probs": torch.full((n,), sampler),
        "entropy": torch.full((n,), 0.25),
    }


def async_trainer(cfg, monkeypatch, rows, tags, global_steps=2, **crlvr):
    trainer = object.__new__(CrlvrColocateAsyncTrainer)
    trainer.config = cfg
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", **crlvr)
    trainer.global_steps = global_steps
    trainer.total_training_steps = 10
    store = FakeTQ(rows)
    monkeypatch.setattr(transfer, "tq", store)
    return trainer, store, store.meta(list(rows), tags=tags)


def async_config(recipes, **more):
    return with_overrides(
        recipes["grpo_bicc_rcc"], **{MODE: "crlvr_colocate_async", SAMPLER: True, **more}
    )


STALE = {"min_global_steps": 0, "max_global_steps": 0}  # at step 2: one version old


def test_rcc_baseline_is_importance_weighted_over_stale_rows(recipes, monkeypatch):
    # delta = old - ref = [0.5, -0.5]; log w = old - sampler = [log 3, 0] (one token each)
    rows = {
        "g_0_0": row([10], 1.0, old=-0.5, ref=-1.0, sampler=-0.5 - math.log(3.0)),
        "g_1_0": row([11], 0.0, old=-1.5, ref=-1.0, sampler=-1.5),
    }
    trainer, store, meta = async_trainer(
        async_config(recipes), monkeypatch, rows, [STALE, STALE], rcc_coef=1.0
    )
    metrics = {}
    out = trainer._compute_advantage(meta, metrics)
    assert "advantages" in out.fields
    adv = [store.rows[k]["advantages"][0].item() for k in ("g_0_0", "g_1_0")]
    std = math.sqrt(0.5) + trainer.crlvr.adv_eps
    # b*_w = 0.9375 (unweighted RCC would give 0.5 + 0.25 = 0.75)
    assert adv == pytest.approx([(1 - 0.9375) / std, (0 - 0.9375) / std], abs=1e-5)
    assert metrics["crlvr/staleness/stale_frac"] == 1.0
    assert metrics["crlvr/staleness/mixed_version_groups"] == 0.0
    # w = [3, 1]: Kish share (4^2) / (2 * 10) = 0.8
    assert metrics["crlvr/rcc/iw_effective_share"] == pytest.approx(0.8)
    assert metrics["crlvr/rcc/baseline_shift_mean"] == pytest.approx(0.9375 - 0.5, abs=1e-5)


def test_rcc_as_sampled_and_fresh_rows_take_rccs_own_baseline(recipes, monkeypatch):
    rows = {
        "g_0_0": row([10], 1.0, old=-0.5, ref=-1.0, sampler=-0.5 - math.log(3.0)),
        "g_1_0": row([11], 0.0, old=-1.5, ref=-1.0, sampler=-1.5),
    }
    std = math.sqrt(0.5) + 1e-4
    fresh = {"min_global_steps": 1, "max_global_steps": 1}  # at step 2: the current version
    for tags, extra in (([STALE, STALE], {"rcc_offpolicy": "as_sampled"}), ([fresh, fresh], {})):
        trainer, store, meta = async_trainer(
            async_config(recipes), monkeypatch, dict(rows), tags, rcc_coef=1.0, **extra
        )
        metrics = {}
        trainer._compute_advantage(meta, metrics)
        adv = [store.rows[k]["advantages"][0].item() for k in ("g_0_0", "g_1_0")]
        assert adv == pytest.approx([(1 - 0.75) / std, (0 - 0.75) / std], abs=1e-5)
        assert "crlvr/rcc/iw_effective_share" not in metrics


def test_conspo_refuses_a_group_of_mixed_versions_when_asked(recipes, monkeypatch):
    cfg = with_overrides(recipes["conspo_rcc"], **{MODE: "crlvr_colocate_async", SAMPLER: True})
    rows = {
        "g_0_0": row([10], 1.0, old=-0.5, ref=-1.0, sampler=-0.5),
        "g_1_0": row([11], 0.0, old=-1.5, ref=-1.0, sampler=-1.5),
    }
    newer = {"min_global_steps": 1, "max_global_steps": 1}
    trainer, _, meta = async_trainer(cfg, monkeypatch, rows, [STALE, newer])
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_conspo")
    metrics = {}
    trainer._compute_advantage(meta, metrics)  # allow: the share is logged
    assert metrics["crlvr/staleness/mixed_version_groups"] == 1.0
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_conspo", conspo_mixed_versions="refuse")
    with pytest.raises(ValueError, match="conspo_mixed_versions='refuse'") as err:
        trainer._compute_advantage(meta, {})
    assert "\n" not in str(err.value) and "'g'" in str(err.value)


def test_the_update_divides_by_the_samplers_log_probs_then_they_go_back(recipes, monkeypatch):
    rows = {"g_0_0": row([10, 11], 1.0, old=-0.5, ref=-1.0, sampler=-0.9)}
    trainer, store, meta = async_trainer(async_config(recipes), monkeypatch, rows, [STALE])
    seen = {}

    def verls_update(self, batch, metrics):
        # what verl's worker reads through the meta it is handed
        seen["old"] = store.worker_get(batch, ["old_log_probs"])["old_log_probs"][0].tolist()
        return batch

    monkeypatch.setattr(PPOTrainer, "_update_actor", verls_update)
    out = trainer._update_actor(meta, {})
    assert seen["old"] == pytest.approx([-0.9, -0.9])  # the sampler's
    assert store.rows["g_0_0"]["old_log_probs"].tolist() == pytest.approx([-0.5, -0.5])
    assert "old_log_probs" in out.fields
    # stale_ratio=proximal: verl's recomputed ones
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", stale_ratio="proximal")
    trainer._update_actor(meta, {})
    assert seen["old"] == pytest.approx([-0.5, -0.5])
    # crlvr_sync: unset means proximal (k = 0)
    trainer.config = with_overrides(trainer.config, **{MODE: "crlvr_sync"})
    trainer.crlvr = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo")
    trainer._update_actor(meta, {})
    assert seen["old"] == pytest.approx([-0.5, -0.5])


# ----------------------------------------------------------------------------- refusals


CONSISTENT = {PL + "bicc_form": "conditioned", PL + "bicc_ratio_mode": "consistent"}
#: A standalone rollout pool with a checkpoint engine that can reach it (separate_async).
POOL = {
    "actor_rollout_ref.rollout.nnodes": 1,
    "actor_rollout_ref.rollout.n_gpus_per_node": 8,
    "actor_rollout_ref.rollout.checkpoint_engine.backend": "nccl",
}


@pytest.mark.parametrize(
    "name, overrides, message",
    [
        ("grpo_bicc_rcc", {MODE: "crlvr_colocate_async", SAMPLER: False}, f"{SAMPLER}=true"),
        (
            "grpo_bicc_rcc",
            {MODE: "crlvr_separate_async", **POOL, SAMPLER: True, **CONSISTENT},
            "bicc_ratio_mode='consistent' takes the ratio's denominator",
        ),
        (
            "grpo_bicc_rcc",
            {MODE: "crlvr_colocate_async", SAMPLER: True, PL + "rcc_offpolicy": "refuse"},
            "rcc_offpolicy='refuse'",
        ),
        (
            "grpo_bicc_rcc",
            {MODE: "crlvr_colocate_async", SAMPLER: False, PL + "stale_ratio": "proximal"},
            "rcc_offpolicy='importance_weighted' weighs stale rows",
        ),
        ("conspo_rcc", {PL + "stale_ratio": "sampler"}, "reads no old log-probs"),
        # 128 prompts = parameter_sync_step 4 (verl's default) x 32 holds; 3 does not
        (
            "grpo_bicc_rcc",
            {MODE: "crlvr_separate_async", f"trainer.v1.{SEPARATE}.parameter_sync_step": 3},
            "must equal trainer.v1.separate_async.parameter_sync_step=3",
        ),
        ("grpo_bicc_rcc", {MODE: "crlvr_separate_async"}, "rollout.nnodes > 0"),
        (
            "grpo_bicc_rcc",
            {
                MODE: "crlvr_separate_async",
                **POOL,
                "actor_rollout_ref.rollout.checkpoint_engine.backend": "naive",
            },
            "not naive",
        ),
        ("grpo_bicc_rcc", {PL + "rcc_offpolicy": "sometimes"}, "rcc_offpolicy"),
        # a choice away from its default for a method the run does not use
        (
            "grpo_bicc_rcc",
            {"algorithm.adv_estimator": "crlvr_grpo", PL + "rcc_offpolicy": "as_sampled"},
            "rcc_offpolicy='as_sampled' has nothing to act on",
        ),
        (
            "grpo_bicc_rcc",
            {PL + "conspo_mixed_versions": "refuse"},
            "conspo_mixed_versions='refuse' has nothing to act on",
        ),
    ],
)
def test_stale_choices_the_run_cannot_honour_are_refused(recipes, name, overrides, message):
    cfg = recipes[name]
    for key, value in overrides.items():  # "+": fields the recipe file does not list
        cfg = with_overrides(cfg, **{key: value})
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        check_settings(cfg)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides",
    [
        {MODE: "crlvr_colocate_async", SAMPLER: True},
        {MODE: "crlvr_separate_async", **POOL},
        {MODE: "crlvr_separate_async", **POOL, PL + "stale_ratio": "proximal", **CONSISTENT},
        {
            MODE: "crlvr_colocate_async",
            SAMPLER: False,
            PL + "stale_ratio": "proximal",
            PL + "rcc_offpolicy": "as_sampled",
        },
        {MODE: "crlvr_sync"},  # the shipped recipe as it is
    ],
)
def test_the_choices_a_run_can_honour_pass(recipes, overrides):
    check_settings(with_overrides(recipes["grpo_bicc_rcc"], **overrides))


@pytest.mark.parametrize(
    "entry, overrides, where",
    [
        ("verl.experimental.one_step_off_policy.main_ppo", {}, "experimental one_step_off_policy"),
        ("verl.experimental.fully_async_policy.fully_async_main", {}, "fully_async_policy"),
        ("verl.trainer.main_ppo", {"trainer.use_v1": False}, "legacy trainer"),
        ("verl.trainer.main_ppo", {MODE: "colocate_async"}, "trainer_mode=colocate_async"),
    ],
)
def test_bicc_and_rcc_outside_the_crlvr_trainers_are_refused(recipes, entry, overrides, where):
    cfg = with_overrides(recipes["grpo_bicc_rcc"], **overrides)
    with pytest.raises(ValueError) as err:
        check_launch(cfg, entry)
    text = str(err.value)
    assert where in text and "crlvr_sync / crlvr_colocate_async / crlvr_separate_async" in text
    assert text.startswith("algorithm.adv_estimator=crlvr_rcc") and "\n" not in text
    # BiCC alone (plain GRPO advantages) is named too
    plain = with_overrides(cfg, **{"algorithm.adv_estimator": "grpo"})
    with pytest.raises(ValueError, match=r"policy_loss\.bicc=true does not run"):
        check_launch(plain, entry)
    # nothing of this package: verl's own run is left alone
    verls = with_overrides(plain, **{PL + "bicc": False})
    check_launch(verls, entry)


def test_a_crlvr_mode_runs_every_start_check_at_launch(recipes):
    cfg = with_overrides(recipes["grpo_bicc_rcc"], **{MODE: "crlvr_colocate_async", SAMPLER: False})
    with pytest.raises(ValueError, match="calculate_log_probs=true"):
        check_launch(cfg, "verl.trainer.main_ppo")


def launch(module: str, args: list[str], out) -> subprocess.CompletedProcess:
    """``python -m module args`` from the directory holding verl (the experimental configs
    find verl's defaults through ``file://verl/trainer/config``), Hydra's files in ``out``."""
    import verl

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)]),
        "HF_HUB_OFFLINE": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args, f"hydra.run.dir={out}"],
        env=env, capture_output=True, text=True, timeout=300,
        cwd=os.path.dirname(os.path.dirname(verl.__file__)),
    )  # fmt: skip


@pytest.mark.parametrize(
    "module, args, where",
    [
        (
            "verl.experimental.one_step_off_policy.main_ppo",
            ["algorithm.adv_estimator=crlvr_rcc", "actor_rollout_ref.actor.use_kl_loss=true"],
            "experimental one_step_off_policy trainer",
        ),
        (
            "verl.trainer.main_ppo",
            ["--config-path", str(RECIPES), "--config-name", "grpo_bicc_rcc", f"{MODE}={COLOCATE}"],
            "trainer.v1.trainer_mode=colocate_async",
        ),
    ],
)
def test_verls_entry_points_refuse_before_ray_starts(module, args, where, tmp_path):
    done = launch(module, args, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out[-2000:]
    # Hydra's short traceback, then the refusal: one line
    line = next(x for x in out.splitlines() if x.startswith("ValueError: "))
    assert where in line and "crlvr_colocate_async" in line
    # run_ppo prints its Ray arguments just before ray.init: never reached
    assert "ray init kwargs" not in out and "Started a local Ray instance" not in out
