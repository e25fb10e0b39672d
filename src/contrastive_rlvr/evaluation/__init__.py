"""Evaluation: benchmarks by name, sampling, math-verify scoring, avg@n and pass@k.

Entry point: :func:`evaluate` with an :class:`EvalConfig` (what the
``contrastive-rlvr eval`` command runs). Benchmarks: :func:`load_benchmark`.
"""

from .report import ks_for, summarize
from .run import EvalConfig, evaluate
from .suites import BENCHMARKS, ENV_VAR, load_benchmark

__all__ = [
    "BENCHMARKS",
    "ENV_VAR",
    "EvalConfig",
    "evaluate",
    "ks_for",
    "load_benchmark",
    "summarize",
]
