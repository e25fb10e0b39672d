"""Shared set-up for the trainer tests: a tiny saved model, a prompt set, a reward
that gives mixed groups whatever the model says, and a config factory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datasets import Dataset
from transformers import AutoModelForCausalLM

from contrastive_rlvr.embedded import build_char_tokenizer, build_tiny_model, load_char_tokenizer
from contrastive_rlvr.trainer import RLVRConfig, RLVRTrainer

GROUP = 4
PROMPTS = 2  # per step


def save_tiny_model(path: Path) -> Path:
    """A randomly initialised tiny Llama and its tokenizer saved to ``path``."""
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed=0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_model_and_data(root: Path) -> Path:
    """``root/model`` (:func:`save_tiny_model`) and ``root/d.jsonl``: 8 rows ``i+i=``
    with their answers, the smallest custom run's inputs; returns ``root``."""
    save_tiny_model(root / "model")
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(8)]
    (root / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def forbid_model_loading(monkeypatch: Any, why: str) -> None:
    """Make any model load fail the test with ``why``: the input checks under test must
    refuse before a model is loaded."""
    import contrastive_rlvr.models as models
    import contrastive_rlvr.run.command as run_module

    def no_model(*a, **k):
        raise AssertionError(why)

    monkeypatch.setattr(run_module, "load_run_inputs", no_model)
    monkeypatch.setattr(models, "load_model_and_tokenizer", no_model)


def prompt_dataset(n: int = 16) -> Dataset:
    """``n`` distinct prompts ``i+(i+3)+(i+5)=``."""
    prompts = [f"{i}+{i + 3}+{i + 5}=" for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "answer": ["1"] * n})


def token_parity_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """1 when the completion's token ids sum to an even number: a coin flip under a
    random model, so groups are mixed and every method has a gradient."""
    return [float(sum(ids) % 2 == 0) for ids in completion_ids]


def make_config(tmp_path: Path, **overrides) -> RLVRConfig:
    values = dict(
        output_dir=str(tmp_path / "out"),
        model="unused",
        num_generations=GROUP,
        per_device_train_batch_size=GROUP * PROMPTS,
        max_completion_length=8,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        gradient_checkpointing=False,
        disable_tqdm=True,
        beta=0.0,
        temperature=1.0,
        # BiCC's budget as a share of the run's own length (prompt + 8 tokens) cannot hold
        # the framing text in characters; a share of 256 positions, as embedded.yaml sets.
        bicc_max_seq_len=256,
    )
    values.update(overrides)
    return RLVRConfig(**values)


def make_trainer(
    model_dir: Path, config: RLVRConfig, reward=token_parity_reward, trainer_cls=RLVRTrainer
) -> RLVRTrainer:
    return trainer_cls(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[reward],
        args=config,
        train_dataset=prompt_dataset(),
        processing_class=load_char_tokenizer(model_dir),
    )


def _tiny_run_args(tmp_path: Path) -> list[str]:
    """A one-step `train` command line on the tiny saved model, a 24-row problem file and a
    coin-flip reward file, all written under ``tmp_path``."""
    import json

    model_dir = save_tiny_model(tmp_path / "model")
    data = tmp_path / "train.jsonl"
    rows = [{"problem": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "coin_reward.py"
    reward.write_text(
        "def coin(prompts, completions, **kwargs):\n"
        "    return [float(i % 2) for i, _ in enumerate(completions)]\n"
    )
    return [
        "--model", str(model_dir), "--dataset", str(data), "--output_dir", str(tmp_path / "out"),
        "--heldout_size", "4", "--eval_n", "1", "--max_steps", "1", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--learning_rate", "0.01", "--warmup_steps", "0", "--save_strategy", "no",
        # mixed groups whatever the model says, so the one step changes the weights
        "--rewards", f"{reward}:coin",
    ]  # fmt: skip
