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

Reading warm start (``context_frac > 0``): BiCC scores each completion after
the group's opposite attempts, a context the plain warm start never shows, so
for the tiny model those conditioned prompts are out of distribution. With
``context_frac`` a share of the demonstrations is shown after such a context,
laid out token for token as BiCC lays it out
(:func:`~contrastive_rlvr.algorithms.bicc.build_context` with the default
:class:`~contrastive_rlvr.algorithms.BiCCTemplate`), and the demonstrator
*reads* it: after correct attempts it writes the reference chain (the answer
is in the context); after wrong attempts it slips as usual but never repeats
a shown wrong answer. Half of the context examples show correct attempts,
half wrong ones, 1 to ``context_max_attempts`` of them.

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

from ..algorithms.bicc import BiCCTemplate, EncodedTemplate, build_context
from .task import Problem, chain_answer, noisy_solution, parse_prompt

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
        context_frac: share of demonstrations shown after a BiCC context of
            opposite attempts that the demonstrator reads (module docstring);
            0 is the plain warm start.
        context_max_attempts: most attempts in such a context (BiCC shows at
            most G - 1: 7 for the embedded default's G = 8).
    """

    steps: int = 800
    batch_size: int = 64
    lr: float = 5e-3
    warmup_steps: int = 40
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    error_rate: float = 0.4
    seed: int = 0
    context_frac: float = 0.0
    context_max_attempts: int = 7

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
        if not 0.0 <= self.context_frac <= 1.0:
            raise ValueError(
                f"WarmStartConfig.context_frac must be in [0, 1], got {self.context_frac}"
            )
        if self.context_max_attempts < 1:
            raise ValueError(
                "WarmStartConfig.context_max_attempts must be >= 1, got "
                f"{self.context_max_attempts}"
            )
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
    prompts: list[str | list[int]],
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
    each step took about a third of the step time). A prompt given as a list
    of token ids (a conditioned prompt, :func:`context_prompt`) is used as is.
    """
    memo = {} if cache is None else cache

    def encode(text: str, special: bool) -> list[int]:
        if (text, special) not in memo:
            memo[text, special] = tokenizer(text, add_special_tokens=special)["input_ids"]
        return memo[text, special]

    rows, label_rows = [], []
    for prompt, completion in zip(prompts, completions, strict=True):
        p = list(prompt) if isinstance(prompt, list) else encode(prompt, True)
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


def context_demonstration(
    problem: Problem, rng: random.Random, error_rate: float, max_attempts: int
) -> tuple[list[str], bool, str]:
    """One reading example: ``(attempts, attempts_correct, target)``.

    With probability 1/2 the attempts are 1..``max_attempts`` copies of the
    reference chain and the target is the reference chain. Otherwise they are
    1..``max_attempts`` wrong chains (distinct while the task has that many
    slips, drawn as the plain demonstrator's) and the target is a plain noisy
    demonstration redrawn until its answer is none of the attempts' answers
    (the reference chain if 20 draws all repeat one).
    """
    count = rng.randint(1, max_attempts)
    if rng.random() < 0.5:
        return [problem.solution] * count, True, problem.solution
    wrong: list[str] = []
    for _ in range(8 * count):  # distinct slips first; a 3-term sum has at most 4
        chain = noisy_solution(problem, rng, 1.0)
        if chain not in wrong:
            wrong.append(chain)
        if len(wrong) == count:
            break
    while len(wrong) < count:
        wrong.append(wrong[rng.randrange(len(wrong))])
    shown = {chain_answer(c) for c in wrong}
    for _ in range(20):
        target = noisy_solution(problem, rng, error_rate)
        if chain_answer(target) not in shown:
            return wrong, False, target
    return wrong, False, problem.solution


def encode_template(tokenizer: PreTrainedTokenizerBase, max_items: int) -> EncodedTemplate:
    """The default BiCC framing as the trainer encodes it (no special tokens)."""
    return BiCCTemplate().encode(
        lambda text: tokenizer(text, add_special_tokens=False)["input_ids"], max_items=max_items
    )


def context_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    attempts: list[str],
    attempts_correct: bool,
    encoded: EncodedTemplate | None = None,
) -> list[int]:
    """Token ids of ``prompt`` followed by BiCC's context of ``attempts``, exactly as
    :func:`~contrastive_rlvr.algorithms.build_bicc_prompts` lays out a conditioned
    prompt (``after_prompt`` placement, no truncation: the task's chains are short).
    ``encoded``: the framing as ids (default: the default template, encoded here)."""
    if encoded is None:
        encoded = encode_template(tokenizer, len(attempts))
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in attempts]
    header = encoded.header_correct if attempts_correct else encoded.header_wrong
    budget = sum(map(len, ids)) + 1024  # room for every attempt and the framing
    context = build_context(ids, header, encoded, budget, "middle")
    return tokenizer(prompt, add_special_tokens=True)["input_ids"] + context


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
    encoded = encode_template(tokenizer, cfg.context_max_attempts) if cfg.context_frac else None
    was_training = model.training
    model.train()
    for step in range(1, cfg.steps + 1):
        picked = [problems[rng.randrange(len(problems))] for _ in range(cfg.batch_size)]
        prompts: list[str | list[int]] = []
        targets: list[str] = []
        for p in picked:
            if cfg.context_frac > 0 and rng.random() < cfg.context_frac:
                attempts, correct, target = context_demonstration(
                    p, rng, cfg.error_rate, cfg.context_max_attempts
                )
                prompts.append(context_prompt(tokenizer, p.prompt, attempts, correct, encoded))
                targets.append(target)
            else:
                prompts.append(p.prompt)
                targets.append(noisy_solution(p, rng, cfg.error_rate))
        batch = collate(tokenizer, prompts, targets, cache)
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
