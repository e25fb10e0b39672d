"""The shipped base configurations: which one a model gets, and that paper.yaml holds
the BiCC paper's Table 4 values with BiCC and RCC off."""

import pytest
import yaml

from contrastive_rlvr.configs import base_config_for, config_path, model_in_args
from contrastive_rlvr.trainer.parse import load_yaml, parse_config


def test_base_config_follows_the_model():
    assert base_config_for("embedded").name == "embedded.yaml"
    assert base_config_for(None).name == "embedded.yaml"  # no --model: the embedded default
    for model in ("smollm2-135m", "Qwen/Qwen3-4B-Instruct-2507", "/m/x.gguf", "./ckpt"):
        assert base_config_for(model).name == "paper.yaml"
    with pytest.raises(ValueError, match="no shipped configuration 'nope.yaml'"):
        config_path("nope.yaml")


def test_model_in_args():
    assert model_in_args(["--lr", "1", "--model", "smollm2-135m"]) == "smollm2-135m"
    assert model_in_args(["--model=a", "--model", "b"]) == "b"  # the last wins
    assert model_in_args(["--bicc", "true"]) is None
    with pytest.raises(ValueError, match="--model needs a value"):
        model_in_args(["--model"])


def test_paper_yaml_is_table_4_with_bicc_and_rcc_off():
    raw = yaml.safe_load(config_path("paper.yaml").read_text())
    load_yaml(config_path("paper.yaml"))  # every key is an RLVRConfig field
    assert "model" not in raw  # the model comes from --model
    config = parse_config(config_path("paper.yaml"), ["--model", "smollm2-135m"])
    # Table 4: AdamW lr 1e-6, betas (0.9, 0.999), weight decay 0.01, clipping 1.0,
    # cosine schedule with 100 warm-up steps of 3000 (here a ratio, 0.0333 of the run);
    # G = 8; context ratio 0.4 (Table 3).
    assert config.learning_rate == 1e-6
    assert (config.adam_beta1, config.adam_beta2) == (0.9, 0.999)
    assert config.weight_decay == 0.01 and config.max_grad_norm == 1.0
    assert str(config.lr_scheduler_type.value) == "cosine"
    # The 100 warm-up steps as a share of the run: 100 at 3000 steps, 1 at 20.
    assert config.max_steps == 3000 and config.get_warmup_steps(3000) == 100
    assert config.get_warmup_steps(20) == 1
    assert config.num_generations == 8 and config.bicc_context_ratio == 0.4
    assert not config.bicc and not config.rcc
    assert config.model == "smollm2-135m"
    # Switched on only when asked.
    on = parse_config(config_path("paper.yaml"), ["--model", "m", "--bicc", "true"])
    assert on.bicc and not on.rcc
