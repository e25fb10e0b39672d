"""What a TRL user relies on, on the subclass: optional ``args`` and ``reward_funcs``,
evaluation with ``num_generations_eval=1``, and a PEFT adapter whose reference (RCC's
delta, KL, the delta diagnostics) is the base model with the adapter disabled."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainer_utils import (
    make_config,
    prompt_dataset,
    save_tiny_model,
    token_parity_reward,
)
from transformers import AutoModelForCausalLM

from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.trainer import RLVRConfig, RLVRTrainer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    torch.set_num_threads(1)
    return save_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_args_and_reward_funcs_are_optional(model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = RLVRTrainer(
        AutoModelForCausalLM.from_pretrained(model_dir),
        token_parity_reward,
        train_dataset=prompt_dataset(),
        processing_class=load_char_tokenizer(model_dir),
    )
    # As TRL's GRPOConfig(f"{model_name}-GRPO"): a default config named after the model.
    assert isinstance(trainer.args, RLVRConfig) and trainer.args.recipe == "grpo"
    assert Path(trainer.args.output_dir).name == f"{Path(model_dir).name}-RLVR"
    # Without reward functions TRL looks for an environment's reward, as for GRPOTrainer.
    with pytest.raises(ValueError, match="No reward source provided"):
        RLVRTrainer(
            AutoModelForCausalLM.from_pretrained(model_dir),
            train_dataset=prompt_dataset(),
            processing_class=load_char_tokenizer(model_dir),
        )


def test_evaluation_with_one_generation_per_prompt(model_dir, tmp_path):
    config = make_config(
        tmp_path,
        num_generations_eval=1,
        per_device_eval_batch_size=3,
        eval_strategy="steps",
        eval_steps=1,
    )
    trainer = RLVRTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=token_parity_reward,
        args=config,
        train_dataset=prompt_dataset(),
        eval_dataset=prompt_dataset(3),
        processing_class=load_char_tokenizer(model_dir),
    )
    metrics = trainer.evaluate()
    # Groups of 1 carry no signal: every advantage is 0, so the clipped loss is exactly 0.
    assert trainer.last_generation_batch["advantages"].tolist() == [0.0, 0.0, 0.0]
    assert metrics["eval_loss"] == 0.0


def lora_trainer(model_dir: Path, tmp_path: Path, **fields) -> RLVRTrainer:
    peft = pytest.importorskip("peft")
    config = make_config(tmp_path, **fields)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    trainer = RLVRTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=token_parity_reward,
        args=config,
        train_dataset=prompt_dataset(),
        processing_class=load_char_tokenizer(model_dir),
        peft_config=lora,
    )
    # A trained adapter: LoRA's B starts at 0 (adapter = identity); make it move the output.
    with torch.no_grad():
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)
    return trainer


@pytest.mark.parametrize("fields", [{"rcc": True}, {"beta": 0.04}, {"log_delta": True}])
def test_peft_reference_is_the_base_model_with_the_adapter_off(model_dir, tmp_path, fields):
    trainer = lora_trainer(model_dir, tmp_path, **fields)
    assert trainer.ref_model is None and trainer._adapter_reference
    ctx = trainer._stage_context("train")
    prompt = torch.tensor([[5, 6, 7]])
    completion = torch.tensor([[8, 9, 10, 11]])
    ones_p, ones_c = torch.ones_like(prompt), torch.ones_like(completion)
    ref = ctx.reference_logps(prompt, ones_p, completion, ones_c)
    policy = ctx.policy_logps(prompt, ones_p, completion, ones_c)
    base = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        logits = base(input_ids=torch.cat([prompt, completion], 1)).logits[0, 2:-1]
    expected = torch.log_softmax(logits.float(), -1).gather(1, completion[0, :, None])[:, 0]
    assert torch.allclose(ref[0], expected, atol=1e-5)
    assert not torch.allclose(policy[0], expected, atol=1e-3)  # the adapter is on elsewhere


def test_peft_rcc_trains_a_step(model_dir, tmp_path):
    trainer = lora_trainer(model_dir, tmp_path, rcc=True, max_steps=1)
    trainer.train()
    assert trainer.state.global_step == 1
    # delta = log pi_theta - log pi_ref is not 0: the reference is not the adapted policy.
    assert trainer.last_batch_stats["delta"].abs().min() > 0
