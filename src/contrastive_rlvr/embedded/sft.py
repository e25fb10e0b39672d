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
:class:`~contrastive_rlvr.algorithms.BiCCTemplate`, cut to the run's BiCC
budget, truncation and placement), and the demonstrator *reads* it: after
correct attempts it writes the reference chain; after wrong attempts it
writes a noisy demonstration repeating none of the shown answers
(``context_target="avoid"``) or the reference chain (``"reference"``). The
attempts are the demonstrator's slips (``context_attempts="demonstrator"``,
half of the examples correct attempts, half wrong ones) or the model's own
samples grouped and conditioned by
:func:`~contrastive_rlvr.algorithms.build_bicc_prompts` itself
(``"sampled"``). docs/bicc.md has the measurement of which combination makes
the model read the attempts as BiCC assumes: what matters is the context
*before* the prompt (``bicc_placement=before_prompt``), where the prompt keeps
its distance to the completion; after it, the 2-layer model's arithmetic
breaks.

Deterministic for a seed: batches and slips come from ``random.Random(seed)``;
the model has no dropout; sampled attempts are drawn under a forked torch RNG
seeded from that generator, so the caller's torch RNG is left as it was.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..algorithms.bicc import TRUNCATIONS, BiCCTemplate, EncodedTemplate, Truncation, build_context
from .task import Problem, chain_answer, noisy_solution, parse_prompt

# Label of positions without a loss (torch's cross_entropy default).
IGNORE_INDEX = -100
#: What the reading demonstrator writes after wrong attempts (:class:`WarmStartConfig`).
CONTEXT_TARGETS: tuple[str, ...] = ("avoid", "reference")
#: Where the attempts of a reading example come from (:class:`WarmStartConfig`).
CONTEXT_ATTEMPTS: tuple[str, ...] = ("demonstrator", "sampled")
#: Where a reading example's context goes (the text placements of BiCC's prompts).
PLACEMENTS: tuple[str, ...] = ("after_prompt", "before_prompt")


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
        context_budget: tokens the framed attempts may add to the prompt, cut as
            BiCC cuts them (``build_context``'s water-filling and ``context_truncation``);
            the trainer passes its own BiCC budget so the SFT contexts are the ones RL
            will show. None: every attempt in full.
        context_framing, context_room: what the budget pays for (``"inside"``: the
            framing too; ``"outside"``: the attempts only) and the hard limit on the
            whole context, as the trainer's ``bicc_framing_budget`` sets them.
        context_truncation: how an attempt longer than its share is cut (BiCC's
            ``bicc_truncation``).
        context_placement: where the context goes (BiCC's ``bicc_placement`` for
            text prompts): ``"after_prompt"`` (``[q; O]``, the paper's) or
            ``"before_prompt"`` (``[O; q]``: the prompt stays right before the
            completion, at the distance the plain warm start learned).
        context_target: what the demonstrator writes after *wrong* attempts.
            ``"avoid"``: a plain noisy demonstration whose answer is none of the
            shown ones; ``"reference"``: the reference chain (the framing is
            decisive: after any context the demonstration is right). After correct
            attempts the target is the reference chain in both.
        context_attempts: where the attempts of a reading example come from.
            ``"demonstrator"``: the demonstrator's own slips (wrong results by
            +-1 or +-10, :func:`context_demonstration`). ``"sampled"``: the
            model's own samples, as BiCC will see them: from step
            ``floor(context_start_frac * steps)`` on, every ``context_refresh`` steps the model
            samples ``context_max_attempts + 1`` completions for each of
            ``context_pool`` train problems, and every group with both outcomes
            gives its two conditioned prompts, built by
            :func:`~contrastive_rlvr.algorithms.build_bicc_prompts` (the
            model's errors are not the demonstrator's slips: wrong first values,
            results off by other amounts, malformed chains). Before that step
            every example is plain (the model must first write chains to quote).
        context_start_frac, context_refresh, context_pool: see ``context_attempts``.
        context_max_new_tokens, context_temperature: the sampling of the
            ``"sampled"`` attempts (the RL run's ``max_completion_length`` and
            ``temperature``).
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
    context_budget: int | None = None
    context_framing: str = "inside"
    context_room: int | None = None
    context_truncation: str = "middle"
    context_placement: str = "after_prompt"
    context_target: str = "avoid"
    context_attempts: str = "demonstrator"
    context_start_frac: float = 0.25
    context_refresh: int = 100
    context_pool: int = 128
    context_max_new_tokens: int = 16
    context_temperature: float = 1.0

    def __post_init__(self) -> None:
        attempts, budget, steps = self.context_attempts, self.context_budget, self.steps
        sampled = attempts == "sampled" and self.context_frac > 0
        checks = (  # field, whether it holds, what it must be (the sampled attempts' only then)
            ("steps", steps >= 1, ">= 1"),
            ("batch_size", self.batch_size >= 1, ">= 1"),
            ("lr", self.lr > 0, "> 0"),
            ("warmup_steps", 0 <= self.warmup_steps < steps, f"in [0, steps={steps})"),
            ("error_rate", 0.0 <= self.error_rate <= 1.0, "in [0, 1]"),
            ("context_frac", 0.0 <= self.context_frac <= 1.0, "in [0, 1]"),
            ("context_max_attempts", self.context_max_attempts >= 1, ">= 1"),
            ("context_budget", budget is None or budget >= 1, ">= 1 or None"),
            ("context_truncation", self.context_truncation in TRUNCATIONS, f"one of {TRUNCATIONS}"),
            ("context_placement", self.context_placement in PLACEMENTS, f"one of {PLACEMENTS}"),
            ("context_target", self.context_target in CONTEXT_TARGETS, f"one of {CONTEXT_TARGETS}"),
            ("context_attempts", attempts in CONTEXT_ATTEMPTS, f"one of {CONTEXT_ATTEMPTS}"),
            ("context_start_frac", not sampled or 0 <= self.context_start_frac < 1, "in [0, 1)"),
            ("context_refresh", not sampled or self.context_refresh >= 1, ">= 1"),
            ("context_pool", not sampled or self.context_pool >= 1, ">= 1"),
            ("context_max_new_tokens", not sampled or self.context_max_new_tokens >= 1, ">= 1"),
            ("context_temperature", not sampled or self.context_temperature > 0, "> 0"),
            ("weight_decay", self.weight_decay >= 0, ">= 0"),
            ("max_grad_norm", self.max_grad_norm > 0, "> 0"),
        )
        for name, holds, wants in checks:
            if not holds:
                raise ValueError(
                    f"WarmStartConfig.{name} must be {wants}, got {getattr(self, name)!r}"
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
    problem: Problem,
    rng: random.Random,
    error_rate: float,
    max_attempts: int,
    target_rule: str = "avoid",
) -> tuple[list[str], bool, str]:
    """One reading example: ``(attempts, attempts_correct, target)``.

    With probability 1/2 the attempts are 1..``max_attempts`` copies of the
    reference chain and the target is the reference chain. Otherwise they are
    1..``max_attempts`` wrong chains (distinct while the task has that many
    slips, drawn as the plain demonstrator's) and the target is, for
    ``target_rule="avoid"``, a plain noisy demonstration redrawn until its
    answer is none of the attempts' answers (the reference chain if 20 draws
    all repeat one); for ``"reference"``, the reference chain.
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
    if target_rule == "reference":
        return wrong, False, problem.solution
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
    budget: int | None = None,
    truncation: Truncation = "middle",
    placement: str = "after_prompt",
    framing: str = "inside",
    room: int | None = None,
) -> list[int]:
    """Token ids of ``prompt`` followed by BiCC's context of ``attempts``, exactly as
    :func:`~contrastive_rlvr.algorithms.build_bicc_prompts` lays out a conditioned
    prompt (``after_prompt`` placement). ``encoded``: the framing as ids (default:
    the default template, encoded here). ``budget``: BiCC's context budget in
    tokens, attempts cut by ``truncation`` and left out as BiCC does; None: room
    for every attempt in full. ``placement``: ``"after_prompt"`` or
    ``"before_prompt"`` (the context ahead of the prompt and its ``<bos>``)."""
    if encoded is None:
        encoded = encode_template(tokenizer, len(attempts))
    ids = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in attempts]
    header = encoded.header_correct if attempts_correct else encoded.header_wrong
    if budget is None:
        budget = sum(map(len, ids)) + 1024  # room for every attempt and the framing
    context = build_context(ids, header, encoded, budget, truncation, framing=framing, room=room)
    q = tokenizer(prompt, add_special_tokens=True)["input_ids"]
    return context + q if placement == "before_prompt" else q + context


def reading_target(
    problem: Problem,
    shown: list[str],
    shown_correct: bool,
    rng: random.Random,
    cfg: WarmStartConfig,
) -> str:
    """What the reading demonstrator writes after ``shown`` attempts: the reference chain
    after correct ones; after wrong ones the reference chain (``context_target
    "reference"``) or a noisy demonstration whose answer is none of the shown answers
    (``"avoid"``; the reference chain if 20 draws all repeat one)."""
    if shown_correct or cfg.context_target == "reference":
        return problem.solution
    answers = {chain_answer(c) for c in shown}
    for _ in range(20):
        target = noisy_solution(problem, rng, cfg.error_rate)
        if chain_answer(target) not in answers:
            return target
    return problem.solution


def sampled_reading_pool(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    rng: random.Random,
    cfg: WarmStartConfig,
    encoded: EncodedTemplate,
) -> list[tuple[list[int], str]]:
    """Reading examples ``(conditioned prompt ids, target)`` from the model's own samples.

    ``cfg.context_pool`` problems drawn from ``problems``; for each, G =
    ``context_max_attempts + 1`` completions sampled from the plain prompt and
    rewarded; each group with both outcomes gives the conditioned prompt of its
    correct rows ``[q; O-]`` and of its wrong rows ``[q; O+]``, built by
    :func:`~contrastive_rlvr.algorithms.build_bicc_prompts` as the trainer builds
    them (budget ``context_budget``, ``context_truncation``, EOS and padding
    stripped from the quoted attempts), each with :func:`reading_target`.
    """
    from ..algorithms import build_bicc_prompts
    from .evaluate import sample_completions
    from .task import arithmetic_reward

    group = cfg.context_max_attempts + 1
    picked = [problems[rng.randrange(len(problems))] for _ in range(cfg.context_pool)]
    samples = sample_completions(
        model,
        tokenizer,
        [p.prompt for p in picked],
        n=group,
        max_new_tokens=cfg.context_max_new_tokens,
        temperature=cfg.context_temperature,
        seed=rng.randrange(2**31),
    )
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    pool: list[tuple[list[int], str]] = []
    for problem, texts in zip(picked, samples, strict=True):
        rewards = arithmetic_reward([problem.prompt] * group, texts, [str(problem.answer)] * group)
        if not 0 < sum(rewards) < group:
            continue
        q = tokenizer(problem.prompt, add_special_tokens=True)["input_ids"]
        completions = [tokenizer(t, add_special_tokens=False)["input_ids"] + [eos] for t in texts]
        budget = cfg.context_budget
        if budget is None:  # room for every attempt in full
            budget = sum(map(len, completions)) + 1024
        built = build_bicc_prompts(
            [q] * group,
            completions,
            torch.tensor(rewards),
            group,
            encoded,
            budget=budget,
            pad_token_id=pad,
            truncation=cfg.context_truncation,  # type: ignore[arg-type]
            placement=cfg.context_placement,  # type: ignore[arg-type]
            strip_token_ids={eos, pad},
            framing=cfg.context_framing,  # type: ignore[arg-type]
            room=cfg.context_room,
        )
        for correct_row in (True, False):
            row = next(i for i in range(group) if (rewards[i] > 0.5) == correct_row)
            ids = built.input_ids[row][built.attention_mask[row].bool()].tolist()
            # Correct rows see the wrong attempts and the other way round.
            shown = [t for t, r in zip(texts, rewards, strict=True) if (r > 0.5) != correct_row]
            pool.append((ids, reading_target(problem, shown, not correct_row, rng, cfg)))
    return pool


def completion_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled tokens of the batch."""
    return completion_loss_split(model, [batch])


def completion_loss_split(
    model: PreTrainedModel, batches: list[dict[str, torch.Tensor]]
) -> torch.Tensor:
    """Mean next-token cross-entropy over the labelled tokens of all ``batches`` together:
    the sum of every sub-batch's token losses over their total count, i.e. the same
    value as one batch of all the rows. Short plain rows and long conditioned rows go
    in separate sub-batches so the short ones are not padded to the long width."""
    total = torch.zeros(())
    count = 0
    for batch in batches:
        logits = model(input_ids=batch["input_ids"]).logits  # (B, T, V)
        labels = batch["labels"][:, 1:].flatten()  # position t predicts token t + 1
        total = total + torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels, ignore_index=IGNORE_INDEX, reduction="sum"
        )
        count += int((labels != IGNORE_INDEX).sum())
    return total / max(count, 1)


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
    sampled = cfg.context_frac > 0 and cfg.context_attempts == "sampled"
    pool: list[tuple[list[int], str]] = []
    start = int(cfg.context_start_frac * cfg.steps)
    was_training = model.training
    model.train()
    for step in range(1, cfg.steps + 1):
        if sampled and step > start and (step - 1 - start) % cfg.context_refresh == 0:
            pool = sampled_reading_pool(model, tokenizer, problems, rng, cfg, encoded) or pool
        picked = [problems[rng.randrange(len(problems))] for _ in range(cfg.batch_size)]
        prompts: list[str | list[int]] = []
        targets: list[str] = []
        read_prompts: list[str | list[int]] = []
        read_targets: list[str] = []
        for p in picked:
            if sampled:
                if pool and rng.random() < cfg.context_frac:
                    ids, target = pool[rng.randrange(len(pool))]
                    read_prompts.append(ids)
                    read_targets.append(target)
                else:
                    prompts.append(p.prompt)
                    targets.append(noisy_solution(p, rng, cfg.error_rate))
            elif cfg.context_frac > 0 and rng.random() < cfg.context_frac:
                attempts, correct, target = context_demonstration(
                    p, rng, cfg.error_rate, cfg.context_max_attempts, cfg.context_target
                )
                read_prompts.append(
                    context_prompt(
                        tokenizer,
                        p.prompt,
                        attempts,
                        correct,
                        encoded,
                        budget=cfg.context_budget,
                        truncation=cfg.context_truncation,  # type: ignore[arg-type]
                        placement=cfg.context_placement,
                        framing=cfg.context_framing,
                        room=cfg.context_room,
                    )
                )
                read_targets.append(target)
            else:
                prompts.append(p.prompt)
                targets.append(noisy_solution(p, rng, cfg.error_rate))
        batches = [
            collate(tokenizer, ps, ts, cache)
            for ps, ts in ((prompts, targets), (read_prompts, read_targets))
            if ps
        ]
        loss = completion_loss_split(model, batches)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step, loss.item())
    model.train(was_training)
    return model
