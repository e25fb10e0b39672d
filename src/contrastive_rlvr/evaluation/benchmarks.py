"""Evaluation benchmarks by name: ``math500``, ``amc23``, ``aime24``, ``aime25``, ``gsm8k``.

Read from a local directory of jsonl files (one problem per line, as in the
project's shared ``benchmarks/`` folder), found in this order:

1. the ``data_dir`` argument (the CLI's ``--benchmarks-dir``);
2. the environment variable ``CONTRASTIVE_RLVR_BENCHMARKS_DIR``;
3. ``../shared/benchmarks`` next to the repository root (a source checkout).

If the file is not there and the Hub is reachable (``HF_HUB_OFFLINE`` unset),
the public copy named in :data:`BENCHMARKS` is downloaded instead.

The files differ in field names and answer types (MATH-500: LaTeX strings;
AMC23: floats such as ``27.0``; AIME25: ints; GSM8K: a solution ending in
``#### 18``); every loader returns the columns ``id``, ``prompt`` (the bare
problem text) and ``answer`` (a normalised string: ``"27"``, ``"70"``,
``"\\frac{14}{3}"``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from ..data import AnswerFormat, load_prompts

ENV_VAR = "CONTRASTIVE_RLVR_BENCHMARKS_DIR"
_REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives and how its rows map to ``prompt`` and ``answer``."""

    name: str
    filename: str
    rows: int
    prompt_field: str
    answer_field: str
    answer_format: AnswerFormat
    id_field: str | None
    hub_id: str
    hub_config: str | None
    hub_split: str


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec(
            "math500", "math500.jsonl", 500, "problem", "answer", "plain", "unique_id",
            "HuggingFaceH4/MATH-500", None, "test",
        ),
        BenchmarkSpec(
            "amc23", "amc23.jsonl", 40, "problem", "answer", "plain", "id",
            "math-ai/amc23", None, "test",
        ),
        BenchmarkSpec(
            "aime24", "aime24.jsonl", 30, "problem", "answer", "plain", "id",
            "HuggingFaceH4/aime_2024", None, "train",
        ),
        BenchmarkSpec(
            "aime25", "aime25.jsonl", 30, "problem", "answer", "plain", "id",
            "math-ai/aime25", None, "test",
        ),
        BenchmarkSpec(
            "gsm8k", "gsm8k_test.jsonl", 1319, "question", "answer", "gsm8k", None,
            "openai/gsm8k", "main", "test",
        ),
    )
}  # fmt: skip


def benchmarks_dir(data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The local benchmark directory by the precedence of the module docstring, or None."""
    if data_dir is not None:
        path = Path(data_dir)
        if not path.is_dir():
            raise ValueError(f"benchmarks directory {str(path)!r} does not exist")
        return path
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
        if not path.is_dir():
            raise ValueError(f"{ENV_VAR}={env!r} is not a directory")
        return path
    default = _REPO_ROOT.parent / "shared" / "benchmarks"
    return default if default.is_dir() else None


def get_benchmark_spec(name: str) -> BenchmarkSpec:
    """The spec of benchmark ``name``; an unknown name raises listing the known ones."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return BENCHMARKS[name]


def load_benchmark(
    name: str, *, data_dir: str | os.PathLike[str] | None = None, limit: int | None = None
) -> Dataset:
    """Benchmark ``name`` as a Dataset of ``id``, ``prompt``, ``answer`` (first ``limit`` rows)."""
    spec = get_benchmark_spec(name)
    directory = benchmarks_dir(data_dir)
    local = directory / spec.filename if directory is not None else None
    if local is not None and local.is_file():
        source, split, config = str(local), "train", None
    else:
        # Not on disk: the Hub (load_prompts refuses with a clear error when offline).
        source, split, config = spec.hub_id, spec.hub_split, spec.hub_config
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
            where = str(local) if local is not None else f"${ENV_VAR} or --benchmarks-dir"
            raise ValueError(
                f"benchmark {name!r}: {where} not found and HF_HUB_OFFLINE is set; "
                f"point {ENV_VAR} (or --benchmarks-dir) at a folder holding {spec.filename}"
            )
    hub = source == spec.hub_id
    loaded = load_prompts(
        source,
        # Hub copies name their fields differently from the local files: detect them.
        prompt_field=None if hub else spec.prompt_field,
        answer_field=None if hub else spec.answer_field,
        answer_format=spec.answer_format,
        id_field=None if hub else spec.id_field,
        split=split,
        hub_config=config,
        limit=limit,
    )
    # A benchmark is scored on its answer alone: its other columns are left out.
    return loaded.dataset.select_columns(["id", "prompt", "answer"])
