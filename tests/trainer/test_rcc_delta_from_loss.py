"""RCC's delta from the loss's own forward (``rcc_delta_pass='auto'``, issue 13 item 3).

On an on-policy batch the stages make no no-grad policy pass: the loss takes
log pi_theta(o | q) from its forward, and the advantages it uses must be the RCC
advantages of delta = mean_t(log pi_theta - log pi_ref), checked here against direct
forwards and ``rcc_advantages`` (the formula), for TRL's loss and the project's.
"""

from __future__ import annotations

import pytest
import torch
from trainer_utils import GROUP, make_config, make_trainer, save_tiny_model, token_parity_reward

import contrastive_rlvr.trainer.loss.build as build_module
import contrastive_rlvr.trainer.loss.objectives as objectives_module
from contrastive_rlvr.algorithms import rcc_advantages, rcc_baseline
from contrastive_rlvr.trainer.stages.build import rcc_delta_pass_reason
from contrastive_rlvr.trainer.training_diagnostics import reads_batch_delta


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def direct_logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(1, torch.tensor(completion)[:, None])[:, 0]


def rows(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]


def trained_trainer(model_dir, tmp_path, recipe: str, **overrides):
    config = make_config(
        tmp_path, recipe=recipe, rcc=True, max_steps=1, diagnostics_every=0, deltas_every=0,
        **overrides,
    )  # fmt: skip
    trainer = make_trainer(model_dir, config)
    trainer.train()  # one update, so the policy differs from the frozen reference
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def generation_batch(trainer, monkeypatch):
    """A fresh generation batch, and how many no-grad policy passes the stages made."""
    policy_calls = []
    real = trainer._no_grad_logps

    def counting(model):
        inner = real(model)

        def logps(*tensors, **kw):
            if model is trainer.model:
                policy_calls.append(tensors[0].shape)
            return inner(*tensors, **kw)

        return logps

    monkeypatch.setattr(trainer, "_no_grad_logps", counting)
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    return batch, policy_calls


def expected_delta(trainer, batch) -> torch.Tensor:
    prompts = rows(batch["prompt_ids"], batch["prompt_mask"])
    completions = rows(batch["completion_ids"], batch["completion_mask"])
    ref = trainer.accelerator.unwrap_model(trainer.ref_model)
    return torch.tensor(
        [
            (direct_logps(trainer.model, p, c) - direct_logps(ref, p, c)).mean().item()
            for p, c in zip(prompts, completions, strict=True)
        ]
    )


@pytest.mark.parametrize("recipe", ["grpo", "gmpo"])  # TRL's loss, the project's loss
def test_loss_uses_rcc_advantages_of_its_own_forward(model_dir, tmp_path, monkeypatch, recipe):
    trainer = trained_trainer(model_dir, tmp_path, recipe)
    batch, policy_calls = generation_batch(trainer, monkeypatch)
    assert policy_calls == []  # no separate no-grad policy pass
    assert "rcc_ref_per_token_logps" in batch and "delta" not in trainer.last_batch_stats
    delta = expected_delta(trainer, batch)
    assert delta.abs().max() > 1e-4, "policy and reference should differ after an update"
    completions = rows(batch["completion_ids"], batch["completion_mask"])
    rewards = torch.tensor(token_parity_reward(None, None, completions))
    expected = rcc_advantages(rewards, delta, GROUP, coef=2.0, eps=1e-4)  # TRL eps
    assert not torch.allclose(expected, batch["advantages"], atol=1e-3)  # the plain stand-in

    used = []
    if recipe == "grpo":  # TRL's loss reads inputs["advantages"] after its forward
        original = build_module.rcc_advantages_of

        def capture(*args, **kwargs):
            value = original(*args, **kwargs)
            used.append(value)
            return value

        monkeypatch.setattr(build_module, "rcc_advantages_of", capture)
    else:
        original = objectives_module.policy_loss

        def capture(name, logp, old, advantages, mask, **options):
            used.append(advantages)
            return original(name, logp, old, advantages, mask, **options)

        monkeypatch.setattr(objectives_module, "policy_loss", capture)
    loss = trainer._compute_loss(trainer.model, batch)
    assert torch.isfinite(loss)
    assert len(used) == 1
    torch.testing.assert_close(used[0], expected, atol=1e-4, rtol=1e-4)
    logged = trainer._metrics["train"]
    torch.testing.assert_close(
        torch.tensor(logged["rcc/delta_mean"][-1]), delta.mean(), atol=1e-5, rtol=1e-4
    )


def test_conspo_baseline_from_its_own_forward(model_dir, tmp_path, monkeypatch):
    trainer = trained_trainer(model_dir, tmp_path, "conspo")
    batch, policy_calls = generation_batch(trainer, monkeypatch)
    assert policy_calls == [] and "conspo_baseline" not in batch
    delta = expected_delta(trainer, batch)
    completions = rows(batch["completion_ids"], batch["completion_mask"])
    rewards = torch.tensor(token_parity_reward(None, None, completions))
    expected = rcc_baseline(rewards, delta, GROUP, coef=2.0, bound="reward_range")
    seen = []
    original = objectives_module.conspo_loss

    def capture(*args, baseline=None, **kwargs):
        seen.append(baseline)
        return original(*args, baseline=baseline, **kwargs)

    monkeypatch.setattr(objectives_module, "conspo_loss", capture)
    trainer._compute_loss(trainer.model, batch)
    torch.testing.assert_close(seen[0], expected, atol=1e-4, rtol=1e-4)


def test_stage_pass_when_asked_or_needed(model_dir, tmp_path, monkeypatch):
    trainer = trained_trainer(model_dir, tmp_path, "grpo", rcc_delta_pass="stage")
    batch, policy_calls = generation_batch(trainer, monkeypatch)
    assert len(policy_calls) == 1 and "rcc_ref_per_token_logps" not in batch
    assert "delta" in trainer.last_batch_stats


def test_diagnostic_steps_read_the_whole_batch_delta(tmp_path):
    cfg = make_config(tmp_path, diagnostics_every=25, deltas_every=5)
    # generation at global_step s serves step s + 1: steps 1, 5, 10, ..., 25, 28 (the last), 30
    chosen = [s for s in range(30) if reads_batch_delta(cfg, s, 28)]
    assert chosen == [0, 4, 9, 14, 19, 24, 27, 29]
    off = make_config(tmp_path, diagnostics_every=0, deltas_every=0)
    assert not any(reads_batch_delta(off, s, 28) for s in range(30))


def test_reasons_for_a_separate_pass(tmp_path):
    def reason(**kw):
        return rcc_delta_pass_reason(make_config(tmp_path, rcc=True, **kw), GROUP)

    assert reason() is None
    assert reason(rcc_delta_pass="stage") == "rcc_delta_pass='stage'"
    assert reason(bicc=True) == "bicc is on"
    assert reason(per_device_train_batch_size=2, steps_per_generation=4).startswith(
        "per_device_train_batch_size=2 does not hold whole groups of 4"
    )
    assert rcc_delta_pass_reason(make_config(tmp_path), GROUP).startswith("RCC")


def test_bad_value_is_refused(tmp_path):
    with pytest.raises(
        ValueError, match="rcc_delta_pass='loss' is invalid: choose one of auto, stage"
    ):
        make_config(tmp_path, rcc_delta_pass="loss")
