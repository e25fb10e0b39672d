"""The TRL-based trainer: :class:`RLVRConfig` and :class:`RLVRTrainer` (the run around it,
:func:`~contrastive_rlvr.run.train`, is :mod:`contrastive_rlvr.run`).

The project's callbacks are public (each ``RLVRTrainer`` attaches them itself, so a
hand-written TRL-style script gets the same logs as ``contrastive-rlvr train``):
:class:`MetricsJsonl`, :class:`RunCounters`, :class:`NonFiniteUpdateGuard`,
:class:`SkipNonFiniteUpdates`, :class:`FirstUpdateClipFraction`,
:class:`TrainingDiagnostics` and :class:`VerifierCountersCallback`.
"""

from ..rewards.logging_callback import VerifierCountersCallback
from .callbacks import FirstUpdateClipFraction, MetricsJsonl, RunCounters
from .config import RLVRConfig
from .rlvr_trainer import RLVRTrainer
from .training_diagnostics import TrainingDiagnostics
from .update_guards import NonFiniteUpdateGuard, SkipNonFiniteUpdates

__all__ = [
    "FirstUpdateClipFraction",
    "MetricsJsonl",
    "NonFiniteUpdateGuard",
    "RLVRConfig",
    "RLVRTrainer",
    "RunCounters",
    "SkipNonFiniteUpdates",
    "TrainingDiagnostics",
    "VerifierCountersCallback",
]
