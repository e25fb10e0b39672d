"""The held-out avg@n of a run on the user's data: which reward scores it, the evaluator
that samples ``eval_n`` completions per held-out problem and scores them as TRL scores
training samples (writing each sample as ``eval`` does), and the score summary.json
records with its interval."""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..trainer.config import RLVRConfig, sampling_settings


def heldout_reward_index(config: RLVRConfig) -> int:
    """The place in ``config.rewards`` of the reward that scores the held-out avg@n:
    ``heldout_reward`` when set; else the only reward; else ``math_verify`` when it is
    among them, else the first that is not ``format`` (a format reward scores how an
    answer is written, not whether it is right)."""
    names = list(config.rewards)
    if config.heldout_reward is not None:
        return names.index(config.heldout_reward)
    if "math_verify" in names:
        return names.index("math_verify")
    return next((i for i, n in enumerate(names) if n != "format"), 0)


def heldout_evaluator(config: RLVRConfig, tokenizer: Any, heldout: Any, reward: Any, *, chat: bool):
    """Per held-out problem, which of its eval_n samples the held-out reward
    (:func:`heldout_reward_index`) scores correct (summary.json takes avg@n and its
    interval from it), each sample written to ``samples/heldout_<label>.jsonl`` as
    ``eval`` writes its samples (prompt, completion, extracted answer, reward): each
    prompt rendered as TRL
    renders it (its chat template once, with ``chat_template_kwargs``), and the reward
    called as TRL calls it (the raw prompt, the completion as a message list for a
    conversation, every other column as a keyword argument)."""
    from ..generation import HFGenerator

    template_kwargs = config.chat_template_kwargs or {}
    if isinstance(template_kwargs, str):
        template_kwargs = json.loads(template_kwargs)
    prompts = list(heldout["prompt"])
    texts = [
        tokenizer.apply_chat_template(
            p, tokenize=False, add_generation_prompt=True, **template_kwargs
        )
        if isinstance(p, list)
        else p
        for p in prompts
    ]
    columns = [c for c in heldout.column_names if c != "prompt"]

    extract = getattr(reward, "extract", None)  # math_verify: the answer it read
    ids = list(heldout["id"]) if "id" in heldout.column_names else list(range(len(heldout)))

    def evaluate(m, label: str | None = None) -> list[list[bool]]:
        settings = sampling_settings(config)  # as training samples (generation_kwargs too)
        what = f"held-out avg@{config.eval_n}" + (f" {label} RL" if label else "")
        progress = ProgressLog(what, total=config.eval_n * len(texts), unit="completions")
        gen = HFGenerator(
            m,
            tokenizer,
            max_new_tokens=config.max_completion_length,
            temperature=settings.pop("temperature"),
            top_p=settings.pop("top_p"),
            batch_size=config.per_device_train_batch_size,
            chat=chat,
            settings=settings,
            on_batch=progress.advance,
        )
        progress.start(f"{len(texts)} problems x {config.eval_n} samples")
        samples = [gen.generate(texts, seed=config.seed + k) for k in range(config.eval_n)]
        progress.finish()
        correct, records = [], []
        n = config.eval_n
        for i, row in enumerate(heldout):
            completions = [samples[k][i] for k in range(n)]
            if isinstance(prompts[i], list):
                completions = [[{"role": "assistant", "content": c}] for c in completions]
            extra = {c: [row[c]] * n for c in columns}
            scores = reward([prompts[i]] * n, completions, **extra)
            # None (not scored) and skip_group's non-finite marker are not correct.
            correct.append([_is_correct(s, config.reward_threshold) for s in scores])
            for k in range(n):
                records.append(
                    {
                        "problem_id": str(ids[i]),
                        "seed": config.seed + k,
                        "prompt": texts[i],
                        "gold": row.get("answer"),
                        "answer": extract(samples[k][i]) if callable(extract) else None,
                        "reward": scores[k],
                        "correct": correct[-1][k],
                        "completion": samples[k][i],
                    }
                )
        if label is not None:
            write_samples(Path(config.output_dir) / "samples" / f"heldout_{label}.jsonl", records)
        return correct

    return evaluate


#: Seconds between two progress lines of a long phase (the first and last always show).
PROGRESS_EVERY_S = 30.0
#: The logger of the lines a run shows at the default log level (run.py sets its level).
start_log = logging.getLogger("contrastive_rlvr.start")


class ProgressLog:
    """Progress of a long phase as log lines (held-out scoring took most of a short
    SmolLM2 run, silently): one when it starts, one at most every ``every_s`` seconds
    with the count done, the share and the time so far, and one when it ends."""

    def __init__(
        self,
        what: str,
        *,
        total: int,
        unit: str,
        every_s: float | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.log = log or start_log.info
        self.done = 0
        self.started = self.last = time.perf_counter()

    def start(self, detail: str) -> None:
        self.started = self.last = time.perf_counter()
        self.log(f"{self.what}: sampling {self.total} {self.unit} ({detail})")

    def advance(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if now - self.last >= self.every_s and self.done < self.total:
            self.last = now
            self.log(
                f"{self.what}: {self.done} of {self.total} {self.unit} "
                f"({self.done / max(self.total, 1):.0%}), {now - self.started:.0f} s"
            )

    def finish(self) -> None:
        took = time.perf_counter() - self.started
        self.log(f"{self.what}: {self.done} of {self.total} {self.unit} in {took:.0f} s")


def write_samples(path: Path, records: list[dict]) -> None:
    """The held-out samples as ``eval`` writes its own (one JSON object a line)."""
    from ..run_files import open_atomic

    with open_atomic(path.parent.parent, Path(path.parent.name) / path.name) as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")


def _is_correct(score: float | None, threshold: float) -> bool:
    return score is not None and math.isfinite(score) and score > threshold


def heldout_score(correct: list[list[bool]]) -> tuple[float, dict]:
    """avg@n of a held-out correctness matrix (problems x samples) and what summary.json
    records with it: the counts behind it and its Wilson interval over problems."""
    from ..algorithms import avg_at_n
    from ..stats import SCORE_INTERVAL_METHOD, score_interval

    value = avg_at_n(correct)
    ci = score_interval([sum(row) / len(row) for row in correct])
    counts = {
        "problems": len(correct),
        "samples": sum(len(row) for row in correct),
        "correct": sum(sum(row) for row in correct),
        "avg_at_n": value,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "level": ci.level,
        "interval": SCORE_INTERVAL_METHOD,
    }
    return value, counts
