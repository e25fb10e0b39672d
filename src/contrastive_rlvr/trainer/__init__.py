"""The TRL-based trainer: :class:`RLVRConfig`, :class:`RLVRTrainer` and :func:`train`."""

from .config import RLVRConfig
from .guards import SkipNonFiniteUpdates
from .rlvr_trainer import RLVRTrainer
from .run import train

__all__ = ["RLVRConfig", "RLVRTrainer", "SkipNonFiniteUpdates", "train"]
