"""The embedded warm start a training run asks for, from the run's config: where BiCC's
context goes on the task's plain-text prompts, the context budget the reading warm start
cuts its demonstrations to (the one RL will cut to), and a word when a reused warm start
was built with other settings. Each takes the run's values it needs (this package stands
below the trainer; the run wing reads them from the config)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..algorithms import context_budget
from ..algorithms.bicc import context_room, resolve_placement
from ..errors import UserError
from . import SETTINGS_FILE
from .model import DEFAULT_MAX_POSITIONS
from .sft import WarmStartConfig
from .task import TaskConfig, make_datasets
from .tokenizer import bicc_phrases, build_char_tokenizer

logger = logging.getLogger(__name__)


def embedded_sft_context_placement(bicc_placement: str) -> str:
    """Where a run puts BiCC's context on the embedded task's text prompts (``auto`` is
    ``after_prompt`` there), so the reading warm start puts it there too."""
    if bicc_placement == "user_turn":
        raise UserError(
            "bicc_placement=user_turn needs chat prompts; the embedded task's are plain text: "
            "use after_prompt, before_prompt or auto"
        )
    return resolve_placement(bicc_placement, False)


def embedded_sft_context_budget(
    task: TaskConfig,
    *,
    phrases: bool,
    context_frac: float,
    bicc_context_ratio: float,
    bicc_max_seq_len: int,
    bicc_framing_budget: str,
    max_completion_length: int,
) -> dict:
    """The BiCC context budget a run on the embedded model gives, so that the reading warm
    start's contexts (a share ``context_frac``) are cut as RL will cut them:
    ``context_budget`` with the task's longest prompt (every prompt of one length has the
    same characters count) and the embedded model's positions; with
    ``bicc_framing_budget='outside'`` the positions cap the whole context
    (``context_room``). WarmStartConfig's ``context_*`` fields."""
    tokenizer = build_char_tokenizer(bicc_phrases() if phrases else ())
    train, _ = make_datasets(task)
    longest = max(len(ids) for ids in tokenizer(list(train["prompt"][:1000]))["input_ids"])
    inside = bicc_framing_budget == "inside"
    budget = context_budget(
        bicc_context_ratio,
        longest_prompt=longest,
        max_completion_length=max_completion_length,
        max_seq_len=bicc_max_seq_len,
        max_positions=DEFAULT_MAX_POSITIONS if inside else None,
    )
    room = None
    if not inside:
        room = context_room(longest, max_completion_length, DEFAULT_MAX_POSITIONS)
    if budget < 1 or (room is not None and room < 1):
        raise UserError(
            f"embedded_sft_context_frac={context_frac} needs room for "
            f"BiCC's context, but the longest prompt ({longest} tokens) plus "
            f"max_completion_length={max_completion_length} leave none of "
            f"bicc_max_seq_len={bicc_max_seq_len} (positions "
            f"{DEFAULT_MAX_POSITIONS}) at bicc_context_ratio={bicc_context_ratio}: "
            "lower max_completion_length or raise bicc_max_seq_len"
        )
    return {"context_budget": budget, "context_framing": bicc_framing_budget, "context_room": room}


def warn_if_other_warm_start(
    sft_dir: Path, *, seed: int, task: TaskConfig, phrases: bool, sft: WarmStartConfig
) -> None:
    """A reused ``sft-model`` (a rerun, or compare's cache) built with other settings than
    these (the run's seed, task, phrases and warm start) is used as it is, but said
    (remove it to build it anew)."""
    record_file = sft_dir / SETTINGS_FILE
    if not record_file.exists():
        return
    record = json.loads(record_file.read_text())
    built = {
        "seed": record.get("seed"),
        "embedded_terms": record.get("task", {}).get("terms"),
        "embedded_hidden_ops": record.get("task", {}).get("hidden_ops", False),
        "embedded_sft_context_frac": record.get("sft", {}).get("context_frac", 0.0),
        "embedded_sft_context_target": record.get("sft", {}).get("context_target", "avoid"),
        "embedded_sft_context_attempts": record.get("sft", {}).get(
            "context_attempts", "demonstrator"
        ),
        "embedded_bicc_phrases": record.get("bicc_phrases", False),
    }
    wanted = {
        "seed": seed,
        "embedded_terms": task.terms,
        "embedded_hidden_ops": task.hidden_ops,
        "embedded_sft_context_frac": sft.context_frac,
        "embedded_sft_context_target": sft.context_target,
        "embedded_sft_context_attempts": sft.context_attempts,
        "embedded_bicc_phrases": phrases,
    }
    diffs = [f"{k}: {built[k]!r} there, {v!r} here" for k, v in wanted.items() if built[k] != v]
    if diffs:
        logger.warning(
            "reusing the warm start %s built with other settings (%s); remove it to build "
            "it with this config's",
            sft_dir,
            "; ".join(diffs),
        )
