"""Each TRL hook RLVRTrainer overrides, checked against direct computations.

The hooks are private API of the pinned TRL; these tests are what tells a TRL
upgrade broke them.
"""

from __future__ import annotations

import pytest
import torch
from trainer_utils import GROUP, make_config, make_trainer, save_tiny_model, token_parity_reward

import contrastive_rlvr.trainer.loss.objectives as objectives_module
import contrastive_rlvr.trainer.rlvr_trainer as rlvr_trainer_module
from contrastive_rlvr.algorithms import group_advantages, rcc_advantages
from contrastive_rlvr.trainer.batching import group_permutation
from contrastive_rlvr.trainer.loss import Loss, PolicyLogps


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def first_generation_batch(trainer):
    trainer.model.train()
    return next(iter(trainer.get_train_dataloader()))


def direct_logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(completion | prompt) per token from one unpadded forward (C,)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(completion)[:, None])[
        :, 0
    ]


def rows(ids: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
    return [r[m.bool()].tolist() for r, m in zip(ids, mask, strict=True)]


def test_calculate_rewards_keeps_rewards(model_dir, tmp_path):
    trainer = make_trainer(model_dir, make_config(tmp_path))
    out = trainer._generate_and_score_completions(first_generation_batch(trainer))
    completions = rows(out["completion_ids"], out["completion_mask"])
    expected = token_parity_reward(None, None, completions)
    assert trainer._last_rewards_per_func[:, 0].tolist() == expected
    assert out["rewards"].tolist() == expected
    # Plain GRPO: advantages are the recipe's std-scaled group advantages.
    expected = group_advantages(torch.tensor(expected), GROUP, eps=1e-4)  # TRL's eps
    torch.testing.assert_close(out["advantages"], expected)


def test_rcc_advantages_use_policy_and_reference_delta(model_dir, tmp_path):
    # The stage's own pass (the loss-time delta is tests/trainer/test_rcc_delta_from_loss.py).
    config = make_config(tmp_path, rcc=True, max_steps=1, rcc_delta_pass="stage")
    trainer = make_trainer(model_dir, config)
    trainer.train()  # one update, so the policy differs from the frozen reference
    out = trainer._generate_and_score_completions(first_generation_batch(trainer))
    prompts = rows(out["prompt_ids"], out["prompt_mask"])
    completions = rows(out["completion_ids"], out["completion_mask"])
    ref = trainer.accelerator.unwrap_model(trainer.ref_model)
    delta = torch.tensor(
        [
            (direct_logps(trainer.model, p, c) - direct_logps(ref, p, c)).mean().item()
            for p, c in zip(prompts, completions, strict=True)
        ]
    )
    assert delta.abs().max() > 1e-4, "policy and reference should differ after an update"
    torch.testing.assert_close(trainer.last_batch_stats["delta"], delta, atol=1e-5, rtol=1e-4)
    rewards = torch.tensor(token_parity_reward(None, None, completions))
    expected = rcc_advantages(rewards, delta, GROUP, coef=2.0, eps=1e-4)  # TRL eps
    torch.testing.assert_close(out["advantages"], expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("ratio_mode", ["paper", "consistent"])
def test_bicc_logps_are_a_forward_on_the_conditioned_prompt(model_dir, tmp_path, ratio_mode):
    # A budget large enough that no completion is cut (truncation has its own unit tests).
    config = make_config(tmp_path, bicc=True, bicc_ratio_mode=ratio_mode, bicc_max_seq_len=600)
    trainer = make_trainer(model_dir, config)
    out = trainer._generate_and_score_completions(first_generation_batch(trainer))
    tok = trainer.processing_class
    prompts = rows(out["prompt_ids"], out["prompt_mask"])
    completions = rows(out["completion_ids"], out["completion_mask"])
    conditioned = rows(out["bicc_prompt_ids"], out["bicc_prompt_mask"])
    rewards = out["rewards"]
    mixed = False
    for g in range(0, len(prompts), GROUP):
        members = range(g, g + GROUP)
        correct = [i for i in members if rewards[i] > 0.5]
        wrong = [i for i in members if rewards[i] <= 0.5]
        for i in members:
            # Every conditioned prompt starts with the row's own prompt (after_prompt).
            assert conditioned[i][: len(prompts[i])] == prompts[i]
            if not correct or not wrong:
                assert conditioned[i] == prompts[i]
                continue
            mixed = True
            text = tok.decode(conditioned[i][len(prompts[i]) :])
            opposite = wrong if i in correct else correct
            header = config.bicc_header_wrong if i in correct else config.bicc_header_correct
            assert text.startswith(header)
            for j in opposite:  # the opposite completions, EOS stripped, in group order
                body = tok.decode([t for t in completions[j] if t != tok.eos_token_id])
                assert body in text
    assert mixed, "the test batch should contain a mixed group"

    trainer.model.train()
    logp = trainer._logps(
        trainer.model,
        out["bicc_prompt_ids"],
        out["bicc_prompt_mask"],
        out["completion_ids"],
        out["completion_mask"],
    )
    shared = trainer._logps(
        trainer.model,
        out["bicc_prompt_ids"],
        out["bicc_prompt_mask"],
        out["completion_ids"],
        out["completion_mask"],
        share_prefix=True,
    )
    m = out["completion_mask"]
    torch.testing.assert_close((shared * m).detach(), (logp * m).detach(), atol=1e-5, rtol=0)
    for i, (p, c) in enumerate(zip(conditioned, completions, strict=True)):
        torch.testing.assert_close(
            logp[i, : len(c)].detach(), direct_logps(trainer.model, p, c), atol=1e-5, rtol=1e-5
        )
    if ratio_mode == "paper":
        # pi_old is the plain prompt's: a forward without the context.
        old = out["old_per_token_logps"]
        for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
            torch.testing.assert_close(
                old[i, : len(c)], direct_logps(trainer.model, p, c), atol=1e-5, rtol=1e-5
            )
    else:
        # On-policy, pi_old(o | [q; O_opp]) is the detached current forward: TRL leaves it unset.
        assert out.get("old_per_token_logps") is None


def test_prepare_inputs_keeps_groups_whole_across_micro_batches(model_dir, tmp_path):
    config = make_config(tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=GROUP)
    trainer = make_trainer(model_dir, config)
    batch = first_generation_batch(trainer)
    assert len(batch) == 2 * GROUP  # two prompts, two micro-batches of one group each
    trainer._step = 0
    first = trainer._prepare_inputs(batch)
    trainer._step = 1
    second = trainer._prepare_inputs(batch)
    for micro in (first, second):
        ids = rows(micro["prompt_ids"], micro["prompt_mask"])
        assert len(ids) == GROUP and all(r == ids[0] for r in ids)
    assert (
        rows(first["prompt_ids"], first["prompt_mask"])[0]
        != rows(second["prompt_ids"], second["prompt_mask"])[0]
    )


def test_group_permutation_moves_whole_groups():
    gen = torch.Generator().manual_seed(0)
    order = group_permutation(12, 3, gen)
    assert sorted(order.tolist()) == list(range(12))
    for block in order.view(4, 3).tolist():
        assert block[0] % 3 == 0 and block == [block[0], block[0] + 1, block[0] + 2]
    with pytest.raises(ValueError, match="whole groups"):
        group_permutation(10, 3)


def test_nonfinite_loss_skips_the_update_and_training_goes_on(model_dir, tmp_path, monkeypatch):
    real = objectives_module.policy_loss
    calls = {"n": 0}

    def nan_first(*args, **kwargs):
        loss, metrics = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] == 1 else loss), metrics

    monkeypatch.setattr(objectives_module, "policy_loss", nan_first)
    # GMPO runs the project's loss (the recipes TRL has run TRL's, see test_trl_parity_loss).
    config = make_config(tmp_path, max_steps=1, recipe="gmpo")
    trainer = make_trainer(model_dir, config)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.nonfinite_losses == 1 and trainer.skipped_updates == 1
    assert all(torch.equal(b, p) for b, p in zip(before, trainer.model.parameters(), strict=True))
    # The next step is finite and updates the weights.
    config2 = make_config(tmp_path, max_steps=2, recipe="gmpo")
    trainer2 = make_trainer(model_dir, config2)
    calls["n"] = 0
    trainer2.train()
    assert trainer2.nonfinite_losses == 1 and trainer2.skipped_updates == 1
    assert any(
        not torch.equal(b, p) for b, p in zip(before, trainer2.model.parameters(), strict=True)
    )


def test_bicc_mix_averages_conditioned_and_plain_losses(model_dir, tmp_path):
    config = make_config(tmp_path, bicc=True, bicc_form="conditioned", bicc_mix=0.25, beta=0.0)
    trainer = make_trainer(model_dir, config)
    trainer.current_gradient_accumulation_steps = 1
    trainer._step = 0
    inputs = trainer._prepare_inputs(first_generation_batch(trainer))
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def grads():
        loss = trainer._compute_loss(trainer.model, inputs)
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, params)])

    mixed = grads()
    # The same objective on each prompt alone (bicc_mix 1 alone would run TRL's loss).
    objective = trainer.loss.objective
    trainer.loss = Loss(PolicyLogps(conditioned=True), objective)
    conditioned = grads()
    trainer.loss = Loss(PolicyLogps(conditioned=False), objective)
    plain = grads()
    # 0.25 of the loss on the conditioned prompts, 0.75 on the plain ones.
    torch.testing.assert_close(mixed, 0.25 * conditioned + 0.75 * plain, atol=1e-6, rtol=1e-4)
    assert (conditioned - plain).abs().max() > 1e-4


def test_generation_batch_runs_the_stage_pipeline_with_timings(model_dir, tmp_path):
    trainer = make_trainer(
        model_dir, make_config(tmp_path, bicc=True, bicc_form="conditioned", rcc=True)
    )
    assert trainer.pipelines["train"].names == [
        "rewards",
        "logprobs",
        "advantages",
        "conditioned_prompts",
        "diagnostics",
    ]
    trainer._generate_and_score_completions(first_generation_batch(trainer))
    logged = trainer._metrics["train"]
    for name in ["generate_and_score", *trainer.pipelines["train"].names]:
        assert len(logged[f"timing_s/{name}"]) == 1 and logged[f"timing_s/{name}"][0] >= 0


def test_the_trainer_stays_thin():
    # Only the TRL hooks and the plumbing they share: no method-specific code (that is in
    # the stages and the loss), a short module, short methods.
    import inspect

    source = inspect.getsource(rlvr_trainer_module)
    assert len(source.splitlines()) < 300
    for name, member in vars(rlvr_trainer_module.RLVRTrainer).items():
        if inspect.isfunction(member):
            assert len(inspect.getsourcelines(member)[0]) <= 60, name
    for switch in ("bicc", "rcc", "verigate", "reco", "oc_grpo", "dynamic_sampling"):
        assert f"cfg.{switch}" not in source and f"config.{switch}" not in source


@pytest.mark.parametrize(
    "overrides, route",
    [
        (dict(recipe="grpo"), "trl"),
        (dict(recipe="gspo", bicc=True, bicc_form="conditioned", rcc=True), "trl"),
        (dict(recipe="gmpo"), "project"),
        (dict(recipe="grpo", bicc=True, bicc_mix=0.5), "project"),
    ],
)
def test_loss_metric_keys_follow_the_loss_route(model_dir, tmp_path, overrides, route):
    # The loss-side keys a step logs are those of the route's table (callbacks.py,
    # docs/metrics.md), never the other route's: TRL's loss logs TRL's names.
    from contrastive_rlvr.trainer.callbacks import (
        PROJECT_LOSS_METRIC_KEYS,
        TRL_LOSS_METRIC_KEYS,
        loss_metric_keys,
    )

    config = make_config(tmp_path, max_steps=1, beta=0.04, **overrides)
    ours, other = (
        (TRL_LOSS_METRIC_KEYS, PROJECT_LOSS_METRIC_KEYS)
        if route == "trl"
        else (PROJECT_LOSS_METRIC_KEYS, TRL_LOSS_METRIC_KEYS)
    )
    assert loss_metric_keys(config) is ours
    trainer = make_trainer(model_dir, config)
    trainer.train()
    logged = set().union(*(entry.keys() for entry in trainer.state.log_history))
    always = {
        "trl": {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
                "clip_ratio/low_min", "clip_ratio/high_max", "entropy", "kl"},
        "project": {"loss/policy", "clip_ratio/region_mean", "clip_ratio/low_mean",
                    "clip_ratio/high_mean", "ratio/mean", "kl"},
    }[route]  # fmt: skip
    assert always <= logged
    assert not (set(other) - set(ours)) & logged
    # The loss's token counts (shared_forward/tokens.py): the kinds of prompts the loss
    # reads, never the transfer probe's plain forward (BiCC's first step is probed).
    kinds = (
        {"plain"}
        if not config.bicc
        else {"conditioned"} | ({"plain"} if config.bicc_mix < 1 else set())
    )
    assert ("bicc/transfer_cos" in logged) == config.bicc  # the probe's forward ran
    tokens = {k for k in logged if k.startswith("tokens/loss_")}
    assert tokens == {
        f"tokens/loss_{what}_{kind}" for what in ("rows", "forward") for kind in kinds
    }
    step = trainer.state.log_history[0]
    data = trainer.last_generation_batch  # one micro-batch a step: the whole batch
    for kind, prefix in (("plain", ""), ("conditioned", "bicc_")):
        if kind in kinds:
            rows = data[f"{prefix}prompt_mask"].sum() + data["completion_mask"].sum()
            assert step[f"tokens/loss_rows_{kind}"] == float(rows)
            assert 0 < step[f"tokens/loss_forward_{kind}"] <= step[f"tokens/loss_rows_{kind}"]
    if config.bicc and config.share_prefix:  # the conditioned prompts were packed
        assert step["tokens/loss_forward_conditioned"] < step["tokens/loss_rows_conditioned"]
