"""Evaluation: benchmarks by name, sampling, math-verify scoring, avg@n and pass@k.

Entry point: :func:`evaluate` with an :class:`EvalConfig` (what the
``contrastive-rlvr eval`` command runs). Benchmarks: :func:`load_benchmark`.
"""

from .report import BenchmarkReport, ks_for, results_table, summarize
from .run import EvalConfig, EvalResult, evaluate
from .suites import BENCHMARKS, ENV_VAR, benchmarks_dir, get_benchmark_spec, load_benchmark

__all__ = [
    "BENCHMARKS",
    "ENV_VAR",
    "BenchmarkReport",
    "EvalConfig",
    "EvalResult",
    "benchmarks_dir",
    "evaluate",
    "get_benchmark_spec",
    "ks_for",
    "load_benchmark",
    "results_table",
    "summarize",
]
