"""The crlvr_sync trainer's hooks on hand-made batches, and the verl recipes against verl's schema.

TransferQueue is replaced by an in-memory store holding the same nested
(jagged) tensors verl keeps there. Needs verl (the Makefile's .venv-verl).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

pytest.importorskip("verl")

import torch
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.trainer.ppo.v1 import trainer_base
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl_fakes import FakeProbeWorkers, FakeTQ
from verl_runs import compose_recipe, with_overrides

from contrastive_rlvr.algorithms import BiCCTemplate
from contrastive_rlvr.integrations.verl import bicc_hooks, settings, transfer
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.trainer import CrlvrTrainer, check_settings

torch.set_num_threads(1)

EOS, PAD = 99, 0
VERL_POLICY_LOSS_CONFIG = "verl.workers.config.PolicyLossConfig"


@pytest.fixture(scope="module")
def recipes():
    """The shipped recipes; the BiCC one with the paper's form, whose conditioned rows go
    through the actor (the token limits, balancing and ratio modes tested here; the
    default distill form's driver is tests/scale_out/test_verl_distill.py's)."""
    grpo = with_overrides(
        compose_recipe("grpo_bicc_rcc"),
        **{"actor_rollout_ref.actor.policy_loss.bicc_form": "conditioned"},
    )
    return {"grpo_bicc_rcc": grpo, "conspo_rcc": compose_recipe("conspo_rcc")}


# ----------------------------------------------------------------------------- recipes


@pytest.mark.parametrize("name", ["grpo_bicc_rcc", "conspo_rcc"])
@pytest.mark.filterwarnings("ignore:Disabled critic")
def test_verl_recipe_composes_validates_and_selects_our_classes(recipes, name):
    cfg = recipes[name]
    validate_config(
        cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
    )
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, CrlvrPolicyLossConfig)
    assert cfg.trainer.v1.trainer_mode == "crlvr_sync"
    assert trainer_base.get_trainer_cls(cfg.trainer.v1.trainer_mode) is CrlvrTrainer
    options = check_settings(cfg)
    assert options.bicc is (name == "grpo_bicc_rcc")


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("conspo_rcc", {"actor_rollout_ref.actor.shuffle": True}, "shuffle=False"),
        ("conspo_rcc", {"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 12}, "multiple"),
        ("conspo_rcc", {"algorithm.adv_estimator": "crlvr_rcc"}, "do not pair"),
        ("grpo_bicc_rcc", {"actor_rollout_ref.actor.use_kl_loss": False}, "use_kl_loss=True"),
        ("grpo_bicc_rcc", {"algorithm.use_kl_in_reward": True}, "use_kl_in_reward"),
        (
            "grpo_bicc_rcc",
            {"algorithm.rollout_correction.rollout_is": "token"},
            "rollout_correction",
        ),
        (
            "conspo_rcc",
            {"actor_rollout_ref.actor.policy_loss._target_": VERL_POLICY_LOSS_CONFIG},
            "CrlvrPolicyLossConfig",
        ),
    ],
)
def test_check_settings_names_the_bad_setting(recipes, name, overrides, message):
    cfg = recipes[name]
    if VERL_POLICY_LOSS_CONFIG in overrides.values():
        # verl's own class has none of our fields: keep only its own
        cfg = with_overrides(cfg)
        pl = cfg.actor_rollout_ref.actor.policy_loss
        for key in ("conspo_tau", "conspo_max_margin", "conspo_warmup", "rcc_coef"):
            pl.pop(key)
    with pytest.raises(ValueError, match=message):
        check_settings(with_overrides(cfg, **overrides))


# ----------------------------------------------------------------------------- fakes


class FakeTokenizer:
    eos_token_id = EOS
    pad_token_id = PAD
    IDS = {
        BiCCTemplate.header_correct: [901],
        BiCCTemplate.header_wrong: [902],
        "Attempt 1: ": [911],
        "Attempt 2: ": [912],
        "Attempt 3: ": [913],
        "\n": [920],
        "Your attempt:\n": [930],
    }

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": self.IDS[text]}


def make_trainer(cfg, monkeypatch, rows, **crlvr):
    # This module tests the paper's form's driver (the distill form's:
    # tests/scale_out/test_verl_distill.py): the form unless a test names one.
    if crlvr.get("bicc") and "bicc_form" not in crlvr:
        crlvr["bicc_form"] = "conditioned"
    trainer = object.__new__(CrlvrTrainer)
    trainer.config = cfg
    trainer.crlvr = CrlvrPolicyLossConfig(**crlvr)
    trainer.tokenizer = FakeTokenizer()
    trainer.global_steps = 1
    trainer.total_training_steps = 10
    trainer.use_critic = False
    store = FakeTQ(rows)
    monkeypatch.setattr(transfer, "tq", store)
    trainer.actor_rollout_wg = FakeProbeWorkers(store)  # step 1 is probed (bicc on)
    return trainer, store


def row(prompt, response, reward):
    prompt, response = torch.tensor(prompt), torch.tensor(response)
    ids = torch.cat([prompt, response])
    scores = torch.zeros(len(response))
    scores[-1] = reward
    return {
        "prompts": prompt,
        "responses": response,
        "input_ids": ids,
        "position_ids": torch.arange(len(ids)),
        "rm_scores": scores,
        "response_mask": torch.ones(len(response), dtype=torch.int64),
        "old_log_probs": torch.full((len(response),), -0.5),
        "entropy": torch.full((len(response),), 0.25),
        "ref_log_prob": torch.full((len(response),), -0.75),
    }


def bicc_batch():
    # Interleaved as after verl's balancing: group a = keys a_0_0, a_1_0; group b likewise.
    rows = {
        "a_0_0": row([1, 2], [10, 11, EOS], 1.0),
        "b_0_0": row([3], [20, EOS], 0.0),
        "a_1_0": row([1, 2], [12, EOS], 0.0),
        "b_1_0": row([3], [21, 22, EOS], 0.0),
    }
    tags = [
        {"prompt_len": len(r["prompts"]), "seq_len": len(r["input_ids"]), "status": "success"}
        for r in rows.values()
    ]
    return rows, KVBatchMeta(keys=list(rows), tags=tags, partition_id="train")


# ----------------------------------------------------------------------------- BiCC


@pytest.mark.parametrize("ratio", ["paper", "consistent"])
def test_update_actor_sees_conditioned_rows_then_plain_rows_come_back(recipes, monkeypatch, ratio):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "data.max_prompt_length": 20,
            "data.max_response_length": 20,
        },
    )
    rows, batch = bicc_batch()
    trainer, store = make_trainer(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_context_ratio=0.5,
        bicc_ratio_mode=ratio,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
    )
    seen = {}

    def fake_update(self, batch, metrics):
        seen["rows"] = {k: {f: v.tolist() for f, v in r.items()} for k, r in store.rows.items()}
        seen["tags"] = [dict(t) for t in batch.tags]
        return batch

    def fake_old_log_prob(batch, metrics):
        # as verl's recomputation does: new old_log_probs for the conditioned rows
        seen["old_logp_prompt"] = store.rows["a_0_0"]["prompts"].tolist()
        for key in batch.keys:
            store.rows[key]["old_log_probs"] = store.rows[key]["old_log_probs"] - 1.0
        return batch

    def fake_ref_log_prob(batch, metrics):
        seen["ref_logp_prompt"] = store.rows["a_0_0"]["prompts"].tolist()
        for key in batch.keys:
            store.rows[key]["ref_log_prob"] = store.rows[key]["ref_log_prob"] - 1.0
        return batch

    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", fake_update)
    trainer._compute_old_log_prob = fake_old_log_prob
    trainer._compute_ref_log_prob = fake_ref_log_prob
    metrics = {}
    trainer._update_actor(batch, metrics)

    # Budget floor(0.5 * 40) = 20 tokens, enough for whole contexts. a_0_0 (correct) reads the
    # wrong a_1_0 without EOS; a_1_0 reads the correct a_0_0; group b (all wrong) stays plain.
    a0 = [1, 2, 902, 911, 12, 920, 930]
    a1 = [1, 2, 901, 911, 10, 11, 920, 930]
    during = seen["rows"]
    assert during["a_0_0"]["prompts"] == a0
    assert during["a_0_0"]["input_ids"] == a0 + [10, 11, EOS]
    assert during["a_0_0"]["position_ids"] == list(range(10))
    assert during["a_1_0"]["input_ids"] == a1 + [12, EOS]
    assert during["b_0_0"]["input_ids"] == [3, 20, EOS]
    assert [(t["prompt_len"], t["seq_len"]) for t in seen["tags"]] == [
        (7, 10),
        (1, 3),
        (8, 10),
        (1, 4),
    ]
    # consistent mode recomputes the old log-probs on the conditioned rows; paper mode does not
    assert seen.get("old_logp_prompt") == (a0 if ratio == "consistent" else None)
    # with the KL loss on (kl_loss_coef 0.01) and bicc_kl_reference 'conditioned' (the
    # default), the reference is taken on the conditioned prompt in both modes, as TRL's
    # with beta > 0
    assert seen.get("ref_logp_prompt") == a0
    # after the update: the plain rows and tags again
    assert store.rows["a_0_0"]["prompts"].tolist() == [1, 2]
    assert store.rows["a_0_0"]["input_ids"].tolist() == [1, 2, 10, 11, EOS]
    assert store.rows["a_1_0"]["position_ids"].tolist() == [0, 1, 2, 3]
    assert store.rows["a_1_0"]["old_log_probs"].tolist() == [-0.5, -0.5]
    assert store.rows["a_1_0"]["ref_log_prob"].tolist() == [-0.75, -0.75]
    assert [(t["prompt_len"], t["seq_len"]) for t in batch.tags] == [(2, 5), (1, 3), (2, 4), (1, 4)]
    # context tokens (5, 0, 6, 0) -> mean 2.75; half of the rows conditioned
    assert metrics["bicc/context_tokens"] == pytest.approx(2.75)
    assert metrics["bicc/conditioned_frac"] == pytest.approx(0.5)
    # the rows' real tokens, prompt and response: plain 5 + 3 + 4 + 4, conditioned
    # 10 + 3 + 10 + 4 (a_0_0 and a_1_0 read 5 and 6 context tokens)
    assert metrics["tokens/loss_rows_plain"] == 16.0
    assert metrics["tokens/loss_rows_conditioned"] == 27.0
    # step 1 is probed: plain GRPO's gradient on the plain rows, then the applied loss's on
    # the rows the update trains on (the conditioned ones, after any recomputation)
    calls = trainer.actor_rollout_wg.calls
    assert [c["phase"] for c in calls] == ["plain", "applied"]
    assert calls[0]["prompts"][0] == [1, 2] and calls[1]["prompts"][0] == a0
    assert metrics["bicc/transfer_cos"] == 0.5


def test_conspo_reads_no_old_log_probs_so_its_default_consistent_mode_adds_no_pass(
    recipes, monkeypatch
):
    # ConSPO's unset ratio mode is the table's 'consistent' (as on TRL); its loss has no
    # ratio, so the update does not recompute old log-probs on the conditioned rows, while
    # a clipped recipe in the consistent mode does.
    cfg = with_overrides(
        recipes["conspo_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "data.max_prompt_length": 20,
            "data.max_response_length": 20,
        },
    )
    rows, batch = bicc_batch()
    trainer, store = make_trainer(
        cfg,
        monkeypatch,
        rows,
        loss_mode="crlvr_conspo",
        bicc=True,
        bicc_context_ratio=0.5,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
    )
    assert trainer.crlvr.bicc_ratio_mode == "consistent"
    assert not settings.recomputes_old_log_probs(cfg, trainer.crlvr)
    calls = []
    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", lambda self, b, m: b)
    trainer._compute_old_log_prob = lambda b, metrics: calls.append("old") or b
    trainer._compute_ref_log_prob = lambda b, metrics: calls.append("ref") or b
    trainer._update_actor(batch, {})
    assert "old" not in calls
    grpo = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo", bicc=True, bicc_ratio_mode="consistent")
    assert settings.recomputes_old_log_probs(recipes["grpo_bicc_rcc"], grpo)


# ----------------------------------------------------------------------------- RCC


def test_compute_advantage_feeds_rcc_the_reference_log_probs(recipes, monkeypatch):
    cfg = with_overrides(recipes["grpo_bicc_rcc"], **{"actor_rollout_ref.rollout.n": 2})
    rows = {
        "g_0_0": row([1], [5, 6], 1.0),
        "h_0_0": row([2], [7, 8, 9], 0.0),
        "g_1_0": row([1], [5, 7], 0.0),
        "h_1_0": row([2], [7, EOS], 0.0),
    }
    # g: delta = mean_t(old - ref) = (0.2, -0.2); h: any delta, rewards all equal.
    for key, old, shift in [("g_0_0", -1.0, 0.2), ("g_1_0", -2.0, -0.2)]:
        rows[key]["old_log_probs"] = torch.full((2,), old)
        rows[key]["ref_log_prob"] = torch.full((2,), old - shift)
    rows["h_0_0"]["old_log_probs"] = torch.full((3,), -0.5)
    rows["h_0_0"]["ref_log_prob"] = torch.full((3,), -0.1)
    rows["h_1_0"]["old_log_probs"] = torch.full((2,), -0.3)
    rows["h_1_0"]["ref_log_prob"] = torch.full((2,), -0.9)
    trainer, store = make_trainer(cfg, monkeypatch, rows)
    batch = KVBatchMeta(keys=list(rows), tags=[{} for _ in rows], partition_id="train")
    metrics = {}
    trainer._compute_advantage(batch, metrics)
    # Cov = ((0.5)(0.2) + (-0.5)(-0.2)) / 2 = 0.1, b* = 0.5 + 2 * 0.1 = 0.7,
    # A = (R - 0.7) / (std 0.70711 + 1e-4, TRL's eps); group h has equal rewards: 0.
    s = math.sqrt(0.5) + 1e-4
    assert store.rows["g_0_0"]["advantages"].tolist() == pytest.approx([0.3 / s] * 2, abs=1e-5)
    assert store.rows["g_1_0"]["advantages"].tolist() == pytest.approx([-0.7 / s] * 2, abs=1e-5)
    assert store.rows["h_0_0"]["advantages"].tolist() == [0.0, 0.0, 0.0]
    assert store.rows["h_1_0"]["returns"].tolist() == [0.0, 0.0]
    assert metrics["crlvr/collapse_rate"] == pytest.approx(0.5)


# ----------------------------------------------------------------------------- ConSPO


def test_compute_advantage_gives_conspo_targets_with_the_scheduled_margin(recipes, monkeypatch):
    cfg = with_overrides(recipes["conspo_rcc"], **{"actor_rollout_ref.rollout.n": 2})
    rows = {"g_0_0": row([1], [5, 6], 1.0), "g_1_0": row([1], [7], 0.0)}
    for r in rows.values():
        r["ref_log_prob"] = r["old_log_probs"].clone()  # delta 0: the RCC baseline is the mean
    trainer, store = make_trainer(cfg, monkeypatch, rows, conspo_max_margin=0.01, conspo_warmup=0.3)
    trainer.global_steps = 4  # progress (4 - 1) / 10 = 0.3 = warmup: m = (0.01 / 2)(1 - cos pi)
    batch = KVBatchMeta(keys=list(rows), tags=[{} for _ in rows], partition_id="train")
    trainer._compute_advantage(batch, {})
    assert store.rows["g_0_0"]["advantages"].tolist() == pytest.approx([1.01, 1.01])
    assert store.rows["g_1_0"]["advantages"].tolist() == [-1.0]


def conspo_trainer(recipes, monkeypatch, keys, dp=2):
    cfg = with_overrides(
        recipes["conspo_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 2,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        },
    )
    trainer, _ = make_trainer(cfg, monkeypatch, {})
    trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": list(range(dp))})
    tags = [{"seq_len": 10 + 7 * i} for i in range(len(keys))]
    return trainer, KVBatchMeta(keys=keys, tags=tags, partition_id="train")


def test_conspo_balance_keeps_whole_groups_on_each_rank(recipes, monkeypatch):
    keys = [f"{u}_{s}_0" for s in range(2) for u in "abcd"]  # a_0_0, b_0_0, ..., d_1_0
    trainer, batch = conspo_trainer(recipes, monkeypatch, keys)
    metrics = {}
    trainer._balance_batch(batch, metrics)
    assert sorted(batch.keys) == sorted(keys)
    for share in (batch.keys[:4], batch.keys[4:]):  # what each of the 2 ranks receives
        uids = [k.split("_")[0] for k in share]
        assert uids[0] == uids[1] and uids[2] == uids[3] and uids[0] != uids[2]
    # the tags moved with their keys
    assert {k: t["seq_len"] for k, t in zip(batch.keys, batch.tags, strict=True)} == {
        k: 10 + 7 * i for i, k in enumerate(keys)
    }


def test_conspo_balance_refuses_a_batch_verl_would_pad(recipes, monkeypatch):
    keys = [f"{u}_{s}_0" for s in range(2) for u in "abc"]  # 6 rows, not a multiple of 4
    trainer, batch = conspo_trainer(recipes, monkeypatch, keys)
    with pytest.raises(ValueError, match="pad"):
        trainer._balance_batch(batch, {})


def test_trainer_mode_reads_sync_for_verls_checks():
    trainer = object.__new__(CrlvrTrainer)
    trainer.trainer_mode = "crlvr_sync"  # what PPOTrainer.__init__ assigns
    assert trainer.trainer_mode == "sync"
    with pytest.raises(ValueError, match="crlvr_sync"):
        trainer.trainer_mode = "separate_async"


# ----------------------------------------------------------------------------- refusals at start

# grpo_bicc_rcc: max_prompt_length 1024, max_response_length 4096, ratio 0.4, no
# bicc_max_seq_len: the longest conditioned row is 1024 + floor(0.4 * 5120) + 4096 = 7168.
LONGEST_ROW = 1024 + 2048 + 4096
DYNAMIC = {"actor_rollout_ref.actor.use_dynamic_bsz": True}


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        ("grpo_bicc_rcc", {"actor_rollout_ref.actor.use_prefix_grouper": True}, "prefix_grouper"),
        ("conspo_rcc", {"actor_rollout_ref.actor.use_prefix_grouper": True}, "prefix_grouper"),
        (
            "grpo_bicc_rcc",
            {"algorithm.rollout_correction.bypass_mode": True},
            "bypass_mode=True makes them vLLM",
        ),
        (
            "grpo_bicc_rcc",
            {
                "algorithm.adv_estimator": "crlvr_grpo",
                "algorithm.rollout_correction.rollout_is": "token",
            },
            "loss_mode='crlvr_grpo' does not apply rollout-correction",
        ),
        (
            "grpo_bicc_rcc",
            {**DYNAMIC, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW - 1},
            f"ppo_max_token_len_per_gpu gives {LONGEST_ROW - 1} tokens .* can reach {LONGEST_ROW}",
        ),
        (
            # sequence parallelism multiplies the limit: 3584 x 2 = 7167 + 1 < 7168 still refused
            "grpo_bicc_rcc",
            {
                **DYNAMIC,
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW // 2 - 1,
                "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": 2,
            },
            "ppo_max_token_len_per_gpu gives 7166",
        ),
        (
            # consistent mode: the old log-prob pass sees conditioned rows too
            "grpo_bicc_rcc",
            {
                **DYNAMIC,
                "actor_rollout_ref.actor.policy_loss.bicc_ratio_mode": "consistent",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW,
                "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": LONGEST_ROW - 1,
            },
            "rollout.log_prob_max_token_len_per_gpu",
        ),
        (
            # ... and the reference pass, with the KL loss on (kl_loss_coef 0.01)
            "grpo_bicc_rcc",
            {
                **DYNAMIC,
                "actor_rollout_ref.actor.policy_loss.bicc_ratio_mode": "consistent",
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW,
                "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": LONGEST_ROW,
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": LONGEST_ROW - 1,
            },
            "ref.log_prob_max_token_len_per_gpu",
        ),
        ("grpo_bicc_rcc", {"actor_rollout_ref.actor.policy_loss.bicc_mix": 0.5}, "bicc_mix=0.5"),
        (
            "grpo_bicc_rcc",
            {"actor_rollout_ref.actor.policy_loss.rcc_bound": "group"},
            "rcc_bound='group' is invalid: choose one of none, reward_range",
        ),
        (
            "grpo_bicc_rcc",
            {"actor_rollout_ref.actor.policy_loss.bicc_placement": "system"},
            "bicc_placement='system' is invalid: choose one of auto",
        ),
    ],
)
def test_check_settings_refuses_what_verl_cannot_run(recipes, name, overrides, message):
    with pytest.raises(Exception, match=message) as caught:
        check_settings(with_overrides(recipes[name], **overrides))
    # Hydra may wrap the config's ValueError (as the cause); the message names the field
    # either way.
    assert isinstance(caught.value, ValueError) or isinstance(caught.value.__cause__, ValueError)


@pytest.mark.parametrize(
    "overrides",
    [
        {**DYNAMIC, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW},
        # bicc_max_seq_len 1000: 1024 + floor(0.4 * 1000) + 4096 = 5520 tokens suffice
        {
            **DYNAMIC,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 5520,
            "actor_rollout_ref.actor.policy_loss.bicc_max_seq_len": 1000,
        },
        # paper mode: the old / reference passes see plain rows, their limits do not matter
        {
            **DYNAMIC,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": 5120,
        },
        # fixed-size micro-batches have no token limit
        {"actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 10},
        # verl's own estimators and losses with IS weights are verl's business
        {
            "algorithm.adv_estimator": "grpo",
            "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
            "algorithm.rollout_correction.rollout_is": "token",
        },
    ],
)
def test_check_settings_accepts_the_limits_that_hold_a_conditioned_row(recipes, overrides):
    check_settings(with_overrides(recipes["grpo_bicc_rcc"], **overrides))


def test_settings_reach_the_row_builder_and_the_estimators(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.policy_loss.bicc_max_seq_len": 100,
            "actor_rollout_ref.actor.policy_loss.bicc_footer": "\n",
            "actor_rollout_ref.actor.policy_loss.rcc_bound": "none",
        },
    )
    options = check_settings(cfg)
    trainer, _ = make_trainer(cfg, monkeypatch, {}, **vars(options))
    trainer.end_token_ids = [EOS, 98]
    builder = trainer._bicc_builder()
    assert builder.max_seq_len == 100 and builder.placement == "auto"
    assert builder.max_completion_length == 4096  # data.max_response_length
    assert builder.template.footer == [920]  # bicc_footer "\n"
    assert builder.strip_token_ids == {EOS, 98, PAD}  # the EOS list and the pad id
    from contrastive_rlvr.integrations.verl.advantages import ESTIMATORS

    padded = {"old_log_probs": 0, "ref_log_prob": 0}
    kwargs = trainer._estimator_kwargs(ESTIMATORS["crlvr_rcc"], padded)
    assert kwargs["rcc_bound"] == "none"


# ----------------------------------------------------------------------------- balance


def test_bicc_balance_uses_conditioned_lengths_then_restores_plain_ones(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "actor_rollout_ref.actor.ppo_mini_batch_size": 1,
            "data.max_prompt_length": 20,
            "data.max_response_length": 20,
        },
    )
    rows, batch = bicc_batch()
    trainer, _ = make_trainer(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_context_ratio=0.5,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
    )
    trainer.actor_rollout_wg = SimpleNamespace(_dispatch_info={"actor": [0, 1]})
    trainer.use_critic = False
    metrics = {}
    out = trainer._balance_batch(batch, metrics)
    # Conditioned lengths (see the update test): a_0_0 10, b_0_0 3, a_1_0 10, b_1_0 4;
    # plain 5, 3, 4, 4. Two ranks of two rows: the long a rows go to different ranks,
    # {10, 4} and {10, 3}: max 14, min 13 (plain lengths would give at most 9).
    assert metrics["global_seqlen/max"] == 14 and metrics["global_seqlen/min"] == 13
    for share in (out.keys[:2], out.keys[2:]):
        assert sorted(k[0] for k in share) == ["a", "b"]
    assert {k: t["seq_len"] for k, t in zip(out.keys, out.tags, strict=True)} == {
        "a_0_0": 5,
        "b_0_0": 3,
        "a_1_0": 4,
        "b_1_0": 4,
    }


def test_init_tokenizer_keeps_the_eos_list_and_the_window(monkeypatch):
    tok = FakeTokenizer()
    model = SimpleNamespace(
        tokenizer=tok,
        processor=None,
        generation_config=SimpleNamespace(eos_token_id=[7, 8]),
        hf_config=SimpleNamespace(max_position_embeddings=4096),
    )
    monkeypatch.setattr(bicc_hooks, "omega_conf_to_dataclass", lambda cfg: model)
    trainer = object.__new__(CrlvrTrainer)
    trainer.config = SimpleNamespace(actor_rollout_ref=SimpleNamespace(model=None))
    trainer._init_tokenizer()
    assert trainer.tokenizer is tok and trainer.processor is None
    assert trainer.end_token_ids == [EOS, 7, 8]  # the tokenizer's EOS first, as TRL
    assert trainer.max_positions == 4096


def test_a_built_row_over_the_token_limit_names_the_setting(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{**DYNAMIC, "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": LONGEST_ROW},
    )
    trainer, _ = make_trainer(cfg, monkeypatch, {}, bicc=True)
    rows = SimpleNamespace(prompts=[torch.zeros(LONGEST_ROW - 10)], context_tokens=None)
    trainer._check_row_lengths(rows, [torch.zeros(10)])  # exactly at the limit: fine
    with pytest.raises(ValueError, match="ppo_max_token_len_per_gpu=7168"):
        trainer._check_row_lengths(rows, [torch.zeros(11)])


def test_padding_rows_keep_their_prompt_and_do_not_set_the_budget(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{"actor_rollout_ref.rollout.n": 2, "data.max_response_length": 20},
    )
    rows, batch = bicc_batch()
    rows["a_1_0"] = row([1, 2], [12] * 15 + [EOS], 0.0)
    # verl's upsampling: two synthetic rows under one uid, with a long prompt
    for k in range(2):
        rows[f"padx_{k}_0"] = row(list(range(30, 60)), [EOS], 0.0)
    tags = [dict(t) for t in batch.tags] + [{"is_padding": True}, {"is_padding": True}]
    batch = KVBatchMeta(keys=list(rows), tags=tags, partition_id="train")
    trainer, _ = make_trainer(
        cfg, monkeypatch, rows, bicc=True, bicc_context_ratio=0.5, bicc_placement="after_prompt"
    )
    got = trainer._bicc_rows(batch)
    # L = longest real prompt 2 + max_response_length 20 = 22, budget floor(0.5 * 22) = 11
    # (the 30-token padding prompts would make it 25, and a_1_0's 15 tokens would fit
    # whole): bicc_framing_budget 'outside' (the default) spends the 11 on the attempt, so
    # a_0_0 reads a_1_0's 15 tokens cut to 11, the 4 framing tokens on top.
    assert got.budget == 11
    by_key = dict(zip(batch.keys, got.prompts, strict=True))
    assert by_key["a_0_0"].tolist() == [1, 2, 902, 911, *[12] * 11, 920, 930]
    assert by_key["padx_0_0"].tolist() == list(range(30, 60))
    assert by_key["padx_1_0"].tolist() == list(range(30, 60))


def test_framing_inside_pays_the_framing_from_the_budget(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{"actor_rollout_ref.rollout.n": 2, "data.max_response_length": 20},
    )
    rows, batch = bicc_batch()
    rows["a_1_0"] = row([1, 2], [12] * 15 + [EOS], 0.0)
    kwargs = dict(bicc=True, bicc_context_ratio=0.5, bicc_placement="after_prompt")
    trainer, _ = make_trainer(cfg, monkeypatch, rows, bicc_framing_budget="inside", **kwargs)
    # budget floor(0.5 * (2 + 20)) = 11 for header, prefix, suffix, footer (4) and the attempt:
    # a_1_0's 15 tokens cut to 11 - 4 = 7 (the TRL path's earlier rule)
    got = dict(zip(batch.keys, trainer._bicc_rows(batch).prompts, strict=True))
    assert got["a_0_0"].tolist() == [1, 2, 902, 911, *[12] * 7, 920, 930]
    # the default ('outside') keeps 11 tokens of the attempt and adds the framing on top
    trainer, _ = make_trainer(cfg, monkeypatch, rows, **kwargs)
    got = dict(zip(batch.keys, trainer._bicc_rows(batch).prompts, strict=True))
    assert got["a_0_0"].tolist() == [1, 2, 902, 911, *[12] * 11, 920, 930]


def test_window_caps_the_whole_context_with_the_framing_outside(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{"actor_rollout_ref.rollout.n": 2, "data.max_response_length": 20},
    )
    rows, batch = bicc_batch()
    rows["a_1_0"] = row([1, 2], [12] * 15 + [EOS], 0.0)
    trainer, _ = make_trainer(
        cfg, monkeypatch, rows, bicc=True, bicc_context_ratio=0.5, bicc_placement="after_prompt"
    )
    # window 32: room 32 - 2 - 20 = 10 for everything added, the 4 framing tokens included:
    # 6 tokens of the attempt (the budget of 11 alone would allow 11)
    trainer.max_positions = 32
    got = dict(zip(batch.keys, trainer._bicc_rows(batch).prompts, strict=True))
    assert got["a_0_0"].tolist() == [1, 2, 902, 911, *[12] * 6, 920, 930]


@pytest.mark.parametrize("pairing", ["partition", "one_opposite"])
def test_pairing_chooses_the_opposite_attempts_a_row_reads(recipes, monkeypatch, pairing):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{"actor_rollout_ref.rollout.n": 3, "data.max_response_length": 20},
    )
    rows = {
        "a_0_0": row([1, 2], [10, EOS], 1.0),
        "a_1_0": row([1, 2], [12, EOS], 0.0),
        "a_2_0": row([1, 2], [13, EOS], 0.0),
    }
    batch = KVBatchMeta(keys=list(rows), tags=[{} for _ in rows], partition_id="train")
    trainer, _ = make_trainer(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
        bicc_pairing=pairing,
    )
    got = [p.tolist() for p in trainer._bicc_rows(batch).prompts]
    # the correct a_0 reads both wrong attempts, or (one_opposite) the first of them only;
    # each wrong row reads the one correct attempt either way
    if pairing == "partition":
        assert got[0] == [1, 2, 902, 911, 12, 920, 912, 13, 920, 930]
    else:
        assert got[0] == [1, 2, 902, 911, 12, 920, 930]
    assert got[1] == got[2] == [1, 2, 901, 911, 10, 920, 930]


def test_plain_kl_reference_keeps_the_plain_reference(recipes, monkeypatch):
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{"actor_rollout_ref.rollout.n": 2, "data.max_prompt_length": 20},
    )
    rows, batch = bicc_batch()
    trainer, _ = make_trainer(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
        bicc_kl_reference="plain",
    )
    called = []
    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", lambda self, b, m: b)
    trainer._compute_ref_log_prob = lambda b, metrics: called.append("ref")
    trainer._compute_old_log_prob = lambda b, metrics: called.append("old")
    trainer._update_actor(batch, {})
    assert called == []  # paper mode, plain reference: neither pass is recomputed
    assert not settings.conditioned_reference(cfg, trainer.crlvr)


@pytest.mark.parametrize(
    "field, value, match",
    [
        ("bicc_ratio_mode", "conditioned_old", "not supported on verl"),
        ("bicc_framing_budget", "both", "bicc_framing_budget='both' is invalid: choose one of"),
        ("bicc_pairing", "all", "bicc_pairing='all' is invalid: choose one of"),
        ("bicc_kl_reference", "none", "bicc_kl_reference='none' is invalid: choose one of"),
    ],
)
def test_bicc_fields_refused_at_start(field, value, match):
    with pytest.raises(ValueError, match=match):
        CrlvrPolicyLossConfig(**{field: value})


def test_defaults_are_the_trl_paths():
    # TRL's GRPOTrainer adds 1e-4 to the std; the BiCC defaults are RLVRConfig's
    opts = CrlvrPolicyLossConfig()
    assert opts.adv_eps == 1e-4
    assert (opts.bicc_framing_budget, opts.bicc_pairing, opts.bicc_kl_reference) == (
        "outside",
        "partition",
        "conditioned",
    )
