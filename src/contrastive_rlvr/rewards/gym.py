"""reasoning-gym tasks as prompt datasets and a 0/1 reward.

``load_gym_task("chain_sum", config={"min_terms": 2}, train_size=1000, eval_size=100)``
returns a train and an evaluation :class:`datasets.Dataset` with columns
``prompt``, ``answer`` and the ``gym_*`` columns :class:`GymReward` needs to
score (task name, config as JSON, seed, size, item index). Items are
procedurally generated, offline, from a seed: the evaluation split uses
``seed + EVAL_SEED_OFFSET`` and drops every question that also occurs in the
training split (and duplicates within each split), so the two never share a
question.

reasoning-gym's own ``score_answer`` gives partial credit (e.g. 0.67 for a
near-miss number); :class:`GymReward` pays 1.0 only for a full score, so the
reward stays binary as RLVR assumes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from datasets import Dataset

from .extract import completion_text, extract_answer

logger = logging.getLogger(__name__)

# Far apart so that the generators' per-item seeds (seed + index) never meet.
EVAL_SEED_OFFSET = 1_000_003
# Items generated per wanted item at most, to make up for removed duplicates.
_OVERSAMPLE = 4
# A full score; reasoning-gym returns exactly 1.0 for a correct answer.
_FULL_SCORE = 1.0 - 1e-9
DEFAULT_INSTRUCTION = (
    "Think step by step, then give only the final answer inside <answer></answer> tags."
)


def _create(task: str, config_json: str, seed: int, size: int) -> Any:
    import reasoning_gym

    config = json.loads(config_json)
    try:
        return reasoning_gym.create_dataset(task, seed=seed, size=size, **config)
    except TypeError as e:
        raise ValueError(f"reasoning-gym task {task!r}: bad config {config}: {e}") from e
    except ValueError as e:
        from reasoning_gym.factory import DATASETS

        raise ValueError(
            f"unknown reasoning-gym task {task!r}; known: {', '.join(sorted(DATASETS))}"
        ) from e


@lru_cache(maxsize=64)
def _dataset(task: str, config_json: str, seed: int, size: int) -> Any:
    return _create(task, config_json, seed, size)


@lru_cache(maxsize=65536)
def _entry(task: str, config_json: str, seed: int, size: int, index: int) -> dict[str, Any]:
    return _dataset(task, config_json, seed, size)[index]


def _split(
    task: str,
    config_json: str,
    seed: int,
    size: int,
    exclude: set[str],
    instruction: str | None,
) -> tuple[list[dict[str, Any]], set[str]]:
    """Up to ``size`` rows with questions not in ``exclude``, and the questions used."""
    pool_size = size * _OVERSAMPLE
    ds = _dataset(task, config_json, seed, pool_size)
    rows, seen = [], set()
    for index in range(pool_size):
        if len(rows) == size:
            break
        entry = ds[index]
        question = entry["question"]
        if question in seen or question in exclude:
            continue
        seen.add(question)
        prompt = question if not instruction else f"{question}\n\n{instruction}"
        rows.append(
            {
                "prompt": prompt,
                "answer": str(entry["answer"]),
                "gym_task": task,
                "gym_config": config_json,
                "gym_seed": seed,
                "gym_size": pool_size,
                "gym_index": index,
            }
        )
    if len(rows) < size:
        logger.warning(
            "reasoning-gym %s (seed %d): only %d distinct questions of %d wanted",
            task,
            seed,
            len(rows),
            size,
        )
    return rows, seen


def load_gym_task(
    task: str,
    *,
    config: Mapping[str, Any] | None = None,
    train_size: int = 1000,
    eval_size: int = 100,
    seed: int = 0,
    instruction: str | None = DEFAULT_INSTRUCTION,
) -> tuple[Dataset, Dataset]:
    """Disjoint train and evaluation datasets of a reasoning-gym task (see the module doc).

    ``config`` holds the task's generator options (its ``*Config`` fields
    other than ``seed`` and ``size``); ``instruction`` is appended to every
    question (None for the bare question).
    """
    config = dict(config or {})
    for reserved in ("seed", "size"):
        if reserved in config:
            raise ValueError(
                f"reasoning-gym config must not set {reserved!r}; pass it as an argument"
            )
    if train_size < 1 or eval_size < 0:
        raise ValueError(f"need train_size >= 1 and eval_size >= 0, got {train_size}, {eval_size}")
    config_json = json.dumps(config, sort_keys=True)
    train_rows, train_questions = _split(task, config_json, seed, train_size, set(), instruction)
    eval_rows, _ = _split(
        task, config_json, seed + EVAL_SEED_OFFSET, eval_size, train_questions, instruction
    )
    return Dataset.from_list(train_rows), Dataset.from_list(eval_rows)


class GymReward:
    """TRL reward function for rows made by :func:`load_gym_task`: 1.0 iff fully correct.

    The answer is the content of the last ``<answer>`` tags (or ``\\boxed{}``);
    a completion with neither scores 0. The task's item is regenerated from
    the ``gym_*`` columns, so its metadata keeps its exact Python types.
    """

    def __init__(self) -> None:
        self.__name__ = "gym"

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[str | Sequence[Mapping[str, Any]]] | None = None,
        **columns: Any,
    ) -> list[float]:
        if completions is None:
            raise ValueError("GymReward needs completions=[...]")
        needed = ("gym_task", "gym_config", "gym_seed", "gym_size", "gym_index")
        missing = [c for c in needed if c not in columns]
        if missing:
            raise ValueError(
                f"GymReward needs the dataset columns {list(needed)} made by load_gym_task; "
                f"missing {missing}"
            )
        rewards = []
        for i, completion in enumerate(completions):
            key = tuple(columns[c][i] for c in needed)
            answer = extract_answer(completion_text(completion))
            if answer is None:
                rewards.append(0.0)
                continue
            entry = _entry(*key)
            score = _dataset(*key[:4]).score_answer(answer, entry)
            rewards.append(1.0 if score >= _FULL_SCORE else 0.0)
        return rewards
