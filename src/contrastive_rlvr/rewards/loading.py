"""Reward functions by name: the built-in ones, or a user's by import path.

``resolve_reward("math_verify")`` builds a built-in reward;
``resolve_reward("my_pkg.rewards:length_penalty")`` or
``resolve_reward("path/to/rewards.py:length_penalty")`` imports a user's
function. A user function must have TRL's signature
``f(prompts, completions, **kwargs) -> list[float]`` (dataset columns arrive
as keyword arguments).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

RewardFunction = Callable[..., list[float]]
logger = logging.getLogger(__name__)


def _builtin(name: str, options: dict[str, Any]) -> RewardFunction:
    if name == "math_verify":
        from .math_verify import MathVerifyReward

        return MathVerifyReward(**options)
    if name == "format":
        from .format import FormatReward

        return FormatReward(**options)
    if name == "gym":
        from .gym import GymReward

        return GymReward(**options)
    raise KeyError(name)


BUILTIN_REWARDS: tuple[str, ...] = ("math_verify", "format", "gym")


def load_reward_function(spec: str) -> RewardFunction:
    """Import ``module.path:function`` or ``file.py:function`` and return the callable.

    A module that changes the working directory when imported is moved back (with a
    warning): the run's relative paths (output_dir, the dataset, checkpoints) must keep
    their meaning."""
    cwd = os.getcwd()
    try:
        return _load(spec)
    finally:
        try:
            moved = os.getcwd() != cwd
        except FileNotFoundError:  # it removed the directory it moved to
            moved = True
        if moved:
            logger.warning(
                "reward %r changed the working directory when imported; changed back to %s",
                spec,
                cwd,
            )
            os.chdir(cwd)


def _load(spec: str) -> RewardFunction:
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(
            f"reward {spec!r}: expected 'module:function' or 'file.py:function', "
            f"or a built-in name {BUILTIN_REWARDS}"
        )
    if module_part.endswith(".py"):
        path = Path(module_part)
        if not path.is_file():
            raise ValueError(f"reward {spec!r}: file {str(path)!r} not found")
        module_spec = importlib.util.spec_from_file_location(f"_user_reward_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise ValueError(f"reward {spec!r}: cannot import {str(path)!r}")
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as e:
            raise ValueError(f"reward {spec!r}: cannot import module {module_part!r}: {e}") from e
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"reward {spec!r}: module {module_part!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {attr!r} is not callable")
    return fn


def resolve_reward(name_or_spec: str, **options: Any) -> RewardFunction:
    """A built-in reward by name (``options`` go to its constructor), else an import path."""
    if name_or_spec in BUILTIN_REWARDS:
        return _builtin(name_or_spec, options)
    if options:
        raise ValueError(
            f"reward {name_or_spec!r}: options {sorted(options)} apply to built-in rewards only"
        )
    return load_reward_function(name_or_spec)
