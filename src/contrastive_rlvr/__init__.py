"""contrastive-rlvr: RLVR for language models with contrastive GRPO variants.

The public names, all importable from the package itself::

    from contrastive_rlvr import RLVRConfig, RLVRTrainer, train, MathVerifyReward, RECIPES

- training: :class:`RLVRConfig` (TRL's ``GRPOConfig`` plus the project's options),
  :class:`RLVRTrainer` (TRL's ``GRPOTrainer`` with them), :func:`train` (what
  ``contrastive-rlvr train`` runs: plans the output folder, loads model and data, trains,
  scores the held-out split);
- models and data: :func:`load_model_and_tokenizer` (a local folder, a Hub id or the
  ``smollm2-135m`` alias), :func:`model_load_kwargs` (the ``from_pretrained`` arguments of a
  config's TRL model options), :func:`load_prompts` (a jsonl/json/parquet file or a Hub
  dataset with a field mapping);
- rewards: :class:`MathVerifyReward`, :class:`FormatReward`, :class:`GymReward` with
  :func:`load_gym_task`, :func:`resolve_reward` (a built-in by name or a function by path);
- recipes: :data:`RECIPES`, :class:`Recipe`, :func:`get_recipe`, :func:`register_recipe`,
  :func:`register_policy_loss`;
- evaluation: :class:`EvalConfig` and :func:`evaluate` (what ``contrastive-rlvr eval`` runs);
- :class:`UserError`, the error every check of the user's input raises.

The names are loaded on first use (module ``__getattr__``): importing the package, as the
command line does for ``--help``, loads neither torch nor TRL. The math is in
:mod:`contrastive_rlvr.algorithms` (pure PyTorch); the layout is in docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Each public name -> the module that defines it.
_PUBLIC = {
    "RLVRConfig": "contrastive_rlvr.trainer",
    "RLVRTrainer": "contrastive_rlvr.trainer",
    "train": "contrastive_rlvr.run",
    "load_model_and_tokenizer": "contrastive_rlvr.models",
    "model_load_kwargs": "contrastive_rlvr.trainer.model_options",
    "load_prompts": "contrastive_rlvr.data",
    "MathVerifyReward": "contrastive_rlvr.rewards",
    "FormatReward": "contrastive_rlvr.rewards",
    "GymReward": "contrastive_rlvr.rewards",
    "load_gym_task": "contrastive_rlvr.rewards",
    "resolve_reward": "contrastive_rlvr.rewards",
    "RECIPES": "contrastive_rlvr.algorithms",
    "Recipe": "contrastive_rlvr.algorithms",
    "get_recipe": "contrastive_rlvr.algorithms",
    "register_recipe": "contrastive_rlvr.algorithms",
    "register_policy_loss": "contrastive_rlvr.algorithms",
    "EvalConfig": "contrastive_rlvr.evaluation",
    "evaluate": "contrastive_rlvr.evaluation",
    "UserError": "contrastive_rlvr.errors",
}

__all__ = [
    "__version__",
    "EvalConfig",
    "FormatReward",
    "GymReward",
    "MathVerifyReward",
    "RECIPES",
    "RLVRConfig",
    "RLVRTrainer",
    "Recipe",
    "UserError",
    "evaluate",
    "get_recipe",
    "load_gym_task",
    "load_model_and_tokenizer",
    "load_prompts",
    "model_load_kwargs",
    "register_policy_loss",
    "register_recipe",
    "resolve_reward",
    "train",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time __getattr__ loads them
    from .algorithms import RECIPES, Recipe, get_recipe, register_policy_loss, register_recipe
    from .data import load_prompts
    from .errors import UserError
    from .evaluation import EvalConfig, evaluate
    from .models import load_model_and_tokenizer
    from .rewards import FormatReward, GymReward, MathVerifyReward, load_gym_task, resolve_reward
    from .run import train
    from .trainer import RLVRConfig, RLVRTrainer
    from .trainer.model_options import model_load_kwargs


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use and keep it here."""
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'contrastive_rlvr' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
