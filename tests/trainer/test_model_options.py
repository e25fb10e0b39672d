"""TRL's model options: ModelConfig fields and model_init_kwargs honoured, LoRA from the
command line, a YAML of TRL fields naming no model refused; the final model (or adapter)
saved in output_dir with a card naming the base model, the recipe and the methods on."""

from __future__ import annotations

import json

import pytest
import torch
from trainer_utils import save_tiny_model
from transformers import AutoModelForCausalLM

from contrastive_rlvr.run import train
from contrastive_rlvr.trainer.parse import parse_config


def _data(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text("".join(json.dumps({"problem": f"{a}+1=", "answer": str(a + 1)}) + "\n"
                         for a in range(8)))  # fmt: skip
    return f


def _args(model, data, out, *extra):
    return [
        "--model_name_or_path", str(model), "--dataset", str(data), "--output_dir", str(out),
        "--rewards", "format", "--heldout_size", "2", "--eval_n", "1", "--max_steps", "1",
        "--num_generations", "4", "--per_device_train_batch_size", "8",
        "--max_completion_length", "4", "--diagnostics_every", "0", "--deltas_every", "0",
        "--save_strategy", "no", "--learning_rate", "1e-3", "--warmup_steps", "0", *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    "flags", [["--model_init_kwargs", '{"dtype": "bfloat16"}'], ["--dtype", "bfloat16"]]
)
def test_bfloat16_is_honoured_and_the_final_model_saved(tmp_path, flags):
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "model")
    out = tmp_path / "out"
    config = parse_config(None, _args(model_dir, _data(tmp_path), out, "--bicc", "true", *flags))
    assert config.model == str(model_dir)  # model_name_or_path is TRL's name of --model
    assert train(config, progress=False)["steps"] == 1
    # save_strategy=no, and still the final model is in output_dir, loadable, in bfloat16
    assert not list(out.glob("checkpoint-*"))
    saved = json.loads((out / "config.json").read_text())
    assert saved["dtype"] == "bfloat16"
    model = AutoModelForCausalLM.from_pretrained(out)
    assert next(model.parameters()).dtype == torch.bfloat16
    card = (out / "README.md").read_text()
    assert "[None]" not in card and f"base model: `{model_dir}`" in card
    assert "recipe: `grpo`" in card and "methods on: BiCC" in card


def test_lora_from_the_command_line_saves_the_adapter(tmp_path):
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "model")
    out = tmp_path / "out"
    config = parse_config(None, _args(model_dir, _data(tmp_path), out, "--use_peft", "true",
                                      "--lora_r", "4", "--lora_alpha", "8",
                                      "--lora_target_modules", "q_proj", "v_proj"))  # fmt: skip
    assert train(config, progress=False)["steps"] == 1
    adapter = json.loads((out / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8
    assert sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    assert (out / "adapter_model.safetensors").exists()
    assert "LoRA (PEFT)" in (out / "README.md").read_text()


def test_a_trl_yaml_naming_no_model_is_refused(tmp_path):
    own = tmp_path / "grpo.yaml"
    own.write_text("learning_rate: 1.0e-5\nnum_generations: 4\n")
    with pytest.raises(ValueError, match="names no model.*model_name_or_path"):
        parse_config(own, ["--output_dir", str(tmp_path / "o")])
    own.write_text("model_name_or_path: some/model\nlearning_rate: 1.0e-5\n")
    assert parse_config(own, ["--output_dir", str(tmp_path / "o")]).model == "some/model"
    own.write_text("model: embedded\nlearning_rate: 1.0e-5\n")
    assert parse_config(own, []).model == "embedded"
    with pytest.raises(ValueError, match="model_name_or_path"):
        parse_config(None, ["--model", "a/b", "--model_name_or_path", "c/d"])


def test_heldout_evaluation_during_training(tmp_path):
    """eval_strategy=steps evaluates the held-out rows with TRL's evaluation (eval_* metrics),
    the reward getting the dataset's extra column there too."""
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "model")
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+1=", "answer": str(a + 1),
                                        "level": a}) + "\n" for a in range(8)))  # fmt: skip
    reward = tmp_path / "r.py"
    reward.write_text(
        "def level_reward(prompts, completions, level, **kwargs):\n"
        "    return [float(x) for x in level]\n"
    )
    out = tmp_path / "out"
    args = _args(model_dir, data, out, "--eval_strategy", "steps", "--eval_steps", "1",
                 "--max_steps", "2", "--per_device_eval_batch_size", "4",
                 "--rewards", f"{reward}:level_reward")  # fmt: skip
    assert train(parse_config(None, args), progress=False)["steps"] == 2
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval_reward" in r]
    assert [r["step"] for r in evals] == [1, 2]
    # each completion of a held-out row scores that row's level, whatever the model says:
    # eval_reward is the mean level of the 2 held-out rows (the first 2 after the seeded shuffle)
    from contrastive_rlvr.data import load_prompts

    held = load_prompts(data).dataset.shuffle(seed=0)["level"][:2]
    assert all(r["eval_reward"] == pytest.approx(sum(held) / 2) for r in evals), (evals, held)
