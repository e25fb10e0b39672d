"""Old import path of :mod:`contrastive_rlvr.trainer.stages.process_scorers` (VeriGate's
PRM-backed process scorers now live next to the VeriGate stage that uses them)."""

from .trainer.stages.process_scorers import PRMScorer

__all__ = ["PRMScorer"]
