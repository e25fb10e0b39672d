"""TRL parity by construction: for the recipes TRL has, the trainer's loss is TRL's own
``_compute_loss``; the algorithm core stays the reference.

Each test puts one fixed off-policy micro-batch (old log-probs shifted away from the
current policy so that clipping bites, mixed-sign advantages, padded rows) through the
trainer (TRL's loss, as routed from the recipe) and through
``contrastive_rlvr.algorithms.policy_loss`` with the recipe's paper options, and checks
the loss and its gradient agree.
"""

from __future__ import annotations

import pytest
import torch
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.algorithms import policy_loss
from contrastive_rlvr.trainer.loss import TRLLoss

B, P, T = 4, 3, 5


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def micro_batch(trainer) -> dict:
    """Fixed ids, right-padded completions, old log-probs 0.3 x (-1)^t off the policy."""
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    inputs = {
        "prompt_ids": torch.randint(3, vocab, (B, P), generator=g),
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (B, T), generator=g),
        "completion_mask": mask,
        "advantages": torch.tensor([1.0, -0.5, 0.8, -1.2]),
        "num_items_in_batch": mask.sum(),
    }
    with torch.no_grad():
        logp = current_logps(trainer, inputs)
    shift = 0.3 * torch.tensor([(-1.0) ** t for t in range(T)])
    inputs["old_per_token_logps"] = (logp + shift).masked_fill(mask == 0, 0.0)
    inputs["ref_per_token_logps"] = (logp - 0.2).masked_fill(mask == 0, 0.0)
    return inputs


def current_logps(trainer, inputs: dict, prompt: str = "prompt") -> torch.Tensor:
    return trainer._logps(
        trainer.model,
        inputs[f"{prompt}_ids"],
        inputs[f"{prompt}_mask"],
        inputs["completion_ids"],
        inputs["completion_mask"],
    )


def trainer_loss(trainer, inputs: dict) -> tuple[float, torch.Tensor]:
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grad = trainer.model.lm_head.weight.grad.clone()
    trainer.model.zero_grad()
    return loss.item(), grad


def core_loss(trainer, inputs: dict, name: str, mask=None, prompt="prompt", **options):
    trainer.model.zero_grad()
    logp = current_logps(trainer, inputs, prompt)
    mask = inputs["completion_mask"] if mask is None else mask
    loss, _ = policy_loss(
        name, logp, inputs["old_per_token_logps"], inputs["advantages"], mask.float(), **options
    )
    loss.backward()
    grad = trainer.model.lm_head.weight.grad.clone()
    trainer.model.zero_grad()
    return loss.item(), grad


def build(model_dir, tmp_path, **fields):
    config = make_config(tmp_path, per_device_train_batch_size=B, max_completion_length=T, **fields)
    trainer = make_trainer(model_dir, config)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop
    assert isinstance(trainer.loss, TRLLoss)
    return trainer


def agree(ours: tuple[float, torch.Tensor], core: tuple[float, torch.Tensor]) -> None:
    assert ours[0] == pytest.approx(core[0], rel=1e-5, abs=1e-7)
    assert torch.allclose(ours[1], core[1], rtol=1e-4, atol=1e-7)
    assert core[1].abs().sum() > 0  # a gradient that could disagree


# (recipe, the core's loss, its options): the recipe's paper values, as README's table.
CASES = [
    ("grpo", "grpo", {"clip_low": 0.2, "clip_high": 0.2, "agg": "seq-mean-token-mean"}),
    ("dr_grpo", "dr_grpo", {"agg": "seq-mean-token-sum-norm", "max_len": T}),
    ("dapo", "dapo", {"clip_low": 0.2, "clip_high": 0.28, "agg": "token-mean"}),
    ("gspo", "gspo", {"clip_low": 3e-4, "clip_high": 4e-4}),
]


@pytest.mark.parametrize(("recipe", "name", "options"), CASES, ids=[c[0] for c in CASES])
def test_trl_loss_equals_the_core(model_dir, tmp_path, recipe, name, options):
    extra = {"dynamic_sampling": False, "overlong_punishment": False} if recipe == "dapo" else {}
    trainer = build(model_dir, tmp_path, recipe=recipe, **extra)
    inputs = micro_batch(trainer)
    ours = trainer_loss(trainer, inputs)
    core = core_loss(trainer, inputs, name, **options)
    agree(ours, core)
    # The batch is off-policy enough that clipping changes the value.
    unclipped = core_loss(trainer, inputs, name, **{**options, "clip_low": 9.0, "clip_high": 9.0})
    assert unclipped[0] != pytest.approx(core[0], rel=1e-4)


def test_kl_term_equals_the_core(model_dir, tmp_path):
    trainer = build(model_dir, tmp_path, recipe="grpo", beta=0.04)
    inputs = micro_batch(trainer)
    ours = trainer_loss(trainer, inputs)
    core = core_loss(trainer, inputs, "grpo", beta=0.04, ref_logp=inputs["ref_per_token_logps"])
    agree(ours, core)
    assert core[0] != pytest.approx(core_loss(trainer, inputs, "grpo")[0], rel=1e-4)


def test_a_users_epsilon_high_is_honoured(model_dir, tmp_path):
    # The case: recipe grpo with epsilon_high=0.28 gets 0.28, not the recipe's 0.2.
    trainer = build(model_dir, tmp_path, recipe="grpo", epsilon_high=0.28)
    assert trainer.epsilon_high == 0.28 and trainer.args.clip_high == 0.28
    inputs = micro_batch(trainer)
    ours = trainer_loss(trainer, inputs)
    agree(ours, core_loss(trainer, inputs, "grpo", clip_low=0.2, clip_high=0.28))
    assert ours[0] != pytest.approx(core_loss(trainer, inputs, "grpo")[0], rel=1e-4)


def test_a_users_loss_type_is_honoured(model_dir, tmp_path):
    # TRL's loss_type with recipe grpo: dapo's token-mean aggregation, grpo's clip.
    trainer = build(model_dir, tmp_path, recipe="grpo", loss_type="dapo")
    inputs = micro_batch(trainer)
    agree(trainer_loss(trainer, inputs), core_loss(trainer, inputs, "grpo", agg="token-mean"))


def test_tool_tokens_are_masked_as_in_the_core(model_dir, tmp_path):
    trainer = build(model_dir, tmp_path, recipe="grpo")
    inputs = micro_batch(trainer)
    inputs["tool_mask"] = torch.tensor([[1, 0, 0, 1, 1]] * B)
    ours = trainer_loss(trainer, inputs)
    agree(
        ours,
        core_loss(trainer, inputs, "grpo", mask=inputs["completion_mask"] * inputs["tool_mask"]),
    )


def test_bicc_conditioned_prompt_is_what_trl_reads(model_dir, tmp_path):
    trainer = build(model_dir, tmp_path, recipe="grpo", bicc=True, bicc_form="conditioned")
    inputs = micro_batch(trainer)
    g = torch.Generator().manual_seed(1)
    inputs["bicc_prompt_ids"] = torch.randint(
        3, trainer.model.config.vocab_size, (B, 7), generator=g
    )
    inputs["bicc_prompt_mask"] = torch.ones(B, 7, dtype=torch.long)
    ours = trainer_loss(trainer, inputs)
    agree(ours, core_loss(trainer, inputs, "grpo", prompt="bicc_prompt"))
    assert ours[0] != pytest.approx(core_loss(trainer, inputs, "grpo")[0], rel=1e-4)
