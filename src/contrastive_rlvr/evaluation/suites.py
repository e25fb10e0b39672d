"""Evaluation benchmarks: by name (``math500``, ``amc23``, ``aime24``, ``aime25``,
``gsm8k``) or as a file.

A name is read from the first of:

1. the ``data_dir`` argument (the CLI's ``--benchmarks-dir``), a folder of jsonl files;
2. the folder in the environment variable ``CONTRASTIVE_RLVR_BENCHMARKS_DIR``;
3. the copy shipped inside the package (``evaluation/data/``: MATH-500 and GSM8K,
   both MIT-licensed; source and licence in its README), so ``eval`` works offline;
4. the public Hub copy named in :data:`BENCHMARKS`, when the Hub is reachable
   (``HF_HUB_OFFLINE`` unset). AMC23, AIME24 and AIME25 are not shipped: offline,
   the error names the file to put in ``--benchmarks-dir``.

A file (a path ending in ``.jsonl``, ``.json`` or ``.parquet``, or ``NAME=PATH``) is
read with the field mapping given (``prompt``, ``answer``, ``id``, ``format``), or
with the fields detected as for training data (:func:`~contrastive_rlvr.data.load_prompts`);
its name is ``NAME`` or the file's stem. :func:`resolve_benchmark` says which file or
Hub copy a benchmark is read from; ``eval`` records it in ``results.json``.

The files differ in field names and answer types (MATH-500: LaTeX strings;
AMC23: floats such as ``27.0``; AIME25: ints; GSM8K: a solution ending in
``#### 18``); every loader returns the columns ``id``, ``prompt`` (the bare
problem text) and ``answer`` (a normalised string: ``"27"``, ``"70"``,
``"\\frac{14}{3}"``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset

from ..data import AnswerFormat, load_prompts

ENV_VAR = "CONTRASTIVE_RLVR_BENCHMARKS_DIR"
#: The benchmarks shipped inside the package (MIT-licensed; data/README.md).
PACKAGED_DIR = Path(__file__).resolve().parent / "data"
PACKAGED = ("math500", "gsm8k")
#: Suffixes that make a ``--benchmarks`` item a file rather than a name.
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
#: Keys of a field mapping (``--benchmark-fields prompt=question,answer=answer``).
FIELD_KEYS = ("prompt", "answer", "id", "format")


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
    """The folder given (``data_dir``) or named by ``$CONTRASTIVE_RLVR_BENCHMARKS_DIR``, or
    None (then names are read from the package's copies or the Hub)."""
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
    return None


def get_benchmark_spec(name: str) -> BenchmarkSpec:
    """The spec of benchmark ``name``; an unknown name raises listing the known ones."""
    if name not in BENCHMARKS:
        raise ValueError(
            f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}, or give a "
            f"file ({'/'.join(FILE_SUFFIXES)}, or NAME=PATH)"
        )
    return BENCHMARKS[name]


@dataclass(frozen=True)
class BenchmarkSource:
    """Where one ``--benchmarks`` item is read from and how its fields map."""

    name: str
    source: str
    """A file path, or a Hub dataset id (``origin == "hub"``)."""
    origin: str
    """``file`` (given as a path), ``benchmarks_dir``, ``env``, ``packaged`` or ``hub``."""
    prompt_field: str | None
    answer_field: str | None
    answer_format: AnswerFormat
    id_field: str | None
    split: str = "train"
    hub_config: str | None = None


def is_file_item(item: str) -> bool:
    """Whether a ``--benchmarks`` item names a file (``NAME=PATH`` or a data-file path)."""
    return "=" in item or item.lower().endswith(FILE_SUFFIXES) or "/" in item


def parse_fields(text: str | dict | None) -> dict[str, str]:
    """A field mapping from ``prompt=question,answer=answer,id=qid,format=gsm8k`` (or a dict);
    an unknown key or a bad format raises naming it."""
    if not text:
        return {}
    pairs = (
        text.items()
        if isinstance(text, dict)
        else (part.split("=", 1) if "=" in part else (part, None) for part in text.split(","))
    )
    fields = {}
    for key, value in pairs:
        key = key.strip()
        if key not in FIELD_KEYS or not value or not str(value).strip():
            raise ValueError(
                f"benchmark_fields: {key!r} is not KEY=VALUE with KEY one of "
                f"{', '.join(FIELD_KEYS)} (e.g. prompt=question,answer=answer,format=gsm8k)"
            )
        fields[key] = str(value).strip()
    if "format" in fields and fields["format"] not in ("auto", "gsm8k", "plain"):
        raise ValueError(f"benchmark_fields: format={fields['format']!r}; use auto, gsm8k or plain")
    return fields


#: A benchmark's name names its files (samples/NAME.jsonl, generations/NAME-*.jsonl).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*")


def check_benchmark_name(name: str, item: str) -> None:
    """Refuse a benchmark name that is not a plain file name (``../../X`` would write its
    samples outside the output folder), naming the item and the fix."""
    if not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"benchmarks: {item!r} names the benchmark {name!r}, which is not a plain name "
            "(letters, digits, _ . + -, no '..' or '/'); its files are named after it: give "
            "NAME=PATH with a plain NAME"
        )


def resolve_benchmark(
    item: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    fields: str | dict | None = None,
) -> BenchmarkSource:
    """Where ``item`` (a name or a file, see the module docstring) is read from. Raises a
    one-line error naming what is missing and where to put it."""
    mapping = parse_fields(fields)
    if is_file_item(item):
        name, _, path_text = item.rpartition("=") if "=" in item else ("", "", item)
        path = Path(path_text)
        if not path.is_file():
            raise ValueError(f"benchmark file {str(path)!r} does not exist")
        check_benchmark_name(name or path.stem, item)
        return BenchmarkSource(
            name=name or path.stem,
            source=str(path),
            origin="file",
            prompt_field=mapping.get("prompt"),
            answer_field=mapping.get("answer"),
            answer_format=mapping.get("format", "auto"),  # type: ignore[arg-type]
            id_field=mapping.get("id"),
        )
    spec = get_benchmark_spec(item)
    directory = benchmarks_dir(data_dir)
    origin = "benchmarks_dir" if data_dir is not None else "env"
    if directory is not None and (directory / spec.filename).is_file():
        local: Path | None = directory / spec.filename
    elif spec.name in PACKAGED:
        local, origin = PACKAGED_DIR / spec.filename, "packaged"
    else:
        local = None
    if local is not None:
        return BenchmarkSource(
            spec.name,
            str(local),
            origin,
            spec.prompt_field,
            spec.answer_field,
            spec.answer_format,
            spec.id_field,
        )
    where = (
        f"{directory / spec.filename} not found"
        if directory is not None
        else "no --benchmarks-dir (or $" + ENV_VAR + ") given"
    )
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise ValueError(
            f"benchmark {spec.name!r} is not shipped with the package (only "
            f"{', '.join(PACKAGED)} are) and {where}; HF_HUB_OFFLINE is set, so it cannot be "
            f"downloaded from {spec.hub_id}: put {spec.filename} in a folder and pass "
            "--benchmarks-dir, or unset HF_HUB_OFFLINE to download it"
        )
    # The Hub copies name their fields differently from the local files: detect them.
    return BenchmarkSource(
        spec.name,
        spec.hub_id,
        "hub",
        None,
        None,
        spec.answer_format,
        None,
        spec.hub_split,
        spec.hub_config,
    )


def load_benchmark(
    name: str,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    limit: int | None = None,
    fields: str | dict | None = None,
) -> Dataset:
    """Benchmark ``name`` (a name or a file) as a Dataset of ``id``, ``prompt``, ``answer``
    (first ``limit`` rows)."""
    return load_source(resolve_benchmark(name, data_dir=data_dir, fields=fields), limit=limit)


def load_source(source: BenchmarkSource, *, limit: int | None = None) -> Dataset:
    """The rows of a resolved benchmark as ``id``, ``prompt``, ``answer``."""
    loaded = load_prompts(
        source.source,
        prompt_field=source.prompt_field,
        answer_field=source.answer_field,
        answer_format=source.answer_format,
        id_field=source.id_field,
        split=source.split,
        hub_config=source.hub_config,
        limit=limit,
    )
    return loaded.dataset
