"""LoRA in a script, as TRL users write it: ``peft_config=LoraConfig(...)`` passed in code
trains an adapter without ``use_peft``; ``merge_adapter=True`` makes ``save_model`` write
the merged model too (as ``train`` does), whose outputs are the adapted model's; an
adapter trained on a relative base path records an absolute one, so it loads from any
working directory."""

from __future__ import annotations

import json
import os

import pytest
import torch
from peft import LoraConfig
from trainer_utils import (
    make_config,
    make_trainer,
    prompt_dataset,
    save_tiny_model,
    token_parity_reward,
)
from transformers import AutoModelForCausalLM

from contrastive_rlvr import load_model_and_tokenizer
from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.trainer import RLVRTrainer

LORA = dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("base") / "model")


def test_peft_config_in_code_with_merge_adapter_saves_both(base, tmp_path):
    config = make_config(tmp_path, merge_adapter=True, max_steps=1)
    assert not config.use_peft
    from transformers import AutoModelForCausalLM as Auto


    trainer = RLVRTrainer(
        model=Auto.from_pretrained(base), reward_funcs=[token_parity_reward], args=config,
        train_dataset=prompt_dataset(), processing_class=load_char_tokenizer(base),
        peft_config=LoraConfig(**LORA),
    )  # fmt: skip
    trainer.train()
    out = tmp_path / "out"
    trainer.create_model_card()
    trainer.save_model(str(out))
    assert (out / "adapter_config.json").is_file()
    merged = out / "merged"
    assert (merged / "model.safetensors").is_file() and (merged / "README.md").is_file()
    assert "LoRA (PEFT)" in (out / "README.md").read_text()
    # the merged model computes what the trained adapter computes, and not what the base does
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    peft_model = trainer.accelerator.unwrap_model(trainer.model).eval()
    with torch.no_grad():
        adapted = peft_model(input_ids=ids).logits
        merged_logits = AutoModelForCausalLM.from_pretrained(merged)(input_ids=ids).logits
        base_logits = AutoModelForCausalLM.from_pretrained(base)(input_ids=ids).logits
    torch.testing.assert_close(merged_logits, adapted, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(merged_logits, base_logits)


def test_merge_adapter_without_an_adapter_is_refused(base, tmp_path):
    config = make_config(tmp_path, merge_adapter=True)
    with pytest.raises(UserError, match=r"^merge_adapter=True merges a LoRA adapter, but this "):
        make_trainer(base, config)


def test_an_adapter_on_a_relative_base_path_loads_from_elsewhere(base, tmp_path, monkeypatch):
    monkeypatch.chdir(base.parent)  # the base is ./model from here
    config = make_config(tmp_path, max_steps=1, model="model")


    trainer = RLVRTrainer(
        model="model", reward_funcs=[token_parity_reward], args=config,
        train_dataset=prompt_dataset(), processing_class=load_char_tokenizer(base),
        peft_config=LoraConfig(**LORA),
    )  # fmt: skip
    trainer.train()
    out = tmp_path / "adapter"
    trainer.save_model(str(out))
    recorded = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(base.resolve())
    monkeypatch.chdir(tmp_path)  # elsewhere: ./model is not there
    assert not os.path.exists("model")
    loaded, _ = load_model_and_tokenizer(out)  # the base found by its recorded path
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        adapted = trainer.accelerator.unwrap_model(trainer.model).eval()(input_ids=ids).logits
        torch.testing.assert_close(loaded(input_ids=ids).logits, adapted, rtol=1e-4, atol=1e-5)
