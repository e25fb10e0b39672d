"""TRL's own GRPO script (``trl/scripts/grpo.py`` of the pinned TRL) runs on this project
with only the class names swapped: ``GRPOConfig`` -> ``RLVRConfig``, ``GRPOTrainer`` ->
``RLVRTrainer``. Its parser is ``TrlParser((GRPOScriptArguments, GRPOConfig, ModelConfig,
DatasetMixtureConfig))``; ``RLVRConfig`` carries ScriptArguments' dataset fields and
ModelConfig's fields itself, so each shared option is one option whose value reaches every
dataclass that has the field (:mod:`contrastive_rlvr.trainer.trl_script_layout`)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest
import trl.scripts.grpo as trl_grpo_script
from trl import DatasetMixtureConfig, ModelConfig, ScriptArguments, TrlParser

from contrastive_rlvr import RLVRConfig

#: The two import lines of TRL's script that name the swapped classes, and their swaps
#: (the classes come from this package; every other name stays TRL's).
SWAPS = {
    "    from trl import GRPOTrainer, get_dataset, get_peft_config, get_quantization_config\n": (
        "    from contrastive_rlvr import RLVRTrainer\n"
        "    from trl import get_dataset, get_peft_config, get_quantization_config\n"
    ),
    "    from trl import DatasetMixtureConfig, GRPOConfig, ModelConfig, TrlParser\n": (
        "    from contrastive_rlvr import RLVRConfig\n"
        "    from trl import DatasetMixtureConfig, ModelConfig, TrlParser\n"
    ),
}


def swapped_script(tmp_path: Path) -> Path:
    """TRL's GRPO script text with only the class names swapped, written to tmp_path."""
    text = Path(trl_grpo_script.__file__).read_text()
    for old, new in SWAPS.items():
        assert text.count(old) == 1, f"TRL's script changed: {old.strip()!r}"
        text = text.replace(old, new)
    text = text.replace("GRPOTrainer(", "RLVRTrainer(").replace("GRPOConfig,", "RLVRConfig,")
    assert "GRPOTrainer" not in text and "GRPOConfig" not in text
    path = tmp_path / "grpo_swapped.py"
    path.write_text(text)
    return path


def test_trl_three_class_layout_parses_with_shared_fields_given_to_each():
    parser = TrlParser((ScriptArguments, RLVRConfig, ModelConfig))
    script, config, model = parser.parse_args_and_config([
        "--output_dir", "unused-out", "--dataset_name", "my/data",
        "--model_name_or_path", "tiny-random", "--lora_r", "4",
        "--bicc", "true", "--max_steps", "3",
    ])  # fmt: skip
    # the shared options reach every dataclass that has them
    assert script.dataset_name == config.dataset_name == "my/data"
    assert model.model_name_or_path == config.model_name_or_path == "tiny-random"
    assert model.lora_r == config.lora_r == 4
    # the project's own fields reach RLVRConfig, TRL's GRPOConfig fields too
    assert config.bicc is True and config.max_steps == 3
    assert config.model == "tiny-random" and config.dataset == "my/data"
    # a shared field nobody set keeps its default everywhere
    assert script.dataset_train_split == config.dataset_train_split == "train"


def test_a_yaml_value_of_a_shared_field_reaches_each_dataclass(tmp_path):
    yaml = tmp_path / "c.yaml"
    yaml.write_text("model_name_or_path: tiny-random\ndataset_name: d\nlora_alpha: 8\n")
    parser = TrlParser((ScriptArguments, RLVRConfig, ModelConfig, DatasetMixtureConfig))
    script, config, model, _mix = parser.parse_args_and_config(
        ["--config", str(yaml), "--output_dir", str(tmp_path / "o")]
    )
    assert model.lora_alpha == config.lora_alpha == 8
    assert script.dataset_name == config.dataset == "d"


def test_a_parser_without_rlvrconfig_is_transformers_own():
    # Two TRL dataclasses sharing nothing with RLVRConfig parse as before; a clash among
    # dataclasses that are not RLVRConfig is still argparse's error.
    with pytest.raises(Exception, match="conflicting option string"):
        TrlParser((ScriptArguments, ScriptArguments))


def test_trls_own_grpo_script_trains_with_only_the_class_names_swapped(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(4) for b in range(4)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "coin_reward.py").write_text(
        "def coin(prompts, completions, **kwargs):\n"
        "    return [float(i % 2) for i, _ in enumerate(completions)]\n"
    )
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)  # the script imports a dotted reward from the working dir
    monkeypatch.setattr(sys, "argv", [
        "grpo.py", "--model_name_or_path", "tiny-random", "--dataset_name", str(data),
        "--reward_funcs", "coin_reward.coin", "--output_dir", str(out), "--max_steps", "1",
        "--num_generations", "4", "--per_device_train_batch_size", "8",
        "--max_completion_length", "4", "--report_to", "none", "--save_strategy", "no",
        "--bicc", "true", "--learning_rate", "0.01",
    ])  # fmt: skip
    runpy.run_path(str(swapped_script(tmp_path)), run_name="__main__")
    assert (out / "model.safetensors").is_file()
    assert json.loads((out / "config.json").read_text())["model_type"] == "llama"
    # the project's log of the run (RLVRTrainer's callbacks): one step, BiCC applied to
    # every row (the coin reward makes each group of 4 half right)
    (line,) = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["step"] == 1 and line["rewards/coin/mean"] == 0.5
    assert line["bicc/conditioned_frac"] == 1.0
