"""examples/trl_style_lora.py runs as written (its data file, its reward on the extra
column, LoRA), here on the tiny model given a chat template instead of SmolLM2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch
from inputs.test_trl_dataset_formats import chat_model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "trl_style_lora.py"
DATA = ROOT / "examples" / "data" / "word_problems.jsonl"


def _load_example():
    spec = importlib.util.spec_from_file_location("trl_style_lora", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unit_reward_reads_the_extra_column():
    reward = _load_example().states_the_unit
    completions = [[{"role": "assistant", "content": "43 Apples"}],
                   [{"role": "assistant", "content": "43"}]]  # fmt: skip
    assert reward(completions, unit=["apples", "apples"]) == [0.2, 0.0]


def test_example_script_runs_as_written(tmp_path):
    torch.set_num_threads(1)
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    assert all(r["prompt"][0]["role"] == "system" and r["unit"] for r in rows)
    model = chat_model(tmp_path / "model")
    out = tmp_path / "out"
    _load_example().main([
        "--model_name_or_path", str(model), "--dataset_name", str(DATA),
        "--output_dir", str(out), "--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8",
        "--lora_target_modules", "q_proj", "v_proj", "--learning_rate", "1e-3",
        "--max_steps", "1", "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--max_completion_length", "4", "--bicc", "true", "--bicc_max_seq_len", "512",
        "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1",
    ])  # fmt: skip
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    card = (out / "README.md").read_text()
    assert "methods on: BiCC, LoRA (PEFT)" in card and f"base model: `{model}`" in card
