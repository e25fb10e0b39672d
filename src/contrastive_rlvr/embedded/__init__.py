"""The embedded default: a tiny model, its tokenizer, an arithmetic task and an SFT warm start.

Everything is built locally (no download), so ``contrastive-rlvr train`` with
no arguments runs offline. :func:`build_embedded_default` returns a policy
that is right on about half of the held-out samples, ready for RL::

    model, tokenizer, train, heldout = build_embedded_default(seed=0)
    before = heldout_accuracy(model, tokenizer, heldout, n=4)
    # ... GRPOTrainer(model, reward_funcs=arithmetic_reward, train_dataset=train,
    #                 processing_class=tokenizer, ...)
    after = heldout_accuracy(model, tokenizer, heldout, n=4)

Pieces: :mod:`.tokenizer` (character level), :mod:`.model` (tiny Llama),
:mod:`.task` (chained sums with worked steps, reward, step checker),
:mod:`.sft` (noisy-demonstration warm start), :mod:`.evaluate` (avg@n).
The caller owns torch's thread count; nothing here changes it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from datasets import Dataset
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from .evaluate import heldout_accuracy, heldout_correctness, max_completion_tokens
from .model import DEFAULT_MAX_POSITIONS, build_tiny_model
from .sft import WarmStartConfig, sft_warm_start
from .task import TaskConfig, arithmetic_reward, make_datasets
from .tokenizer import bicc_phrases, build_char_tokenizer, load_char_tokenizer

#: File holding the settings in ``output_dir``.
SETTINGS_FILE = "embedded_settings.json"


@dataclass(frozen=True)
class ModelShape:
    """Size of the tiny Llama (see :func:`~.model.build_tiny_model`)."""

    hidden: int = 64
    layers: int = 2
    heads: int = 4
    mlp: int = 256
    max_positions: int = DEFAULT_MAX_POSITIONS


@dataclass(frozen=True)
class EmbeddedSettings:
    """Everything :func:`build_embedded_default` builds from.

    Attributes:
        seed: seed of the model's initial weights and of the SFT run.
        task: the task and its split; its own seed (0) keeps the held-out set
            the same across run seeds, so runs with different seeds compare
            on the same problems.
        model: the model's size.
        sft: the warm start; :func:`build_embedded_default` runs it with
            ``seed`` above in place of its own.
        bicc_phrases: give the default BiCC template's framing pieces one
            token each (:func:`~.tokenizer.bicc_phrases`), so that BiCC's
            context budget goes to the attempts rather than to the framing
            text; off: one token per character everywhere.
    """

    seed: int = 0
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelShape = field(default_factory=ModelShape)
    sft: WarmStartConfig = field(default_factory=WarmStartConfig)
    bicc_phrases: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class EmbeddedDefault(NamedTuple):
    """What :func:`build_embedded_default` returns (unpacks as a 4-tuple)."""

    model: LlamaForCausalLM
    tokenizer: PreTrainedTokenizerFast
    train: Dataset
    heldout: Dataset


def build_embedded_default(
    output_dir: str | Path | None = None,
    *,
    seed: int | None = None,
    sft_steps: int | None = None,
    settings: EmbeddedSettings | None = None,
    on_sft_step: Callable[[int, float], None] | None = None,
) -> EmbeddedDefault:
    """Tokenizer, tiny model, task datasets and SFT warm start, all offline.

    Args:
        output_dir: if given, the warm-started model and tokenizer are saved
            there (``save_pretrained``; reload the tokenizer with
            :func:`load_char_tokenizer`), with ``embedded_settings.json`` and
            the two splits as ``train.jsonl`` and ``heldout.jsonl``.
        seed: shortcut overriding ``settings.seed``.
        sft_steps: shortcut overriding ``settings.sft.steps`` (0 skips SFT).
        settings: the rest; defaults as :class:`EmbeddedSettings`.
        on_sft_step: called as ``on_sft_step(step, loss)`` after each SFT step.
    Returns:
        ``(model, tokenizer, train, heldout)``: datasets with columns
        ``prompt``, ``answer``, ``solution``; train and held-out problems are
        disjoint and SFT only sees train problems.
    """
    s = settings or EmbeddedSettings()
    if seed is not None:
        s = dataclasses.replace(s, seed=seed)
    # One run seed: the saved settings show the SFT seed actually used.
    s = dataclasses.replace(s, sft=dataclasses.replace(s.sft, seed=s.seed))
    if sft_steps is not None:
        if sft_steps < 0:
            raise ValueError(f"sft_steps must be >= 0, got {sft_steps}")
        if sft_steps > 0:
            warmup = min(s.sft.warmup_steps, sft_steps - 1)
            s = dataclasses.replace(
                s, sft=dataclasses.replace(s.sft, steps=sft_steps, warmup_steps=warmup)
            )
    tokenizer = build_char_tokenizer(bicc_phrases() if s.bicc_phrases else ())
    model = build_tiny_model(tokenizer, seed=s.seed, **dataclasses.asdict(s.model))
    train, heldout = make_datasets(s.task)
    if sft_steps != 0:
        sft_warm_start(model, tokenizer, train, s.sft, on_step=on_sft_step)
    if output_dir is not None:
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record = {**s.to_dict(), "sft_steps_run": 0 if sft_steps == 0 else s.sft.steps}
        (out / SETTINGS_FILE).write_text(json.dumps(record, indent=2) + "\n")
        train.to_json(out / "train.jsonl")
        heldout.to_json(out / "heldout.jsonl")
    return EmbeddedDefault(model, tokenizer, train, heldout)


__all__ = [
    "EmbeddedDefault",
    "EmbeddedSettings",
    "ModelShape",
    "TaskConfig",
    "WarmStartConfig",
    "arithmetic_reward",
    "build_char_tokenizer",
    "build_embedded_default",
    "build_tiny_model",
    "heldout_accuracy",
    "heldout_correctness",
    "load_char_tokenizer",
    "make_datasets",
    "max_completion_tokens",
]
