"""A model that cannot be trained is one line, before it loads where its files tell (no
weights, truncated weights), else right after (NaN weights, an init option it does not
take); the options that load it reach the load (``trust_remote_code``); a converted GGUF
file is found by its content, never by name, size and mtime."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from cli_utils import cli, one_line
from safetensors.torch import load_file, save_file
from trainer_utils import forbid_model_loading, tiny_model_and_data

from contrastive_rlvr import models
from contrastive_rlvr.models import load_model_and_tokenizer
from contrastive_rlvr.trainer.model_options import model_load_kwargs
from contrastive_rlvr.trainer.parse import parse_config


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tiny_model_and_data(tmp_path_factory.mktemp("models"))


def _train(root: Path, model: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--model", str(model), "--dataset", str(root / "d.jsonl"),
            "--rewards", "format", "--heldout_size", "1", "--num_generations", "2",
            "--per_device_train_batch_size", "2", "--max_completion_length", "4",
            "--max_steps", "1", "--output_dir", str(out), *extra]  # fmt: skip


@pytest.fixture
def guarded(monkeypatch):
    forbid_model_loading(monkeypatch, "a model was loaded before its files were checked")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("remove", "model weights are missing"),
        ("truncate", "model.safetensors is truncated"),
    ],
)
def test_missing_or_truncated_weights_are_one_line_before_loading(
    root, tmp_path, guarded, damage, message
):
    model = tmp_path / "model"
    shutil.copytree(root / "model", model)
    weights = model / "model.safetensors"
    if damage == "remove":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[:64])  # a copy cut short
    one_line(cli(_train(root, model, tmp_path / "o")), 2, message)


def test_nan_weights_are_one_line_naming_the_tensor(root, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(root / "model", model)
    tensors = load_file(model / "model.safetensors")
    name = sorted(tensors)[0]
    tensors[name].view(-1)[:3] = torch.tensor([float("nan"), float("inf"), 0.5])
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    result = cli(_train(root, model, tmp_path / "o"))
    one_line(result, 2, f"its weight {name} holds 2 NaN or infinite value(s)")


def test_an_unknown_model_init_kwarg_is_one_line(root, tmp_path):
    args = _train(root, root / "model", tmp_path / "o", "--model_init_kwargs", '{"junk": 1}')
    one_line(cli(args), 2, "model_init_kwargs: 'junk' is neither an option of from_pretrained")


CONFIG_CODE = """from transformers import LlamaConfig


class MarkedConfig(LlamaConfig):
    model_type = "llama"
"""
MODEL_CODE = """from transformers import LlamaForCausalLM

from .configuration_marked import MarkedConfig


class MarkedLlama(LlamaForCausalLM):
    config_class = MarkedConfig
"""


def test_trust_remote_code_reaches_the_model_load(root, tmp_path):
    # A checkpoint that ships its own model class (auto_map); its model_type is one
    # transformers knows, so without trust_remote_code the built-in class loads instead.
    model = tmp_path / "marked"
    shutil.copytree(root / "model", model)
    (model / "configuration_marked.py").write_text(CONFIG_CODE)
    (model / "modeling_marked.py").write_text(MODEL_CODE)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_marked.MarkedConfig",
                          "AutoModelForCausalLM": "modeling_marked.MarkedLlama"}  # fmt: skip
    (model / "config.json").write_text(json.dumps(config))
    base = ["--model", str(model), "--output_dir", str(tmp_path / "o")]
    trusted = parse_config(None, [*base, "--trust_remote_code", "true"])
    loaded, _ = load_model_and_tokenizer(trusted.model, **model_load_kwargs(trusted))
    assert type(loaded).__name__ == "MarkedLlama"  # the checkpoint's own code ran
    untrusted = parse_config(None, base)
    loaded, _ = load_model_and_tokenizer(untrusted.model, **model_load_kwargs(untrusted))
    assert type(loaded).__name__ == "LlamaForCausalLM"


@pytest.fixture
def fake_gguf(root, monkeypatch):
    """transformers' GGUF reading stood in by the tiny model, with its first weight set to
    the GGUF file's first byte: which file a converted model came from is read back."""
    import transformers

    real_model = transformers.AutoModelForCausalLM.from_pretrained
    real_tok = transformers.AutoTokenizer.from_pretrained
    reads = []

    def model_loader(source, *args, gguf_file=None, **kwargs):
        if gguf_file is None:
            return real_model(source, *args, **kwargs)
        first = (Path(source) / gguf_file).read_bytes()[0]
        reads.append(first)
        model = real_model(root / "model", **kwargs)
        with torch.no_grad():
            model.lm_head.weight[0, 0] = float(first)
        return model

    def tok_loader(source, *args, gguf_file=None, **kwargs):
        return real_tok(root / "model" if gguf_file else source, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_loader)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_loader)
    return reads


def test_two_gguf_files_of_one_name_size_and_mtime_get_their_own_weights(
    tmp_path, monkeypatch, fake_gguf
):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    first, second = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for path, byte in ((first, 1), (second, 2)):
        path.parent.mkdir()
        path.write_bytes(bytes([byte]) + b"\0" * 99)
        os.utime(path, ns=(10**18, 10**18))
    model, _ = load_model_and_tokenizer(str(first))
    assert model.lm_head.weight[0, 0].item() == 1.0
    model, _ = load_model_and_tokenizer(str(second))
    assert model.lm_head.weight[0, 0].item() == 2.0  # was 1.0: the first file's conversion
    assert fake_gguf == [1, 2]
    model, _ = load_model_and_tokenizer(str(first))  # the same bytes again: from the cache
    assert model.lm_head.weight[0, 0].item() == 1.0 and fake_gguf == [1, 2]
