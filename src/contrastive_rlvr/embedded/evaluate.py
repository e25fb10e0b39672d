"""Held-out accuracy by sampling: avg@n of the task reward.

For each problem, ``n`` completions are sampled with Hugging Face
``generate`` (temperature 1 and no top-k/top-p filtering by default: the
policy's own distribution, as RL samples it; ``generate`` would otherwise
apply ``top_k=50``), scored with the reward function, and averaged by
:func:`contrastive_rlvr.algorithms.avg_at_n`: the mean over problems of the
share of that problem's samples that are right.

Rows are laid out problem-major (problem ``i``'s samples are rows
``i*n .. i*n + n-1``), prompts left-padded, ``batch_size`` rows per
``generate`` call. Sampling runs under a forked torch RNG seeded with
``seed``, so results repeat for the same ``seed`` and ``batch_size`` (the
draws depend on how rows are batched) and the caller's RNG state is left as
it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..algorithms import avg_at_n
from .task import arithmetic_reward

RewardFn = Callable[..., list[float]]
# A reward above this counts as a correct sample (rewards here are 0 or 1).
CORRECT_THRESHOLD = 0.5


def max_completion_tokens(dataset: Dataset, tokenizer: PreTrainedTokenizerBase) -> int:
    """A completion budget for the task: the longest reference solution in tokens,
    plus ``<eos>``, plus one token per step (a wrong result may have one more digit)."""
    if len(dataset) == 0:
        raise ValueError("max_completion_tokens: empty dataset")
    if "solution" not in dataset.column_names:
        raise ValueError(
            f"max_completion_tokens: dataset has no 'solution' column ({dataset.column_names}); "
            "pass max_new_tokens explicitly"
        )
    solutions = list(dataset["solution"])
    lengths = tokenizer(solutions, add_special_tokens=False)["input_ids"]
    return max(len(ids) + 1 + s.count(",") + 1 for ids, s in zip(lengths, solutions, strict=True))


def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    n: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
) -> list[list[str]]:
    """``n`` sampled completions per prompt, as text cut at the first ``<eos>``.

    ``temperature=0`` means greedy decoding. Returns a list (one per prompt) of
    ``n`` strings, special tokens removed.
    """
    if n < 1 or max_new_tokens < 1 or batch_size < 1:
        raise ValueError(
            f"need n, max_new_tokens, batch_size >= 1, got {n}, {max_new_tokens}, {batch_size}"
        )
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    rows = [p for p in prompts for _ in range(n)]
    sampling = (
        {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        if temperature > 0
        else {"do_sample": False}
    )
    device = next(model.parameters()).device
    padding_side = tokenizer.padding_side
    # Generation appends after the last column: prompts must end there.
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    texts: list[str] = []
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            for start in range(0, len(rows), batch_size):
                enc = tokenizer(rows[start : start + batch_size], padding=True, return_tensors="pt")
                out = model.generate(
                    input_ids=enc["input_ids"].to(device),
                    attention_mask=enc["attention_mask"].to(device),
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    **sampling,
                )
                for ids in out[:, enc["input_ids"].shape[1] :].tolist():
                    if tokenizer.eos_token_id in ids:
                        ids = ids[: ids.index(tokenizer.eos_token_id)]
                    texts.append(tokenizer.decode(ids, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]


def heldout_correctness(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: Dataset,
    *,
    n: int = 4,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
    reward_fn: RewardFn = arithmetic_reward,
) -> list[list[bool]]:
    """Per problem of ``dataset`` (columns ``prompt``, ``answer``; ``solution`` when
    ``max_new_tokens`` is None), whether each of its ``n`` samples is right."""
    for column in ("prompt", "answer"):
        if column not in dataset.column_names:
            raise ValueError(f"heldout dataset has no {column!r} column: {dataset.column_names}")
    if max_new_tokens is None:
        max_new_tokens = max_completion_tokens(dataset, tokenizer)
    prompts = list(dataset["prompt"])
    samples = sample_completions(
        model,
        tokenizer,
        prompts,
        n=n,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        seed=seed,
        batch_size=batch_size,
    )
    answers = list(dataset["answer"])
    correct = []
    for prompt, answer, completions in zip(prompts, answers, samples, strict=True):
        rewards = reward_fn([prompt] * n, completions, [answer] * n)
        correct.append([r > CORRECT_THRESHOLD for r in rewards])
    return correct


def heldout_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: Dataset,
    *,
    n: int = 4,
    max_new_tokens: int | None = None,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 256,
    reward_fn: RewardFn = arithmetic_reward,
) -> float:
    """avg@n on ``dataset``: see :func:`heldout_correctness` and the module docstring.

    ``max_new_tokens`` defaults to :func:`max_completion_tokens` of the dataset.
    """
    return avg_at_n(
        heldout_correctness(
            model,
            tokenizer,
            dataset,
            n=n,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed,
            batch_size=batch_size,
            reward_fn=reward_fn,
        )
    )
