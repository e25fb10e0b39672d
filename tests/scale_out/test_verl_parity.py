"""Cross-engine parity: the verl hooks recompute what the TRL path's stages computed.

tests/fixtures/cross_engine_parity.json holds a fixed batch (chat prompts, completions,
rewards, old and reference log-probs) and what the TRL pipeline made of it
(tests/fixtures/make_cross_engine_parity.py, run in .venv): BiCC's conditioned prompt
ids (placement ``auto`` -> the user turn, the batch's budget capped by the model's
window, EOS and end-of-turn stripped), RCC advantages, ConSPO + RCC baselines and
targets. Here the ``crlvr_sync`` trainer's hooks run on the same batch, its rows
interleaved as verl's balancing leaves them, and every value must be equal exactly.
Needs verl (.venv-verl).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import trainer_base
from verl_fakes import FakeTQ

from contrastive_rlvr.algorithms import sequence_delta
from contrastive_rlvr.integrations.verl import transfer
from contrastive_rlvr.integrations.verl.trainer import CrlvrTrainer, check_settings

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES))

from parity_batch import END_OF_TURN, EOS, ChatCharTokenizer  # noqa: E402

torch.set_num_threads(1)

FIXTURE = json.loads((FIXTURES / "cross_engine_parity.json").read_text())
SETTINGS, INPUTS, EXPECTED = FIXTURE["settings"], FIXTURE["inputs"], FIXTURE["expected"]
G = INPUTS["group_size"]
# Groups interleaved (row k of every group, then row k + 1, ...), order kept within a group.
ORDER = [g * G + k for k in range(G) for g in range(len(INPUTS["rows"]) // G)]


def verl_config(recipe: str, **overrides):
    """The repository's verl recipe with the fixture's settings."""
    with initialize_config_dir(config_dir=str(ROOT / "recipes" / "verl"), version_base=None):
        cfg = compose(config_name=recipe)
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    loss = "actor_rollout_ref.actor.policy_loss."
    values = {
        "actor_rollout_ref.rollout.n": G,
        "data.max_response_length": SETTINGS["max_completion_length"],
        # far above the batch's prompts: the budget follows the batch, as on TRL
        "data.max_prompt_length": 512,
        loss + "bicc_context_ratio": SETTINGS["bicc_context_ratio"],
        loss + "rcc_coef": SETTINGS["rcc_coef"],
        loss + "rcc_delta": SETTINGS["rcc_delta"],
        loss + "reward_threshold": SETTINGS["reward_threshold"],
        loss + "conspo_max_margin": SETTINGS["max_margin"],
        loss + "conspo_warmup": SETTINGS["margin_warmup"],
        # the fixture's run is the paper's form (its conditioned prompts, its ratio)
        loss + "bicc_form": "conditioned",
        **overrides,
    }
    for key, value in values.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def verl_rows() -> dict[str, dict]:
    """The fixture's rows as TransferQueue holds them, keyed ``{uid}_{session}_0``."""
    rows = {}
    for i in ORDER:
        r = INPUTS["rows"][i]
        prompt = torch.tensor(r["prompt_ids"])
        response = torch.tensor(r["completion_ids"])
        scores = torch.zeros(len(response))
        scores[-1] = r["reward"]
        rows[f"q{i // G}_{i % G}_0"] = {
            "prompts": prompt,
            "responses": response,
            "input_ids": torch.cat([prompt, response]),
            "position_ids": torch.arange(len(prompt) + len(response)),
            "rm_scores": scores,
            "response_mask": torch.ones(len(response), dtype=torch.int64),
            "old_log_probs": torch.tensor(r["old_logps"], dtype=torch.float32),
            "ref_log_prob": torch.tensor(r["ref_logps"], dtype=torch.float32),
            "raw_prompt": r["messages"],
        }
    return rows


def make_trainer(cfg, monkeypatch):
    trainer = object.__new__(CrlvrTrainer)
    trainer.config = cfg
    trainer.crlvr = check_settings(cfg)
    tok = ChatCharTokenizer()
    trainer.tokenizer = tok
    # what _init_tokenizer keeps from the model config: the EOS list (tokenizer's first,
    # then the generation config's, TRL's rule) and the window
    trainer.end_token_ids = [EOS, END_OF_TURN]
    trainer.max_positions = SETTINGS["max_positions"]
    trainer.total_training_steps = 20
    trainer.global_steps = round(SETTINGS["progress"] * 20) + 1  # (steps - 1) / total
    trainer.use_critic = False
    store = FakeTQ(verl_rows())
    monkeypatch.setattr(transfer, "tq", store)
    tags = [
        {"prompt_len": len(r["prompts"]), "seq_len": len(r["input_ids"])}
        for r in store.rows.values()
    ]
    return trainer, store, KVBatchMeta(keys=list(store.rows), tags=tags, partition_id="train")


def in_fixture_order(store: FakeTQ, field: str) -> list:
    """Per-row values of ``field`` back in the fixture's (group-by-group) row order."""
    by_row = {i: store.rows[f"q{i // G}_{i % G}_0"][field] for i in ORDER}
    return [by_row[i] for i in range(len(ORDER))]


def test_conditioned_prompt_ids_are_the_trl_stages(monkeypatch):
    cfg = verl_config("grpo_bicc_rcc")
    trainer, store, batch = make_trainer(cfg, monkeypatch)
    seen = {}

    def update(self, batch, metrics):
        seen["prompts"] = [p.tolist() for p in in_fixture_order(store, "prompts")]
        return batch

    def reference(batch, metrics):
        seen["ref_prompts"] = [p.tolist() for p in in_fixture_order(store, "prompts")]
        return batch

    monkeypatch.setattr(trainer_base.PPOTrainer, "_update_actor", update)
    trainer._compute_ref_log_prob = reference
    trainer._update_actor(batch, {})
    expected = EXPECTED["grpo_rcc_bicc"]["conditioned_prompt_ids"]
    for i, (got, want) in enumerate(zip(seen["prompts"], expected, strict=True)):
        assert got == want, f"row {i}: verl {trainer.tokenizer.decode(got)!r}"
    # the fixture's run has beta 0.01 and bicc_kl_reference 'conditioned' (TRL's default):
    # the KL reference is taken on the same conditioned rows, in the paper mode too
    assert seen["ref_prompts"] == expected


def test_rcc_advantages_are_the_trl_stages(monkeypatch):
    trainer, store, batch = make_trainer(verl_config("grpo_bicc_rcc"), monkeypatch)
    trainer._compute_advantage(batch, {})
    got = torch.stack([a[0] for a in in_fixture_order(store, "advantages")])
    want = torch.tensor(EXPECTED["grpo_rcc_bicc"]["advantages"], dtype=torch.float32)
    assert torch.equal(got, want), (got - want).abs().max()
    # constant along each completion, as the TRL loss broadcasts its per-row advantage
    for a in in_fixture_order(store, "advantages"):
        assert torch.equal(a, a[:1].expand_as(a))


def test_conspo_rcc_baselines_and_targets_are_the_trl_stages(monkeypatch):
    trainer, store, batch = make_trainer(verl_config("conspo_rcc"), monkeypatch)
    trainer._compute_advantage(batch, {})
    got = torch.stack([a[0] for a in in_fixture_order(store, "advantages")])
    # The TRL stage's labels and margin (1 + m_t where R > b*, else -1); on verl the
    # negatives carry the batch's groups per usable group (the loss's window normaliser,
    # TRL's conspo_groups): the groups with both labels in TRL's targets.
    trl = torch.tensor(EXPECTED["conspo_rcc"]["targets"], dtype=torch.float32)
    labels = (trl > 0).view(-1, G)
    usable = int((labels.any(1) & ~labels.all(1)).sum())
    assert usable == 2 and labels.shape[0] == 3  # the fixture's batch: 3 groups, 2 usable
    want = torch.where(trl > 0, trl, torch.tensor(-labels.shape[0] / usable))
    assert torch.equal(got, want)
    # the baseline the targets were cut at, from the estimator's own function
    from contrastive_rlvr.integrations.verl.advantages import rcc_baselines

    rows = [INPUTS["rows"][i] for i in ORDER]
    old = torch.nn.utils.rnn.pad_sequence([torch.tensor(r["old_logps"]) for r in rows], True)
    ref = torch.nn.utils.rnn.pad_sequence([torch.tensor(r["ref_logps"]) for r in rows], True)
    mask = torch.nn.utils.rnn.pad_sequence(
        [torch.ones(len(r["old_logps"])) for r in rows], batch_first=True
    )
    delta = sequence_delta(old, ref, mask, reduce=SETTINGS["rcc_delta"])
    rewards = torch.tensor([r["reward"] for r in rows])
    index = [i // G for i in ORDER]
    baseline = rcc_baselines(rewards, delta, index, coef=SETTINGS["rcc_coef"])
    by_row = dict(zip(ORDER, baseline.tolist(), strict=True))
    assert [by_row[i] for i in range(len(ORDER))] == EXPECTED["conspo_rcc"]["rcc_baselines"]
