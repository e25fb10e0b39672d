"""Checks of a training run that need no model: run before any weights load.

:func:`preflight` finds every user error that can be found from the config and
the files it names (the dataset, the reward functions, the model path, the
output directory, numeric ranges TRL leaves open) and raises :class:`UserError`
with one line naming the field or file, the value and the fix. It returns what
it had to load to check (the prompt rows, the reward functions), so the run
does not load them twice.

The range checks in :func:`check_ranges` are field-level and belong with the
config's own validation (``RLVRConfig.__post_init__``); they live here until
they are moved there.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ``org/name`` or ``name``: what the Hugging Face Hub accepts as a repository id.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
#: Fields whose default is kept for the embedded model; setting them means a custom model.
_CUSTOM_ONLY = {"dataset": None, "rewards": ["math_verify"]}


class UserError(ValueError):
    """A mistake in the user's input (a config value, a file, a path): the CLI prints it as
    one ``error: ...`` line and exits 2, without a traceback."""


@dataclass
class PreflightResult:
    """What the checks loaded: reuse it instead of loading again."""

    prompts: Any = None  # data.LoadedPrompts of a custom dataset
    rewards: list[Any] = field(default_factory=list)
    reward_names: list[str] = field(default_factory=list)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def check_ranges(config: Any) -> None:
    """Numeric fields that TRL's ``TrainingArguments`` accepts but no run can use."""
    lr = config.learning_rate
    if not (_finite(lr) and lr > 0):
        raise UserError(f"learning_rate={lr!r} is invalid: must be a finite number > 0")
    temperature = config.temperature
    if not (_finite(temperature) and temperature > 0):
        raise UserError(
            f"temperature={temperature!r} is invalid: sampling needs a finite temperature > 0"
        )
    top_p = getattr(config, "top_p", 1.0)
    if not (_finite(top_p) and 0 < top_p <= 1):
        raise UserError(f"top_p={top_p!r} is invalid: must be in (0, 1]")
    steps = config.max_steps
    if steps == -1:
        epochs = config.num_train_epochs
        if not (_finite(epochs) and epochs > 0):
            raise UserError(
                f"max_steps=-1 with num_train_epochs={epochs!r} is invalid: with max_steps=-1 "
                "the run length is num_train_epochs, which must be > 0"
            )
    elif steps < 1:
        raise UserError(
            f"max_steps={steps!r} is invalid: give a number of optimizer steps >= 1, or -1 to "
            "train for num_train_epochs"
        )
    for name in ("max_completion_length", "per_device_train_batch_size"):
        value = getattr(config, name, 1)
        if value is not None and value < 1:
            raise UserError(f"{name}={value!r} is invalid: must be >= 1")
    accum = getattr(config, "gradient_accumulation_steps", 1)
    if accum < 1:
        raise UserError(f"gradient_accumulation_steps={accum!r} is invalid: must be >= 1")
    for name in ("weight_decay", "adam_epsilon", "reward_threshold", "adv_eps"):
        value = getattr(config, name, 0.0)
        if not _finite(value):
            raise UserError(f"{name}={value!r} is invalid: must be a finite number")
    if getattr(config, "adam_epsilon", 1.0) <= 0:
        raise UserError(f"adam_epsilon={config.adam_epsilon!r} is invalid: must be > 0")
    for name in ("adam_beta1", "adam_beta2"):
        value = getattr(config, name, 0.9)
        if not (_finite(value) and 0 <= value < 1):
            raise UserError(f"{name}={value!r} is invalid: must be in [0, 1)")
    grad_norm = getattr(config, "max_grad_norm", None)
    if grad_norm is not None and not (_finite(grad_norm) and grad_norm >= 0):
        raise UserError(f"max_grad_norm={grad_norm!r} is invalid: must be finite and >= 0")
    weights = getattr(config, "reward_weights", None)
    if weights is not None and not all(_finite(w) for w in weights):
        raise UserError(f"reward_weights={weights!r} is invalid: every weight must be finite")
    sft = getattr(config, "embedded_sft_steps", None)
    if sft is not None and sft < 0:
        raise UserError(f"embedded_sft_steps={sft!r} is invalid: must be >= 0 (0: no warm start)")
    limit = getattr(config, "eval_limit", None)
    if limit is not None and limit < 1:
        raise UserError(f"eval_limit={limit!r} is invalid: must be >= 1 (or unset for all)")


def check_model_path(model: str) -> None:
    """A local model path must exist (and hold a model); a Hub id must be cached when offline.

    A value that looks like a path (starts with ``/``, ``.`` or ``~``, has more than one
    ``/``, ends with ``.gguf``) and does not exist is reported as a missing path, not
    passed to the Hub client, whose message would be about an invalid repository id.
    """
    from ..models import ALIASES, gguf_path

    if model in ALIASES:
        try:
            gguf_path(model)
        except FileNotFoundError as err:
            raise UserError(f"model={model!r}: {err}") from err
        return
    path = Path(model).expanduser()
    if path.exists():
        if path.is_dir() and not (path / "config.json").is_file():
            raise UserError(
                f"model={model!r}: the directory has no config.json, so it is not a saved "
                "Hugging Face model; point model at the folder save_pretrained wrote"
            )
        if path.is_file() and path.suffix != ".gguf":
            raise UserError(
                f"model={model!r} is a file: give a model directory, a .gguf file or a Hub id"
            )
        return
    if not _HUB_ID.match(model) or model.endswith(".gguf"):
        raise UserError(
            f"model={model!r}: no such file or directory; give an existing local model "
            "directory, a .gguf file, a Hugging Face model id or 'embedded'"
        )
    if _offline():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if not isinstance(cached, str):
            raise UserError(
                f"model={model!r} is not a local path and not in the Hugging Face cache, and "
                "HF_HUB_OFFLINE is set so it cannot be downloaded; give a local model directory "
                "or download it first"
            )


def check_output_dir(path: str | os.PathLike[str]) -> None:
    """The output directory can be created and written to."""
    out = Path(path)
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise UserError(f"output_dir={str(out)!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"output_dir={str(out)!r}: {str(existing)!r} is not writable")


def preflight(config: Any) -> PreflightResult:
    """Every check of a training run that needs no model; raises :class:`UserError`."""
    from ..data import load_prompts
    from ..rewards import resolve_reward

    check_ranges(config)
    check_output_dir(config.output_dir)
    result = PreflightResult()
    if config.model == "embedded":
        for name, default in _CUSTOM_ONLY.items():
            value = getattr(config, name)
            if value != default:
                raise UserError(
                    f"{name}={value!r} is given with model='embedded', which brings its own "
                    f"arithmetic task and reward; drop --{name}, or set --model to the model "
                    "to train on this dataset"
                )
        return result
    if config.dataset is None:
        raise UserError(
            f"dataset=None is invalid: model={config.model!r} needs a prompt dataset (a "
            ".jsonl/.parquet file or a Hugging Face dataset name); only model='embedded' "
            "brings its own task"
        )
    if not config.rewards:
        raise UserError("rewards=[] is invalid: give at least one reward function")
    check_model_path(config.model)
    try:
        prompts = load_prompts(config.dataset, skip_bad_rows=config.skip_bad_rows)
    except ValueError as err:
        raise UserError(f"dataset={config.dataset!r}: {err}") from err
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"dataset={config.dataset!r} cannot be read: {err}") from err
    if len(prompts.dataset) <= config.heldout_size:
        raise UserError(
            f"heldout_size={config.heldout_size} leaves no training rows in {config.dataset} "
            f"({len(prompts.dataset)} rows); lower heldout_size"
        )
    result.prompts = prompts
    for name in config.rewards:
        try:
            result.rewards.append(resolve_reward(name))
        except (ValueError, KeyError) as err:
            raise UserError(f"rewards: {err}") from err
        result.reward_names.append(name)
    weights = getattr(config, "reward_weights", None)
    if weights is not None and not getattr(config, "overlong_punishment", False):
        if len(weights) != len(config.rewards):
            raise UserError(
                f"reward_weights={weights} has {len(weights)} entries for "
                f"{len(config.rewards)} reward functions {config.rewards}: give one per function"
            )
    return result
