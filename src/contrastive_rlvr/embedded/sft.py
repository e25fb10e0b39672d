"""The SFT warm start of the embedded default: imitation of an imperfect demonstrator.

Why imperfect: RL needs groups whose rewards differ, so the warm-started
policy must be right often but not always. Stopping SFT early on clean data
gives such a policy too, but its errors are whatever the half-trained model
happens to do, and GRPO's gain from it was small and fragile. A demonstrator
that slips on a fixed share of answers (by +-1 or +-10, see
:func:`~contrastive_rlvr.embedded.task.noisy_solution`) gives a converged
policy that has *learned* to err at about that rate; RL with a checker can
then remove exactly the errors imitation taught. The slip is drawn afresh
each time a problem is sampled, so no train problem is tied to one wrong
answer.

A plain PyTorch loop (a probe on the 2-core CPU machine found it about 3x
faster than TRL's ``SFTTrainer`` for the same result): sequences
``<bos> prompt completion <eos>``, right-padded (no attention mask needed),
cross-entropy on the completion and ``<eos>`` only (prompt and padding
labels are ``IGNORE_INDEX``), mean over those tokens of the batch; AdamW,
linear warm-up then cosine decay to 0, gradient norm clipped.

Deterministic for a seed: batches and slips come from ``random.Random(seed)``;
the model has no dropout, so no torch RNG is used.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .task import noisy_solution, parse_prompt

# Label of positions without a loss (torch's cross_entropy default).
IGNORE_INDEX = -100


@dataclass(frozen=True)
class WarmStartConfig:
    """Settings of :func:`sft_warm_start`.

    Attributes:
        steps: optimiser steps.
        batch_size: sequences per step (problems drawn with replacement).
        lr: peak learning rate of AdamW.
        warmup_steps: linear warm-up from 0 to ``lr``; cosine to 0 after it.
        weight_decay: AdamW's decoupled weight decay.
        max_grad_norm: gradient norm clip.
        error_rate: share of demonstrations with one step's result wrong.
        seed: seed of the batch order and the slips.
    """

    steps: int = 800
    batch_size: int = 64
    lr: float = 5e-3
    warmup_steps: int = 40
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    error_rate: float = 0.4
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"WarmStartConfig.{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"WarmStartConfig.lr must be > 0, got {self.lr}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(
                f"WarmStartConfig.warmup_steps must be in [0, steps={self.steps}), "
                f"got {self.warmup_steps}"
            )
        if not 0.0 <= self.error_rate <= 1.0:
            raise ValueError(f"WarmStartConfig.error_rate must be in [0, 1], got {self.error_rate}")
        if self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError(
                "WarmStartConfig: need weight_decay >= 0 and max_grad_norm > 0, got "
                f"{self.weight_decay} and {self.max_grad_norm}"
            )


def lr_factor(step: int, *, steps: int, warmup_steps: int) -> float:
    """Multiplier of the peak lr at optimiser step ``step`` (0-based): ``(step + 1) / warmup``
    during warm-up, then ``0.5 * (1 + cos(pi * progress))`` with ``progress`` going
    from 0 at the first step after warm-up to 1 at step ``steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def collate(
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    completions: list[str],
    cache: dict[tuple[str, bool], list[int]] | None = None,
) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` and ``labels`` (B, T) of ``<bos> prompt completion <eos>``,
    labels only on ``completion <eos>`` (``IGNORE_INDEX`` elsewhere).

    The prompt is encoded with special tokens, as TRL encodes plain-text prompts
    for generation, so SFT and RL see the same prompt tokens. No attention mask
    is needed: padding only follows a row's real tokens, which the causal mask
    already hides it from, and padded positions carry no label. ``cache``
    memoises encodings (the task has few distinct strings; encoding them anew
    each step took about a third of the step time).
    """
    memo = {} if cache is None else cache

    def encode(text: str, special: bool) -> list[int]:
        if (text, special) not in memo:
            memo[text, special] = tokenizer(text, add_special_tokens=special)["input_ids"]
        return memo[text, special]

    rows, label_rows = [], []
    for prompt, completion in zip(prompts, completions, strict=True):
        p = encode(prompt, True)
        target = encode(completion, False) + [tokenizer.eos_token_id]
        rows.append(p + target)
        label_rows.append([IGNORE_INDEX] * len(p) + target)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)
    labels = torch.tensor(
        [r + [IGNORE_INDEX] * (width - len(r)) for r in label_rows], dtype=torch.long
    )
    return {"input_ids": input_ids, "labels": labels}


def completion_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled tokens of the batch."""
    logits = model(input_ids=batch["input_ids"]).logits  # (B, T, V)
    # Position t predicts token t + 1.
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1),
        batch["labels"][:, 1:].flatten(),
        ignore_index=IGNORE_INDEX,
    )


def sft_warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Dataset,
    config: WarmStartConfig | None = None,
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> PreTrainedModel:
    """Train ``model`` in place on noisy demonstrations of ``train``'s problems.

    Args:
        model: a causal LM (e.g. from :func:`~contrastive_rlvr.embedded.model.build_tiny_model`).
        tokenizer: its tokenizer (needs ``pad``, ``bos`` and ``eos`` tokens).
        train: a dataset with a ``prompt`` column of the arithmetic task.
        config: settings; defaults as :class:`WarmStartConfig`.
        on_step: called as ``on_step(step, loss)`` after every optimiser step
            (1-based step), e.g. to log or draw a progress bar.
    Returns:
        the same model, trained; its train/eval mode is restored.
    """
    cfg = config or WarmStartConfig()
    if "prompt" not in train.column_names:
        raise ValueError(f"sft_warm_start: dataset has no 'prompt' column: {train.column_names}")
    if len(train) == 0:
        raise ValueError("sft_warm_start: the train dataset is empty")
    problems = [parse_prompt(p) for p in train["prompt"]]
    rng = random.Random(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(step, steps=cfg.steps, warmup_steps=cfg.warmup_steps),
    )
    cache: dict[tuple[str, bool], list[int]] = {}
    was_training = model.training
    model.train()
    for step in range(1, cfg.steps + 1):
        picked = [problems[rng.randrange(len(problems))] for _ in range(cfg.batch_size)]
        batch = collate(
            tokenizer,
            [p.prompt for p in picked],
            [noisy_solution(p, rng, cfg.error_rate) for p in picked],
            cache,
        )
        loss = completion_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step, loss.item())
    model.train(was_training)
    return model
