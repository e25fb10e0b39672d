"""One training run end to end: model and data, held-out accuracy before, RL, accuracy after."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import AutoModelForCausalLM
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from transformers.trainer_utils import get_last_checkpoint

from .callbacks import MetricsJsonl, RichProgress
from .config import RLVRConfig
from .diagnostics import diagnostics_callback
from .rlvr_trainer import RLVRTrainer

logger = logging.getLogger(__name__)

SFT_DIR = "sft-model"
SUMMARY_FILE = "summary.json"


def save_resolved_config(config: RLVRConfig, path: Path) -> None:
    """Write every field of the resolved config as YAML (TrainingArguments.to_dict
    turns enums into their values and hides tokens)."""
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=True))


def _embedded(config: RLVRConfig, out: Path) -> dict[str, Any]:
    """The embedded default's model (warm-started once, then reused), task and reward."""
    from ..embedded import (
        EmbeddedSettings,
        TaskConfig,
        arithmetic_reward,
        build_embedded_default,
        heldout_accuracy,
        load_char_tokenizer,
        make_datasets,
    )

    task = TaskConfig(terms=config.embedded_terms)
    sft_dir = out / SFT_DIR
    if not (sft_dir / "config.json").exists():
        settings = EmbeddedSettings(seed=config.seed, task=task)
        build_embedded_default(sft_dir, settings=settings, sft_steps=config.embedded_sft_steps)
    tokenizer = load_char_tokenizer(sft_dir)
    model = AutoModelForCausalLM.from_pretrained(sft_dir)
    train, heldout = make_datasets(task)
    if config.eval_limit is not None:
        heldout = heldout.select(range(min(config.eval_limit, len(heldout))))

    def evaluate(m) -> float:
        return heldout_accuracy(m, tokenizer, heldout, n=config.eval_n, seed=config.seed)

    return dict(
        model=model,
        tokenizer=tokenizer,
        train=train,
        rewards=[arithmetic_reward],
        evaluate=evaluate,
    )


def _custom(config: RLVRConfig) -> dict[str, Any]:
    """A Hugging Face (or GGUF-alias) model on a prompt dataset with the configured rewards;
    held-out avg@n on ``heldout_size`` seeded rows of the dataset kept out of training."""
    from ..algorithms import avg_at_n
    from ..data import load_prompts
    from ..evaluation.generate import DEFAULT_INSTRUCTION, HFGenerator, build_prompt
    from ..models import load_model_and_tokenizer
    from ..rewards import resolve_reward

    if config.dataset is None:
        raise ValueError(
            f"dataset=None is invalid: model={config.model!r} needs a prompt dataset (a "
            ".jsonl/.parquet file or a Hugging Face dataset name); only model='embedded' "
            "brings its own task"
        )
    model, tokenizer = load_model_and_tokenizer(config.model)
    model.train()
    loaded = load_prompts(config.dataset, skip_bad_rows=config.skip_bad_rows)
    if loaded.skipped:
        logger.warning("%s: skipped %d malformed rows", loaded.source, loaded.skipped)
    data = loaded.dataset.shuffle(seed=config.seed)
    if len(data) <= config.heldout_size:
        raise ValueError(
            f"heldout_size={config.heldout_size} leaves no training rows in {config.dataset} "
            f"({len(data)} rows)"
        )
    chat = config.chat_template and getattr(tokenizer, "chat_template", None) is not None

    def as_prompt(problem: str):
        content = f"{problem}\n{DEFAULT_INSTRUCTION}"
        return [{"role": "user", "content": content}] if chat else f"{content}\n"

    data = data.map(lambda row: {"prompt": as_prompt(row["prompt"])})
    heldout = data.select(range(config.heldout_size))
    if config.eval_limit is not None:
        heldout = heldout.select(range(min(config.eval_limit, len(heldout))))
    train = data.select(range(config.heldout_size, len(data)))
    rewards = [resolve_reward(name) for name in config.rewards]

    def evaluate(m) -> float:
        gen = HFGenerator(
            m,
            tokenizer,
            max_new_tokens=config.max_completion_length,
            temperature=config.temperature,
            top_p=config.top_p,
            batch_size=config.per_device_train_batch_size,
            chat=chat,
        )
        texts = [
            build_prompt(tokenizer, p[0]["content"] if chat else p.rstrip("\n"), "", chat)
            for p in heldout["prompt"]
        ]
        samples = [gen.generate(texts, seed=config.seed + k) for k in range(config.eval_n)]
        correct = []
        for i, answer in enumerate(heldout["answer"]):
            completions = [samples[k][i] for k in range(config.eval_n)]
            scores = rewards[0](
                [texts[i]] * config.eval_n, completions, answer=[answer] * config.eval_n
            )
            correct.append([s > config.reward_threshold for s in scores])
        return avg_at_n(correct)

    return dict(model=model, tokenizer=tokenizer, train=train, rewards=rewards, evaluate=evaluate)


def load_run_inputs(config: RLVRConfig, out: Path) -> dict[str, Any]:
    """Model, tokenizer, train dataset, reward functions and held-out evaluator of a run."""
    if config.model == "embedded":
        return _embedded(config, out)
    return _custom(config)


def train(
    config: RLVRConfig, *, extra_callbacks: list | None = None, progress: bool = True
) -> dict:
    """Run one training job as ``config`` says and return its summary.

    Writes to ``config.output_dir``: ``config.yaml`` (resolved), checkpoints,
    ``metrics.jsonl`` and ``summary.json`` (held-out avg@n before and after RL).
    """
    torch.set_num_threads(config.torch_threads)
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    resume = None
    if config.resume:
        resume = get_last_checkpoint(str(out)) if out.exists() else None
        if resume is None:
            raise ValueError(
                f"resume=True but {out} holds no checkpoint-* directory to resume from"
            )
    save_resolved_config(config, out / "config.yaml")
    logger.info("base configuration: %s", config.base_config or "none (built in code)")
    parts = load_run_inputs(config, out)
    started = time.perf_counter()
    before = parts["evaluate"](parts["model"])
    trainer = RLVRTrainer(
        model=parts["model"],
        reward_funcs=parts["rewards"],
        args=config,
        train_dataset=parts["train"],
        processing_class=parts["tokenizer"],
        callbacks=[MetricsJsonl(out), *(extra_callbacks or [])],
    )
    diagnostics = diagnostics_callback(trainer, out)
    if diagnostics is not None:
        trainer.add_callback(diagnostics)
    # The rich bar replaces HF's tqdm bar and its printing of every log dict.
    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if progress:
        trainer.add_callback(RichProgress())
    trainer.train(resume_from_checkpoint=resume)
    after = parts["evaluate"](trainer.model)
    summary = {
        "recipe": config.recipe,
        "bicc": config.bicc,
        "rcc": config.rcc,
        "seed": config.seed,
        "steps": trainer.state.global_step,
        "heldout_avg@n_before": before,
        "heldout_avg@n_after": after,
        "eval_n": config.eval_n,
        "nonfinite_losses": trainer.nonfinite_losses,
        "skipped_updates": trainer.skipped_updates,
        "wall_seconds": time.perf_counter() - started,
    }
    if trainer.accelerator.is_main_process:
        (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary
