"""The ``eval`` command: sample n completions per problem, verify, report avg@n and pass@k.

Steps per benchmark: load the problems (:mod:`.benchmarks`), build prompts
with the model's chat template, sample the ``(problem, seed)`` pairs that the
cache (:mod:`.cache`) does not hold yet, score every sample with
:class:`~contrastive_rlvr.rewards.MathVerifyReward`, summarise
(:mod:`.report`). Writes ``results.json`` and ``samples/<benchmark>.jsonl``
(each sample with its extracted answer and verifier status) under
``output_dir``; generations are cached in ``output_dir/generations``, keyed by
the content of the model's files and every sampling setting (:mod:`.cache`).

Every input is checked before the model loads: the output directory is
writable, the benchmarks directory and each benchmark file are there and
read, a local model path exists.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..generation import (
    DEFAULT_INSTRUCTION,
    Generator,
    HFGenerator,
    VLLMGenerator,
    build_prompt,
    vllm_available,
)
from ..rewards import AnswerReading, MathVerifyReward
from ..run_files import adopt, open_atomic, read_bytes, write_file, writer_lock
from .cache import (
    HASH_INDEX,
    GenerationCache,
    fingerprint,
    state_fingerprint,
    weights_fingerprint,
)
from .report import BenchmarkReport, results_table, summarize
from .suites import (
    BenchmarkSource,
    benchmarks_dir,
    get_benchmark_spec,
    is_file_item,
    load_source,
    parse_fields,
    resolve_benchmark,
)

logger = logging.getLogger(__name__)
Backend = Literal["auto", "hf", "vllm"]
#: The most samples per problem: far above any published avg@n or pass@k (1024), and a
#: bound on what one evaluation holds in memory (``--n 1000000000`` is refused up front).
MAX_N = 65536


@dataclass
class EvalConfig:
    """Everything ``contrastive-rlvr eval`` takes. Defaults follow the papers' evaluation."""

    model: str
    """HF model id, local directory, ``.gguf`` file, or alias such as ``smollm2-135m``."""
    benchmarks: list[str] = field(default_factory=lambda: ["math500"])
    """Benchmark names (``evaluation.suites.BENCHMARKS``) or files (a ``.jsonl``,
    ``.json`` or ``.parquet`` path, or ``NAME=PATH``)."""
    benchmark_fields: str | None = None
    """Field mapping of the file benchmarks: ``prompt=question,answer=answer,id=qid,
    format=gsm8k`` (unset: detected as for training data)."""
    n: int = 32
    """Samples per problem; sample j uses seed j."""
    limit: int | None = None
    """Evaluate only the first ``limit`` problems of each benchmark."""
    max_new_tokens: int = 4096
    temperature: float = 0.6
    top_p: float = 0.95
    batch_size: int = 16
    """Prompts per ``generate`` call (HF backend)."""
    output_dir: str = "eval_results"
    benchmarks_dir: str | None = None
    """Folder of benchmark jsonl files (else $CONTRASTIVE_RLVR_BENCHMARKS_DIR, ../shared/...)."""
    backend: Backend = "auto"
    """``hf``, ``vllm``, or ``auto``: vLLM when installed with a GPU, else HF."""
    dtype: str = "auto"
    """``auto``: float32 on CPU, the checkpoint's dtype on GPU; or float32/bf16/fp16."""
    chat_template: bool = True
    """Wrap prompts in the model's chat template when it has one."""
    instruction: str = DEFAULT_INSTRUCTION
    reward_timeout: int = 3
    reward_workers: int = 2
    # How answers are read: the same options, with the same defaults, as ``train``'s
    # (rewards.extract.AnswerReading; precedence in the README's Rewards section).
    last_number_fallback: bool = AnswerReading.last_number_fallback
    """Without a tag, box, answer line or prose answer: score the last number."""
    answer_line: bool = AnswerReading.answer_line
    """Read a last ``Answer: X`` line when a completion has no ``<answer>`` and no box."""
    answer_phrase: bool = AnswerReading.answer_phrase
    """Then read the last "the answer is X" of the prose."""
    progress: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.n <= MAX_N:
            raise ValueError(
                f"n={self.n} is invalid: samples per problem must be in 1..{MAX_N} (each is "
                "generated, kept in memory and written); give a smaller --n"
            )
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            # nan would decode greedily and write invalid JSON (NaN) into results.json
            raise ValueError(
                f"temperature must be a finite number >= 0 (0: greedy), got {self.temperature}"
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.backend not in ("auto", "hf", "vllm"):
            raise ValueError(f"backend must be auto, hf or vllm, got {self.backend!r}")
        if not self.benchmarks:
            raise ValueError("benchmarks: give at least one benchmark name")
        for name in self.benchmarks:
            if not is_file_item(name):
                get_benchmark_spec(name)
        parse_fields(self.benchmark_fields)
        if self.benchmark_fields and not any(map(is_file_item, self.benchmarks)):
            raise ValueError(
                f"benchmark_fields={self.benchmark_fields!r} maps the fields of a benchmark "
                f"file, but benchmarks={','.join(self.benchmarks)} names none (named "
                "benchmarks have their own fields): give a file or drop benchmark_fields"
            )

    def generation_setting(self, backend: str, weights: str) -> dict[str, Any]:
        """What determines a sample (the cache key), apart from problem and seed:
        ``weights`` (the fingerprint of the model's files or tensors) and every sampling
        setting. HF draws a batch from one seed, so its batch size changes the samples."""
        keys = ("model", "max_new_tokens", "temperature", "top_p", "dtype")
        keys += ("chat_template", "instruction")
        setting = {k: getattr(self, k) for k in keys}
        setting.update(backend=backend, weights=weights, top_k=0)
        if backend == "hf":
            setting["batch_size"] = self.batch_size
        return setting


@dataclass
class EvalResult:
    reports: list[BenchmarkReport]
    results_path: Path


def _make_generator(
    config: EvalConfig, model: Any = None, tokenizer: Any = None
) -> tuple[Generator, Any, str]:
    if (model is None) != (tokenizer is None):
        raise ValueError("pass both model and tokenizer to evaluate(), or neither")
    backend = config.backend
    if backend == "auto":
        backend = "vllm" if model is None and vllm_available() else "hf"
    if backend == "vllm":
        from ..models import ALIASES

        if config.model in ALIASES or config.model.endswith(".gguf"):
            raise ValueError(
                f"the vLLM backend takes a model id or directory, not {config.model!r}"
            )
        gen = VLLMGenerator(
            config.model,
            max_new_tokens=config.max_new_tokens,
            temperature=config.temperature,
            top_p=config.top_p,
            dtype=config.dtype,
        )
        return gen, gen.tokenizer, backend
    if model is None:
        import torch

        from ..models import load_model_and_tokenizer

        cuda = torch.cuda.is_available()
        dtype = config.dtype if config.dtype != "auto" or cuda else "float32"
        model, tokenizer = load_model_and_tokenizer(
            config.model, dtype=dtype, device="cuda" if cuda else None
        )
    gen = HFGenerator(
        model,
        tokenizer,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        batch_size=config.batch_size,
        chat=config.chat_template and bool(getattr(tokenizer, "chat_template", None)),
    )
    return gen, tokenizer, backend


def _sample_all(
    generator: Generator,
    cache: GenerationCache,
    ids: list[str],
    prompts: list[str],
    n: int,
    batch_size: int,
    progress: Progress,
    label: str,
) -> list[list[str]]:
    """Completions ``[problem][seed]``, generating only what the cache lacks.

    Problems go in fixed batches of ``batch_size`` (0..B-1, B..2B-1, ...), and a batch
    is generated whole when any of its samples is missing or was drawn in another batch
    (HF draws a batch from one seed): so ``--limit 24`` after ``--limit 20`` gives the
    samples a fresh ``--limit 24`` gives, and a resumed run those of an uninterrupted one.
    """
    chunks = [list(range(s, min(s + batch_size, len(ids)))) for s in range(0, len(ids), batch_size)]
    keys = [fingerprint({"batch": [ids[i] for i in chunk]}) for chunk in chunks]
    todo = {
        s: [
            c for c, key in enumerate(keys) if any(cache.batch(ids[i], s) != key for i in chunks[c])
        ]
        for s in range(n)
    }
    cached = len(ids) * n - sum(len(chunks[c]) for todo_s in todo.values() for c in todo_s)
    task = progress.add_task(label, total=len(ids) * n, completed=cached)
    for seed, missing in todo.items():
        for c in missing:  # each batch saved as soon as it is done (resume point)
            chunk = chunks[c]
            texts = generator.generate([prompts[i] for i in chunk], seed)
            cache.add(((ids[i], seed, text) for i, text in zip(chunk, texts, strict=True)), keys[c])
            progress.advance(task, len(chunk))
    return [[cache.get(pid, seed) or "" for seed in range(n)] for pid in ids]


def _score(
    reward: MathVerifyReward,
    benchmark: str,
    ids: list[str],
    golds: list[str],
    completions: list[list[str]],
    samples_path: Path,
) -> BenchmarkReport:
    n = len(completions[0])
    flat = [c for row in completions for c in row]
    flat_golds = [g for g in golds for _ in range(n)]
    scores = reward.score(flat, flat_golds)
    correct = [[scores[i * n + j].reward == 1.0 for j in range(n)] for i in range(len(ids))]
    unparsed = [[scores[i * n + j].unparsed for j in range(n)] for i in range(len(ids))]
    events = Counter(s.status for s in scores)
    folder = samples_path.parent.parent
    with open_atomic(folder, Path(samples_path.parent.name) / samples_path.name) as f:
        for i, pid in enumerate(ids):
            for j in range(n):
                s = scores[i * n + j]
                rec = {
                    "problem_id": pid,
                    "seed": j,
                    "gold": golds[i],
                    "answer": s.answer,
                    "status": s.status,
                    "reward": s.reward,
                    "completion": completions[i][j],
                }
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return summarize(benchmark, correct, unparsed, dict(events))


def _check_inputs(
    config: EvalConfig, out_dir: Path, model: Any
) -> tuple[dict[str, Any], dict[str, BenchmarkSource]]:
    """What can be checked before the model loads; returns the benchmarks' problems and
    where each was read from."""
    from ..input_checks import check_model_path, check_output_dir

    check_output_dir(out_dir)
    benchmarks_dir(config.benchmarks_dir)  # a given directory must exist
    sources: dict[str, BenchmarkSource] = {}
    for item in config.benchmarks:
        src = resolve_benchmark(
            item, data_dir=config.benchmarks_dir, fields=config.benchmark_fields
        )
        if src.name in sources:
            raise ValueError(
                f"benchmarks: two items are named {src.name!r} ({sources[src.name].source} "
                f"and {src.source}); name one NAME=PATH"
            )
        sources[src.name] = src
    datasets = {name: load_source(src, limit=config.limit) for name, src in sources.items()}
    _check_same_model(out_dir, config.model)
    if model is None:
        check_model_path(config.model)
        problems = _saved_weights_problems(Path(config.model).expanduser())
        if problems:
            raise ValueError(f"model={config.model!r}: its weights are not whole: {problems}")
    return datasets, sources


def _file_digest(path: str) -> str:
    """sha256 of a benchmark file: its samples are cached under its content, so an edited
    file (or another with the same name) is not answered from another's cache."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _folder_read(sources: dict[str, BenchmarkSource]) -> str | None:
    """The one folder every local benchmark was read from, or None (several, or the Hub)."""
    folders = {str(Path(s.source).parent) for s in sources.values() if s.origin != "hub"}
    return folders.pop() if len(folders) == 1 else None


def _check_same_model(out_dir: Path, model: str) -> None:
    """A folder holds the evaluation of one model: a folder with the results of another
    model is refused, so that its samples are never left beside this one's results. (New
    weights under the same name are this model's: the cache is keyed by their content.)"""
    try:
        held = json.loads(read_bytes(out_dir / "results.json"))  # a regular file only
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return
    held_model = (held.get("config") or {}).get("model") if isinstance(held, dict) else None
    if held_model == model and "benchmarks" in held:  # an eval folder of an earlier version
        adopt(out_dir, ["results.json"])
        for sub in ("samples", "generations"):
            folder = out_dir / sub
            adopt(folder, [p.name for p in folder.iterdir()] if folder.is_dir() else [])
    if held_model is not None and held_model != model:
        raise ValueError(
            f"output_dir={str(out_dir)!r} holds the evaluation of model={held_model!r}: "
            "choose another output_dir for this model (results and samples of two models "
            "are never mixed in one folder)"
        )


def _saved_weights_problems(path: Path) -> str | None:
    """Why the weights of a saved model folder are truncated or missing (a save cut short
    by a kill or a full disk), checked from their headers before anything loads."""
    from ..checkpoints import weights_problems

    if not path.is_dir():
        return None
    return "; ".join(weights_problems(path)) or None


def evaluate(
    config: EvalConfig,
    *,
    model: Any = None,
    tokenizer: Any = None,
    console: Console | None = None,
) -> EvalResult:
    """Run the evaluation of ``config``; prints the table and returns the reports.

    ``model``/``tokenizer`` may be passed in (e.g. by a trainer) instead of
    being loaded from ``config.model``; ``config.model`` then only names them.
    """
    console = console or Console()
    out_dir = Path(config.output_dir)
    datasets, sources = _check_inputs(config, out_dir, model)  # before any model loads
    # One writer per folder: a live train or eval there refuses this one, before any model.
    with writer_lock(out_dir, in_use=IN_USE):
        return _evaluate_locked(config, out_dir, datasets, sources, model, tokenizer, console)


#: The error of an eval into a folder a live process writes.
IN_USE = (
    "output_dir={path!r} is in use by another run or evaluation (a live process holds its "
    "lock); wait for it to end, or choose another output_dir"
)


def _evaluate_locked(
    config: EvalConfig,
    out_dir: Path,
    datasets: dict[str, Any],
    sources: dict[str, BenchmarkSource],
    model: Any,
    tokenizer: Any,
    console: Console,
) -> EvalResult:
    """:func:`evaluate` once the output folder is locked."""
    index = out_dir / "generations" / HASH_INDEX
    before = None if model is not None else weights_fingerprint(config.model, index)
    generator, tokenizer, backend = _make_generator(config, model, tokenizer)
    chat = config.chat_template and bool(getattr(tokenizer, "chat_template", None))
    if model is not None:
        weights = state_fingerprint(model)
    else:
        weights = weights_fingerprint(config.model, index)
        if weights is None:
            raise ValueError(
                f"model={config.model!r}: no files found on disk to fingerprint the weights "
                "(the generation cache is keyed by their content)"
            )
        if before is not None and before != weights:
            raise ValueError(
                f"model={config.model!r}: its files changed while the model loaded; run the "
                "evaluation again once they are written"
            )
    setting = config.generation_setting(backend, weights)
    reports = []
    with (
        MathVerifyReward(
            timeout=config.reward_timeout,
            workers=config.reward_workers,
            last_number_fallback=config.last_number_fallback,
            answer_line=config.answer_line,
            answer_phrase=config.answer_phrase,
        ) as reward,
        Progress(
            TextColumn("{task.description}", markup=False),  # names as written
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not config.progress,
        ) as progress,
    ):
        for name, ds in datasets.items():
            ids, golds = list(ds["id"]), list(ds["answer"])
            prompts = [build_prompt(tokenizer, p, config.instruction, chat) for p in ds["prompt"]]
            src = sources[name]
            file_key = {} if src.origin == "hub" else {"benchmark_file": _file_digest(src.source)}
            cache = GenerationCache(out_dir / "generations", name, {**setting, **file_key})
            completions = _sample_all(
                generator, cache, ids, prompts, config.n, config.batch_size, progress, name
            )
            report = _score(
                reward, name, ids, golds, completions, out_dir / "samples" / f"{name}.jsonl"
            )
            report.source = src.source
            reports.append(report)
    results_path = out_dir / "results.json"
    payload = {
        "config": asdict(config),
        "backend": backend,
        "weights": weights,
        # The folder or file each benchmark was read from (config.benchmarks_dir is only
        # what was given; None there is not "nothing read").
        "benchmarks_dir": _folder_read(sources),
        "benchmark_sources": {
            n: {"source": s.source, "origin": s.origin} for n, s in sources.items()
        },
        "benchmarks": {r.benchmark: r.to_json() for r in reports},
    }
    write_file(out_dir, results_path.name, json.dumps(payload, indent=2))
    console.print(results_table(reports, title=f"{config.model}  (n={config.n})"))
    for name, src in sources.items():  # paths as written: no rich markup
        console.print(f"{name}: read from {src.source} ({src.origin})", markup=False)
    console.print(f"results: {results_path}", markup=False)
    return EvalResult(reports=reports, results_path=results_path)
