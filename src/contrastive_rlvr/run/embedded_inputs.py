"""The run inputs of the embedded default (``model=embedded``): its warm start, built once
in the run's folder (``sft-model``, whole or absent) and reused, the task's datasets, its
reward and its held-out evaluation."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM

from ..checkpoints import weights_problems
from ..trainer.config import RLVRConfig
from ..trainer.model_options import init_kwargs_as_user_error, model_load_kwargs
from ..trainer.reward_guards import guard_reward
from .folder import SFT_DIR

logger = logging.getLogger(__name__)


def warm_start_problems(sft_dir: Path) -> list[str]:
    """Why ``sft_dir`` is not a whole saved warm start (empty: it is): its config, its
    settings record and its weights, checked from headers as checkpoints are."""
    from ..embedded import SETTINGS_FILE

    missing = [n for n in ("config.json", SETTINGS_FILE) if not (sft_dir / n).is_file()]
    return [f"{n} is missing" for n in missing] + weights_problems(sft_dir)


def sft_context_budget(config: RLVRConfig) -> dict:
    """The reading warm start's BiCC context budget for a run of ``config``
    (:func:`~contrastive_rlvr.embedded.warm_start_rules.embedded_sft_context_budget`)."""
    from ..embedded import TaskConfig
    from ..embedded.warm_start_rules import embedded_sft_context_budget

    return embedded_sft_context_budget(
        TaskConfig(terms=config.embedded_terms, hidden_ops=config.embedded_hidden_ops),
        phrases=config.embedded_bicc_phrases,
        context_frac=config.embedded_sft_context_frac,
        bicc_context_ratio=config.bicc_context_ratio,
        bicc_max_seq_len=config.bicc_max_seq_len,
        bicc_framing_budget=config.bicc_framing_budget,
        max_completion_length=config.max_completion_length,
    )


def embedded_inputs(config: RLVRConfig, out: Path) -> dict[str, Any]:
    """The embedded default's model (warm-started once, then reused), task and reward."""
    from ..embedded import (
        EmbeddedSettings,
        TaskConfig,
        WarmStartConfig,
        arithmetic_reward,
        build_embedded_default,
        heldout_correctness,
        load_char_tokenizer,
        make_datasets,
    )
    from ..embedded.warm_start_rules import (
        embedded_sft_context_placement,
        warn_if_other_warm_start,
    )

    task = TaskConfig(terms=config.embedded_terms, hidden_ops=config.embedded_hidden_ops)
    sft_dir = out / SFT_DIR
    problems = warm_start_problems(sft_dir) if sft_dir.exists() else ["absent"]
    if problems != ["absent"] and problems:
        # A save cut short (disk full, a kill) must not be reused on every rerun.
        logger.warning("%s is not whole (%s): building it again", sft_dir, "; ".join(problems))
    if problems:
        settings = EmbeddedSettings(
            seed=config.seed,
            task=task,
            bicc_phrases=config.embedded_bicc_phrases,
            sft=WarmStartConfig(
                context_frac=config.embedded_sft_context_frac,
                context_target=config.embedded_sft_context_target,
                # Read only by a reading warm start (a share of it > 0).
                **(
                    sft_context_budget(config)
                    if config.embedded_sft_context_frac > 0
                    else {"context_budget": None}
                ),
                context_truncation=config.bicc_truncation,
                context_placement=embedded_sft_context_placement(config.bicc_placement),
                context_max_attempts=max(config.num_generations - 1, 1),
                context_attempts=config.embedded_sft_context_attempts,
                context_max_new_tokens=config.max_completion_length,
                context_temperature=config.temperature,
            ),
        )
        # Built aside and renamed into place, so that sft-model/ is whole or absent.
        partial = out / f"{SFT_DIR}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        build_embedded_default(partial, settings=settings, sft_steps=config.embedded_sft_steps)
        shutil.rmtree(sft_dir, ignore_errors=True)
        os.replace(partial, sft_dir)
    else:
        sft = WarmStartConfig(
            context_frac=config.embedded_sft_context_frac,
            context_target=config.embedded_sft_context_target,
            context_attempts=config.embedded_sft_context_attempts,
        )
        phrases = config.embedded_bicc_phrases
        warn_if_other_warm_start(sft_dir, seed=config.seed, task=task, phrases=phrases, sft=sft)
    tokenizer = load_char_tokenizer(sft_dir)
    with init_kwargs_as_user_error(config):
        model = AutoModelForCausalLM.from_pretrained(sft_dir, **model_load_kwargs(config))
    train, heldout = make_datasets(task)
    if config.eval_limit is not None:
        heldout = heldout.select(range(min(config.eval_limit, len(heldout))))

    def evaluate(m, label: str | None = None) -> list[list[bool]]:
        # (The embedded task's samples are not written: its held-out set is generated.)
        return heldout_correctness(m, tokenizer, heldout, n=config.eval_n, seed=config.seed)

    return dict(
        model=model,
        tokenizer=tokenizer,
        train=train,
        heldout=heldout,
        rewards=[
            guard_reward(
                arithmetic_reward,
                on_nonfinite=config.nonfinite_rewards,
                timeout=config.reward_timeout,
            )
        ],
        evaluate=evaluate,
    )
