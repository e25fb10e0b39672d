"""Held-out accuracy by sampling: avg@n of the task reward.

For each problem, ``n`` completions are sampled with Hugging Face
``generate`` (temperature 1 and no top-k/top-p filtering by default: the
policy's own distribution, as RL samples it; ``generate`` would otherwise
apply ``top_k=50``), scored with the reward function, and averaged by
:func:`contrastive_rlvr.algorithms.avg_at_n`: the mean over problems of the
share of that problem's samples that are right.

Sampling is :meth:`contrastive_rlvr.generation.HFGenerator.sample`, the
project's one sampler: rows laid out problem-major (problem ``i``'s samples
are rows ``i*n .. i*n + n-1``), prompts left-padded, ``batch_size`` rows per
``generate`` call, under a forked torch RNG seeded with ``seed``, so results
repeat for the same ``seed`` and ``batch_size`` (the draws depend on how rows
are batched) and the caller's RNG state is left as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..algorithms import avg_at_n
from ..generation import HFGenerator
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
    # The project's one sampler (generation.HFGenerator) in its problem-major, one-stream
    # form, on the model in eval mode; the padding side (HFGenerator sets left) and the
    # model's mode are the caller's again afterwards.
    padding_side = tokenizer.padding_side
    was_training = model.training
    model.eval()
    try:
        generator = HFGenerator(
            model,
            tokenizer,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=1.0,
            batch_size=batch_size,
            chat=False,
            stop_at_eos=True,
        )
        return generator.sample(prompts, n=n, seed=seed)
    finally:
        tokenizer.padding_side = padding_side
        model.train(was_training)


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
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dataset: Dataset, **options: Any
) -> float:
    """avg@n on ``dataset``: :func:`heldout_correctness` with the same keyword ``options``
    (``n``, ``max_new_tokens``, ...; see the module docstring).

    ``max_new_tokens`` defaults to :func:`max_completion_tokens` of the dataset.
    """
    return avg_at_n(heldout_correctness(model, tokenizer, dataset, **options))
