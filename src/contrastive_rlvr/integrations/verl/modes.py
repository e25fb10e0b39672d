"""The ``crlvr_*`` trainers' names, the verl mode each runs in, and the config reads the
start checks share (no verl import: :mod:`.settings` and :mod:`.stale_checks` both read it).
"""

from __future__ import annotations

from typing import Any

TRAINER_NAME = "crlvr_sync"
#: The project's trainers by verl registry name -> the verl v1 mode each one runs in.
TRAINER_MODES = {
    TRAINER_NAME: "sync",
    "crlvr_colocate_async": "colocate_async",
    "crlvr_separate_async": "separate_async",
}
#: The modes whose rollouts may be weight versions old.
ASYNC_TRAINERS = ("crlvr_colocate_async", "crlvr_separate_async")


def trainer_name(config: Any) -> str:
    """The run's ``trainer.v1.trainer_mode`` (verl's default ``sync`` when unset)."""
    return str((config.get("trainer", None) or {}).get("v1", {}).get("trainer_mode", "sync"))


def is_async(config: Any) -> bool:
    """Whether the run's trainer is one of the project's asynchronous ones."""
    return trainer_name(config) in ASYNC_TRAINERS


def rollout_correction(config: Any) -> Any:
    """``algorithm.rollout_correction`` (empty when unset)."""
    return config.algorithm.get("rollout_correction", None) or {}
