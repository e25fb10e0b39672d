"""The eval generation cache is keyed by the weights' content: new weights saved under the
same path are sampled again, even when the file keeps its size and modification time."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer
from contrastive_rlvr.evaluation import EvalConfig, evaluate
from contrastive_rlvr.evaluation.cache import file_sha256, weights_fingerprint
from contrastive_rlvr.evaluation.suites import PACKAGED_DIR
from contrastive_rlvr.generation import HFGenerator


def save_model(path: Path, seed: int) -> Path:
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(
        tokenizer, hidden=32, layers=2, heads=2, mlp=64, max_positions=1024, seed=seed
    )
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def completions(out: Path) -> list[str]:
    lines = (out / "samples" / "gsm8k.jsonl").read_text().splitlines()
    return [json.loads(line)["completion"] for line in lines]


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = HFGenerator.generate

    def generate(self, prompts, seed):
        calls.append(len(prompts))
        return real(self, prompts, seed)

    monkeypatch.setattr(HFGenerator, "generate", generate)
    return calls


def test_swapped_weights_are_evaluated_again(tmp_path, counted):
    data_dir = PACKAGED_DIR  # gsm8k ships with the package
    model_dir = save_model(tmp_path / "model", seed=0)
    weights = model_dir / "model.safetensors"

    def config(model: Path, out: Path) -> EvalConfig:
        return EvalConfig(
            model=str(model), benchmarks=["gsm8k"], n=2, limit=2, max_new_tokens=8,
            temperature=1.0, output_dir=str(out), benchmarks_dir=str(data_dir),
            reward_workers=1, progress=False,
        )  # fmt: skip

    out = tmp_path / "eval"
    evaluate(config(model_dir, out))
    first = completions(out)
    assert sum(counted) == 4  # 2 problems x 2 seeds

    # Retrain into the same path: other weights, same size; the old mtime put back, as
    # `cp -p` or an rsync of another run would leave it.
    stat = weights.stat()
    save_model(tmp_path / "other", seed=1)
    weights.write_bytes((tmp_path / "other" / "model.safetensors").read_bytes())
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (weights.stat().st_size, weights.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    counted.clear()
    evaluate(config(model_dir, out))
    assert sum(counted) == 4, "the new weights must be sampled, not read from the cache"
    swapped = completions(out)
    assert swapped != first
    # ... and they are exactly what the new weights give in a clean output folder
    evaluate(config(tmp_path / "other", tmp_path / "clean"))
    assert completions(tmp_path / "clean") == swapped
    assert len(list((out / "generations").glob("gsm8k-*.jsonl"))) == 2

    # The first weights back: their samples come from the cache, unchanged.
    save_model(model_dir, seed=0)
    counted.clear()
    evaluate(config(model_dir, out))
    assert counted == [] and completions(out) == first


def test_sampling_settings_are_part_of_the_key():
    cfg = EvalConfig(model="m")
    base = cfg.generation_setting("hf", "w1")
    assert cfg.generation_setting("hf", "w2") != base
    for field, value in (
        ("temperature", 0.7),
        ("top_p", 0.5),
        ("max_new_tokens", 5),
        ("batch_size", 3),
        ("instruction", "x"),
        ("chat_template", False),
    ):
        other = EvalConfig(model="m", **{field: value})
        assert other.generation_setting("hf", "w1") != base, field  # fmt: skip
    assert cfg.generation_setting("vllm", "w1") != base


def test_file_hash_is_cached_by_path_size_times_and_inode(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc")
    index: dict[str, str] = {}
    # sha256("abc")
    expected = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    assert file_sha256(f, index) == expected
    (key,) = index
    index[key] = "remembered"  # a cached hash is used while the file is unchanged
    assert file_sha256(f, index) == "remembered"
    f.write_bytes(b"abd")  # same size; the status-change time moves
    assert file_sha256(f, index) != "remembered"


def test_fingerprint_covers_every_file_of_the_directory(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"1")
    (d / "config.json").write_text("{}")
    index = tmp_path / "hashes.json"
    a = weights_fingerprint(str(d), index)
    assert weights_fingerprint(str(d), index) == a and index.exists()
    (d / "config.json").write_text('{"x": 1}')
    assert weights_fingerprint(str(d), index) != a
    assert weights_fingerprint(str(tmp_path / "missing")) is None
