"""Every ``crlvr_sync`` hook hands on the meta of its own TransferQueue write.

verl's workers read a batch through its meta and fetch only the fields it lists
(``kv_batch_meta2batch_meta`` selects ``meta.fields``). A hook that writes a field
and hands on the meta it was given, whose list predates the write, stops a real run
at the first actor update with ``KeyError: 'key "advantages" not found in
TensorDict'``. The in-memory store (:mod:`verl_fakes`) serves the workers' reads the
same way, so these tests fail on that mistake. Needs verl (the Makefile's .venv-verl).
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("verl")

import torch
from tensordict import TensorDict
from verl.trainer.ppo.v1 import trainer_base
from verl_fakes import FakeProbeWorkers, FakeTQ
from verl_runs import compose_recipe, with_overrides

from contrastive_rlvr.integrations.verl import transfer
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.trainer import CrlvrTrainer

torch.set_num_threads(1)

EOS, PAD = 99, 0
# what verl's actor update reads of every row (verl/workers/utils/losses.py, ppo_loss)
UPDATE_FIELDS = ["input_ids", "prompts", "responses", "response_mask", "old_log_probs"]


@pytest.fixture(scope="module")
def recipes():
    return {name: compose_recipe(name) for name in ("grpo_bicc_rcc", "conspo_rcc")}


class Tokenizer:
    eos_token_id = EOS
    pad_token_id = PAD

    def __call__(self, text, add_special_tokens=False):
        # one id per framing text, enough for the row builder's template
        return {"input_ids": [900 + len(text) % 50]}


def row(prompt, response, reward, old=-0.5, ref=-0.5):
    prompt, response = torch.tensor(prompt), torch.tensor(response)
    ids = torch.cat([prompt, response])
    scores = torch.zeros(len(response))
    scores[-1] = reward
    n = len(response)
    return {
        "prompts": prompt,
        "responses": response,
        "input_ids": ids,
        "position_ids": torch.arange(len(ids)),
        "rm_scores": scores,
        "response_mask": torch.ones(n, dtype=torch.int64),
        "old_log_probs": torch.full((n,), old),
        "entropy": torch.full((n,), 0.25),
        "ref_log_prob": torch.full((n,), ref),
    }


def trainer_on(cfg, monkeypatch, rows, **crlvr):
    trainer = object.__new__(CrlvrTrainer)
    trainer.config = cfg
    trainer.crlvr = CrlvrPolicyLossConfig(**crlvr)
    trainer.tokenizer = Tokenizer()
    trainer.global_steps = 1
    trainer.total_training_steps = 10
    trainer.use_critic = False
    store = FakeTQ(rows)
    monkeypatch.setattr(transfer, "tq", store)
    trainer.actor_rollout_wg = FakeProbeWorkers(store)  # step 1 is probed (bicc on)
    return trainer, store


def group_rows():
    # one group with rewards (1, 0) and no policy shift (old == ref): RCC's baseline is the
    # group mean 0.5; a second group all wrong (no signal)
    return {
        "g_0_0": row([1, 2], [10, 11, EOS], 1.0),
        "h_0_0": row([3], [20, EOS], 0.0),
        "g_1_0": row([1, 2], [12, EOS], 0.0),
        "h_1_0": row([3], [21, 22, EOS], 0.0),
    }


def before_advantages(store, keys):
    """The meta verl's reference pass hands on: every field so far, no advantages yet."""
    for k in keys:
        store.rows[k].pop("advantages", None)
    meta = store.meta(keys, tags=[{"seq_len": len(store.rows[k]["input_ids"])} for k in keys])
    assert "advantages" not in meta.fields
    return meta


# ----------------------------------------------------------------------------- the fake itself


def test_the_fake_serves_workers_only_listed_fields_and_lists_what_a_put_wrote():
    store = FakeTQ({"a_0_0": row([1], [5, EOS], 1.0)})
    old = store.meta(["a_0_0"])
    out = store.kv_batch_put(
        keys=["a_0_0"],
        partition_id="train",
        fields=TensorDict(
            {"advantages": torch.nested.as_nested_tensor([torch.ones(2)], layout=torch.jagged)},
            batch_size=1,
        ),
    )
    assert "advantages" in out.fields and "advantages" not in old.fields
    assert store.worker_get(out, ["advantages"])["advantages"][0].tolist() == [1.0, 1.0]
    with pytest.raises(KeyError, match='key "advantages" not found in TensorDict'):
        store.worker_get(old, ["advantages"])
    # the driver reads by keys, whatever the meta says
    assert store.kv_batch_get(["a_0_0"], "train", ["advantages"])["advantages"][0].tolist() == [
        1.0,
        1.0,
    ]


# ----------------------------------------------------------------------------- advantages

S = math.sqrt(0.5) + 1e-4  # the unbiased std of (1, 0) plus TRL's eps 1e-4


@pytest.mark.parametrize(
    ("estimator", "recipe", "loss_mode", "expected_g"),
    [
        # RCC with delta = 0 everywhere: b* = mean = 0.5, A = (R - 0.5) / (std + eps)
        ("crlvr_rcc", "grpo_bicc_rcc", "crlvr_grpo", [0.5 / S, -0.5 / S]),
        # Dr.GRPO + RCC: no std scaling
        ("crlvr_dr_grpo_rcc", "grpo_bicc_rcc", "crlvr_dr_grpo", [0.5, -0.5]),
        # ConSPO targets at progress 0 (margin 0): +1 for the positive; -c for the negative,
        # c = groups per usable group = 2 / 1
        ("crlvr_conspo", "conspo_rcc", "crlvr_conspo", [1.0, -2.0]),
        ("crlvr_conspo_rcc", "conspo_rcc", "crlvr_conspo", [1.0, -2.0]),
    ],
)
def test_compute_advantage_hands_the_workers_a_meta_that_lists_the_advantages(
    recipes, monkeypatch, estimator, recipe, loss_mode, expected_g
):
    cfg = with_overrides(
        recipes[recipe],
        **{"actor_rollout_ref.rollout.n": 2, "algorithm.adv_estimator": estimator},
    )
    rows = group_rows()
    trainer, store = trainer_on(cfg, monkeypatch, rows, loss_mode=loss_mode, conspo_warmup=0.3)
    trainer.global_steps = 1  # progress 0: ConSPO's margin is 0
    batch = before_advantages(store, list(rows))
    batch.extra_info["temperature"] = 0.7
    out = trainer._compute_advantage(batch, {})
    # what verl's actor worker reads next, through the meta it is handed
    seen = store.worker_get(out, [*UPDATE_FIELDS, "advantages", "returns", "ref_log_prob"])
    by_key = dict(zip(out.keys, seen["advantages"].unbind(), strict=True))
    assert [by_key["g_0_0"][0].item(), by_key["g_1_0"][0].item()] == pytest.approx(
        expected_g, abs=1e-5
    )
    assert by_key["g_0_0"].tolist() == pytest.approx([expected_g[0]] * 3, abs=1e-5)
    # the tags the hook was given and the driver's extra_info travel on
    assert [t["seq_len"] for t in out.tags] == [5, 3, 4, 4]
    assert out.extra_info["temperature"] == 0.7


def test_verls_own_estimators_keep_verls_path(recipes, monkeypatch):
    cfg = with_overrides(recipes["grpo_bicc_rcc"], **{"algorithm.adv_estimator": "grpo"})
    trainer, store = trainer_on(cfg, monkeypatch, group_rows())
    sentinel = object()
    monkeypatch.setattr(trainer_base.PPOTrainer, "_compute_advantage", lambda s, b, m: sentinel)
    assert trainer._compute_advantage(store.meta(list(store.rows)), {}) is sentinel


# ----------------------------------------------------------------------------- BiCC update


@pytest.mark.parametrize("ratio", ["paper", "consistent"])
def test_advantages_then_bicc_update_reach_the_worker_and_the_plain_rows_come_back(
    recipes, monkeypatch, ratio
):
    """The step's last two hooks in verl's order, each handed what the previous returned."""
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "data.max_prompt_length": 20,
            "data.max_response_length": 20,
        },
    )
    rows = group_rows()
    trainer, store = trainer_on(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_ratio_mode=ratio,
        bicc_context_ratio=0.5,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
    )
    seen = {}

    def worker_update(self, batch, metrics):
        # verl's update_actor: the worker fetches the listed fields of the meta it gets
        got = store.worker_get(batch, [*UPDATE_FIELDS, "advantages", "ref_log_prob"])
        seen["input_ids"] = dict(
            zip(batch.keys, [x.tolist() for x in got["input_ids"].unbind()], strict=True)
        )
        seen["advantages"] = got["advantages"]
        return batch

    def old_log_prob_pass(batch, metrics):
        # verl's _compute_old_log_prob writes old_log_probs and hands on its put's meta
        store.worker_get(batch, ["input_ids", "responses"])
        fields = TensorDict(
            {
                "old_log_probs": store.kv_batch_get(batch.keys, "train", ["old_log_probs"])[
                    "old_log_probs"
                ]
            },
            batch_size=len(batch),
        )
        return store.kv_batch_put(keys=batch.keys, partition_id="train", fields=fields)

    def ref_log_prob_pass(batch, metrics):
        store.worker_get(batch, ["input_ids", "responses"])
        return batch  # verl's hands on the meta it was given

    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", worker_update)
    trainer._compute_old_log_prob = old_log_prob_pass
    trainer._compute_ref_log_prob = ref_log_prob_pass

    batch = before_advantages(store, list(rows))
    batch = trainer._compute_advantage(batch, {})
    out = trainer._update_actor(batch, {})

    assert seen["advantages"] is not None
    # g_0_0 (correct) reads the wrong g_1_0's attempt: its prompt grew; group h stays plain
    assert len(seen["input_ids"]["g_0_0"]) > 5
    assert seen["input_ids"]["g_0_0"][:2] == [1, 2] and 12 in seen["input_ids"]["g_0_0"][2:-3]
    assert seen["input_ids"]["h_0_0"] == [3, 20, EOS]
    # after the update the meta handed on lists every field and serves the plain rows
    after = store.worker_get(out, [*UPDATE_FIELDS, "advantages"])
    plain = dict(zip(out.keys, [x.tolist() for x in after["input_ids"].unbind()], strict=True))
    assert plain["g_0_0"] == [1, 2, 10, 11, EOS]
    assert [t["seq_len"] for t in out.tags] == [5, 3, 4, 4]


# ----------------------------------------------------------------------------- logged per step


def test_rcc_baseline_shift_and_conspo_margin_are_logged(recipes, monkeypatch):
    rows = group_rows()
    # g: delta = mean_t(old - ref) = (0.2, -0.2); h: rewards all 0
    for key, old, shift in [("g_0_0", -1.0, 0.2), ("g_1_0", -2.0, -0.2)]:
        n = len(rows[key]["responses"])
        rows[key]["old_log_probs"] = torch.full((n,), old)
        rows[key]["ref_log_prob"] = torch.full((n,), old - shift)
    cfg = with_overrides(recipes["grpo_bicc_rcc"], **{"actor_rollout_ref.rollout.n": 2})
    trainer, store = trainer_on(cfg, monkeypatch, rows)
    metrics = {}
    trainer._compute_advantage(before_advantages(store, list(rows)), metrics)
    # g: Cov = ((0.5)(0.2) + (-0.5)(-0.2)) / 2 = 0.1, b* = 0.5 + 2 * 0.1 = 0.7: shift +0.2 on
    # both rows; h: b* = 0 = its mean. Mean over the 4 rows 0.1, largest 0.2. h's rows have
    # delta 0 (old == ref), so the mean delta is (0.2 - 0.2 + 0 + 0) / 4 = 0
    assert metrics["crlvr/rcc/baseline_shift_mean"] == pytest.approx(0.1, abs=1e-6)
    assert metrics["crlvr/rcc/baseline_shift_max_abs"] == pytest.approx(0.2, abs=1e-6)
    assert metrics["crlvr/rcc/delta_mean"] == pytest.approx(0.0, abs=1e-6)

    cfg = with_overrides(recipes["conspo_rcc"], **{"actor_rollout_ref.rollout.n": 2})
    trainer, store = trainer_on(
        cfg, monkeypatch, group_rows(), loss_mode="crlvr_conspo", conspo_warmup=0.3
    )
    trainer.global_steps = 2  # progress (2 - 1) / 10 = 0.1
    metrics = {}
    trainer._compute_advantage(before_advantages(store, list(store.rows)), metrics)
    # m = (0.01 / 2)(1 - cos(pi * 0.1 / 0.3)) = 0.005 * (1 - 0.5)
    assert metrics["crlvr/conspo/margin"] == pytest.approx(0.0025, abs=1e-9)


@pytest.mark.parametrize(
    ("taught_rows", "teacher"),
    [("wrong", "sampling"), ("both", "sampling"), ("wrong", "reference")],
)
def test_the_distill_form_trains_the_plain_rows_with_the_teachers_log_probs(
    recipes, monkeypatch, taught_rows, teacher
):
    """bicc_form distill: the teacher pass (verl's old-log-prob pass) runs on the
    conditioned rows; the update and both probe phases get the plain rows, with the
    teacher's log-probs and the rows taught listed in the meta they receive."""
    cfg = with_overrides(
        recipes["grpo_bicc_rcc"],
        **{
            "actor_rollout_ref.rollout.n": 2,
            "data.max_prompt_length": 20,
            "data.max_response_length": 20,
        },
    )
    rows = group_rows()
    trainer, store = trainer_on(
        cfg,
        monkeypatch,
        rows,
        bicc=True,
        bicc_form="distill",
        bicc_distill_rows=taught_rows,
        bicc_teacher=teacher,
        bicc_context_ratio=0.5,
        bicc_max_seq_len=40,
        bicc_placement="after_prompt",
    )
    seen = {}

    def teacher_pass(batch, metrics):
        # verl's old-log-prob (or reference) pass on the rows it is handed: log-probs that
        # say which prompt it read (-1 per prompt token), written where verl writes them
        got = store.worker_get(batch, ["prompts", "responses"])
        seen["teacher_prompts"] = [p.tolist() for p in got["prompts"].unbind()]
        logps = transfer.nested(
            [
                torch.full((len(r),), -float(len(p)))
                for p, r in zip(got["prompts"].unbind(), got["responses"].unbind(), strict=True)
            ]
        )
        names = ["old_log_probs", "entropy"] if teacher == "sampling" else ["ref_log_prob"]
        fields = TensorDict({name: logps for name in names}, batch_size=len(batch))
        return store.kv_batch_put(keys=batch.keys, partition_id="train", fields=fields)

    def no_pass(batch, metrics):
        pytest.fail("only the teacher's pass runs")

    def worker_update(self, batch, metrics):
        names = ["bicc_teacher_log_probs", "bicc_taught", "ref_log_prob"]
        got = store.worker_get(batch, [*UPDATE_FIELDS, "advantages", *names])
        seen["update"] = {
            f: dict(zip(batch.keys, [x.tolist() for x in got[f].unbind()], strict=True))
            for f in ("input_ids", "old_log_probs", *names)
        }
        return batch

    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", worker_update)
    sampling = teacher == "sampling"
    trainer._compute_old_log_prob = teacher_pass if sampling else no_pass
    trainer._compute_ref_log_prob = no_pass if sampling else teacher_pass

    batch = before_advantages(store, list(rows))
    batch = trainer._compute_advantage(batch, {})
    metrics = {}
    trainer._update_actor(batch, metrics)

    # the teacher read the conditioned prompts: g's rows grew, h's (all wrong) stayed plain
    by_key = dict(zip(batch.keys, seen["teacher_prompts"], strict=True))
    assert len(by_key["g_0_0"]) > 2 and by_key["h_0_0"] == [3]
    update = seen["update"]
    # the update reads the plain rows and their own old and reference log-probs...
    assert update["input_ids"]["g_0_0"] == [1, 2, 10, 11, EOS]
    assert update["old_log_probs"]["g_0_0"] == [-0.5] * 3
    assert update["ref_log_prob"]["g_0_0"] == [-0.5] * 3
    # ...and the teacher's log-probs of the same tokens after the conditioned prompt
    assert update["bicc_teacher_log_probs"]["g_0_0"] == [-float(len(by_key["g_0_0"]))] * 3
    assert update["bicc_teacher_log_probs"]["h_1_0"] == [-1.0] * 3
    # taught: g_1_0 (wrong, conditioned); g_0_0 (correct) only with 'both'; h never
    taught = {k: v[0] for k, v in update["bicc_taught"].items()}
    assert taught == {
        "g_0_0": float(taught_rows == "both"),
        "g_1_0": 1.0,
        "h_0_0": 0.0,
        "h_1_0": 0.0,
    }
    assert metrics["bicc/taught_frac"] == (0.5 if taught_rows == "both" else 0.25)
    assert len(seen["teacher_prompts"]) == 4  # one teacher pass
    # step 1 is probed, both phases on the plain rows with the teacher fields listed
    calls = trainer.actor_rollout_wg.calls
    assert [c["phase"] for c in calls] == ["plain", "applied"]
    for call in calls:
        assert call["prompts"][batch.keys.index("g_0_0")] == [1, 2]
        assert "bicc_teacher_log_probs" in call
    assert metrics["bicc/transfer_cos"] == 0.5


def test_with_conspo_the_probes_plain_surrogate_gets_grpos_advantages(recipes, monkeypatch):
    """ConSPO's ``advantages`` carry its targets; the probe's plain phase is handed GRPO's
    group advantages of the rewards instead, listed in its meta."""
    cfg = with_overrides(recipes["conspo_rcc"], **{"actor_rollout_ref.rollout.n": 2})
    rows = group_rows()
    trainer, store = trainer_on(
        cfg, monkeypatch, rows, loss_mode="crlvr_conspo", bicc=True, bicc_placement="after_prompt"
    )
    batch = trainer._compute_advantage(before_advantages(store, list(rows)), {})
    trainer._probe_transfer(batch, "plain", {})
    (call,) = trainer.actor_rollout_wg.calls
    adv = dict(zip(batch.keys, call["bicc_probe_advantages"], strict=True))
    # group g: rewards (1, 0), mean 0.5, Bessel std sqrt(0.5): +-0.5 / (sqrt(0.5) + 1e-4);
    # group h: (0, 0) -> 0
    a = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert adv["g_0_0"] == pytest.approx([a] * 3) and adv["g_1_0"] == pytest.approx([-a] * 2)
    assert adv["h_0_0"] == [0.0, 0.0] and adv["h_1_0"] == [0.0] * 3
    # the targets stay where ConSPO's loss reads them
    targets = dict(zip(batch.keys, call["advantages"], strict=True))
    assert targets["g_0_0"][0] == pytest.approx(1.0) and targets["g_1_0"][0] < -1.0
