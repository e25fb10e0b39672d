"""Prompt datasets from jsonl, json, parquet, csv, a local dataset folder (``save_to_disk``
output, a Hub repository's files) or a Hugging Face dataset name.

Every source is read by ``datasets.load_dataset`` as a TRL script reads it (local files
through its ``json``, ``parquet`` and ``csv`` builders, so column types and nested
columns are the ones ``datasets`` infers), and becomes a :class:`datasets.Dataset` with
the columns ``id``,
``prompt`` and ``answer`` (a string), which is what the trainer and
:class:`~contrastive_rlvr.rewards.MathVerifyReward` expect, plus every other
column of the source unchanged: TRL hands each column to the reward functions
as a keyword argument, and the stages (OC-GRPO's ``solution``) read them.

Field mapping: the prompt comes from ``prompt_field`` or else the first of
``prompt``, ``messages``, ``problem``, ``question`` that a row has; the answer
from ``answer_field`` or else ``answer``, ``final_answer``, ``target``. A field
name may be a dotted path into nested columns: ``reward_model.ground_truth`` reads
``row["reward_model"]["ground_truth"]`` (DAPO-Math-17k's and verl's layout; a column
whose own name has the dots wins). A
prompt is either a string (TRL's standard format) or a list of
``{"role", "content"}`` messages (TRL's conversational format, system turns
and all); from a ``messages`` conversation the trailing assistant turns are
dropped (they are the reply, not the prompt). The chat template is not applied
here: TRL applies it once, when it tokenizes the batch. Answers
written as GSM8K solutions (reasoning, then ``#### 18``) are reduced to the
number after ``####`` (``answer_format="auto"`` does so when the marker is
there, ``"gsm8k"`` requires it, ``"plain"`` never does).

A malformed row (bad JSON, not an object, a missing or empty field, a wrong
type, a line that is not valid UTF-8) raises ``ValueError`` naming the file,
the line (parquet: the row) and the field or byte: ``.jsonl`` and ``.json`` files are
checked line by line before ``datasets`` reads them, and an error of ``datasets`` itself
becomes one line naming the file. With
``skip_bad_rows=True`` such rows are skipped, logged, and counted in
:attr:`LoadedPrompts.skipped`. ``.jsonl`` and ``.json`` files are UTF-8; a
byte-order mark at the start (as some Windows editors write) is accepted and
dropped. A ``.json`` file is one document (a list of objects), so a bad byte in it is
an error (naming the line) even with ``skip_bad_rows``; a ``.json`` file of JSON lines
(what ``Dataset.to_json`` writes) is read as ``.jsonl``. With rows skipped, ``datasets``
reads a copy of the file without them (in a temporary folder, removed after).

Data identity: ``datasets`` keys its cache of a local file on the file's path and
modification time, so a file rewritten with its old mtime (``touch -r``, an archive or a
sync that keeps timestamps) would be read from the cache as it was. A local file is
therefore hashed (:func:`file_fingerprint`: size and SHA-256 of its bytes) and read
through a cache folder of its own content (:func:`content_cache_dir`): new bytes, a new
cache. :attr:`LoadedPrompts.fingerprint` carries the hash, which a run records
(``data.json``) and a resume or ``compare`` checks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset

from .pipe_input import refuse_non_regular
from .rewards.extract import normalize_answer

logger = logging.getLogger(__name__)

PROMPT_FIELDS: tuple[str, ...] = ("prompt", "messages", "problem", "question")
ANSWER_FIELDS: tuple[str, ...] = ("answer", "final_answer", "target")
AnswerFormat = Literal["auto", "gsm8k", "plain"]
ANSWER_FORMATS: tuple[str, ...] = ("auto", "gsm8k", "plain")
_GSM8K_MARKER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)
# "1,234" in GSM8K answers is a thousands separator, not a tuple.
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


@dataclass(frozen=True)
class LoadedPrompts:
    """A loaded prompt dataset, how many bad rows were skipped to get it, and the identity
    of what was read (:func:`file_fingerprint` of a local file; for a Hub dataset its name,
    config, split and ``datasets``' fingerprint of the loaded table)."""

    dataset: Dataset
    skipped: int
    source: str
    #: How the rows' fields were read: ``{"prompt": {column: rows}, "answer": {column:
    #: rows}, "id": column or None, "reduced": rows whose answer was reduced to the
    #: number after GSM8K's ``####``}`` (the run logs it once at its start).
    fields: dict[str, Any] = dataclass_field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None


#: Bytes read at a time when hashing a data file.
_HASH_CHUNK = 1 << 20


def file_fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"path", "size", "sha256"}`` of a local file's bytes (the path resolved): what
    identifies the data a run read, whatever its name and timestamps say."""
    path = Path(path)
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"path": str(path.resolve()), "size": size, "sha256": digest.hexdigest()}


def content_cache_dir(builder: str, fingerprint: dict[str, Any]) -> str:
    """A ``datasets`` cache folder of one file content: ``datasets`` keys its own cache on
    path and mtime, so within a folder of one content a cache hit is always that content."""
    from datasets import config as datasets_config

    root = Path(datasets_config.HF_DATASETS_CACHE) / "contrastive-rlvr-content"
    return str(root / f"{builder}-{fingerprint['sha256'][:32]}")


def fingerprint_differences(saved: dict[str, Any], now: dict[str, Any]) -> str | None:
    """How the data ``now`` differs from what a run recorded (None: the same content)."""
    keys = ("sha256", "fingerprint")
    if all(saved.get(k) == now.get(k) for k in keys):
        return None
    if "sha256" in now:
        was = f"{saved.get('size')} bytes, sha256 {str(saved.get('sha256'))[:12]}"
        return f"{was} then, {now['size']} bytes, sha256 {now['sha256'][:12]} now"
    return f"datasets fingerprint {saved.get('fingerprint')} then, {now.get('fingerprint')} now"


def gsm8k_final_answer(solution: str) -> str | None:
    """The number after the last ``####`` of a GSM8K solution, thousands commas removed."""
    marker = solution.rfind("####")
    if marker == -1:
        return None
    m = _GSM8K_MARKER.match(solution, marker)
    if m is None:
        return None
    return _THOUSANDS_COMMA.sub("", m.group(1))


def _pick_field(row: Mapping[str, Any], explicit: str | None, candidates: Sequence[str]) -> str:
    if explicit is not None:
        return explicit
    for name in candidates:
        if row.get(name) is not None:
            return name
    return candidates[0]  # reported as the missing field


def _present(row: Mapping[str, Any]) -> list[str]:
    """The fields a row has (``datasets`` gives every row every column, None where absent)."""
    return sorted(k for k, v in row.items() if v is not None)


def field_value(row: Mapping[str, Any], name: str, where: str, hint: str = "") -> Any:
    """``row[name]``, or for a dotted ``name`` the nested value it leads to
    (``reward_model.ground_truth``: ``row["reward_model"]["ground_truth"]``); a column
    whose own name has the dots wins. A field that is absent or None raises ``ValueError``
    naming the row, the missing key and the keys present where it was looked for."""
    if row.get(name) is not None:
        return row[name]
    parts = name.split(".")
    if len(parts) == 1 or name in row:
        raise ValueError(f"{where}: missing field {name!r}{hint}; row has fields {_present(row)}")
    value: Any = row
    for depth, part in enumerate(parts):
        if not isinstance(value, Mapping) or value.get(part) is None:
            above = ".".join(parts[:depth]) or "the row"
            keys = _present(value) if isinstance(value, Mapping) else []
            what = f"keys {keys}" if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(
                f"{where}: missing field {name!r}: no {part!r} in {above} (which has {what}); "
                f"row has fields {_present(row)}"
            )
        value = value[part]
    return value


def _check_prompt(value: Any, field: str, where: str) -> str | list[dict[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"{where}: field {field!r} is empty")
        return value
    if (
        isinstance(value, list)
        and value
        and all(
            isinstance(m, Mapping) and isinstance(m.get("content"), str) and "role" in m
            for m in value
        )
    ):
        return [{"role": str(m["role"]), "content": m["content"]} for m in value]
    raise ValueError(
        f"{where}: field {field!r} must be a string or a list of {{'role', 'content'}} "
        f"messages, got {type(value).__name__}"
    )


def row_to_example(
    row: Any,
    where: str,
    *,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    answer_format: AnswerFormat = "auto",
) -> dict[str, Any]:
    """``{"prompt", "answer"}`` from one raw row; ``where`` ("file line N") prefixes errors.
    A field may be a dotted path into nested columns (:func:`field_value`)."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    p_field = _pick_field(row, prompt_field, PROMPT_FIELDS)
    a_field = _pick_field(row, answer_field, ANSWER_FIELDS)
    values = []
    for field, options in ((p_field, prompt_field), (a_field, answer_field)):
        hint = "" if options else f" (looked for {field!r} and its alternatives)"
        # A column that is there (null too) has its value checked, and named, below.
        values.append(row[field] if field in row else field_value(row, field, where, hint))
    prompt = _check_prompt(values[0], p_field, where)
    if p_field == "messages" and isinstance(prompt, list):
        # A whole conversation: the prompt is what comes before the assistant's reply.
        while prompt and prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
        if not prompt:
            raise ValueError(f"{where}: field 'messages' holds only assistant turns, no prompt")
    answer = normalize_answer(values[1], field=a_field, where=where)
    if answer_format != "plain":
        final = gsm8k_final_answer(answer)
        if final is not None:
            answer = final
        elif answer_format == "gsm8k":
            raise ValueError(f"{where}: field {a_field!r} has no '#### <answer>' line")
    return {"prompt": prompt, "answer": answer}


_BOM = b"\xef\xbb\xbf"


def _utf8_error(path: Path, data: bytes, error: UnicodeDecodeError, first_line: int) -> ValueError:
    """A one-line error naming the line and column of the first bad byte, and the fix.

    ``data`` starts at line ``first_line`` of the file; columns count the
    characters before the bad byte, as an editor shows them.
    """
    line_no = first_line + data.count(b"\n", 0, error.start)
    line_start = data.rfind(b"\n", 0, error.start) + 1
    column = len(data[line_start : error.start].decode("utf-8", errors="replace")) + 1
    utf16 = line_no == 1 and data[:2] in (b"\xff\xfe", b"\xfe\xff")
    hint = " (it starts with a UTF-16 byte-order mark)" if utf16 else ""
    return ValueError(
        f"{path} line {line_no}: invalid UTF-8 (byte 0x{data[error.start]:02x} at column "
        f"{column}){hint}; save the file as UTF-8"
    )


def _jsonl_lines(path: Path, blanks: list[int]) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` per non-blank line; a row that is a ``ValueError`` could not be read.
    The numbers of blank lines go to ``blanks``."""
    # Read as bytes and decode line by line, so that one badly encoded line
    # is an error naming that line (or, with skip_bad_rows, a skipped row)
    # rather than a UnicodeDecodeError from somewhere inside the file.
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]  # a byte-order mark starts the file, not the row
            if not raw.strip():
                blanks.append(line_no)
                continue
            where = f"{path} line {line_no}"
            try:
                row = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                yield where, _utf8_error(path, raw, e, line_no)
                continue
            except json.JSONDecodeError as e:
                yield where, ValueError(f"{where}: invalid JSON ({e.msg} at column {e.colno})")
                continue
            if not isinstance(row, dict):
                row = ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            yield where, row


def _json_items(path: Path) -> Iterator[tuple[str, Any]] | None:
    """``(where, row)`` per item of a ``.json`` list; None for a file of JSON lines."""
    raw = path.read_bytes().removeprefix(_BOM)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _utf8_error(path, raw, e, 1) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # one object per line, as Dataset.to_json writes
            return None
        raise ValueError(f"{path} line {e.lineno}: invalid JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise ValueError(f"{path}: a .json prompt file must hold a list of objects (or JSON lines)")
    return (
        (f"{path} item {i}", row if isinstance(row, dict) else ValueError(
            f"{path} item {i}: expected a JSON object, got {type(row).__name__}"
        ))
        for i, row in enumerate(data, start=1)
    )  # fmt: skip


def _datasets_error(source: object, err: Exception) -> ValueError:
    """An error of ``datasets.load_dataset`` as one line naming the file."""
    cause: BaseException = err
    while cause.__cause__ is not None:  # DatasetGenerationError wraps the reader's error
        cause = cause.__cause__
    text = " ".join(str(cause).split())[:300] or type(cause).__name__
    return ValueError(f"{source}: datasets.load_dataset could not read it ({text})")


def _load_local(builder: str, path: Path, **kwargs: Any) -> Dataset:
    from datasets import load_dataset

    try:
        return load_dataset(builder, data_files=str(path), split="train", **kwargs)
    except Exception as err:
        raise _datasets_error(path, err) from err


@dataclass
class _Read:
    """A source as ``datasets`` read it: the rows, where each came from (``wheres``; its
    place among the source's rows, unreadable ones counted, in ``positions``), how many
    rows could not be read (skipped), and for JSON the rows as written (``raw``: the
    fields this loader reads are checked there, so a null is told from an absent key)."""

    dataset: Dataset
    wheres: list[str]
    positions: list[int]
    skipped: int = 0
    raw: list[dict[str, Any]] | None = None
    fingerprint: dict[str, Any] | None = None


def _skip_or_raise(error: ValueError, skip_bad_rows: bool) -> None:
    if not skip_bad_rows:
        raise error
    logger.warning("skipping bad row: %s", error)


def _read_json(path: Path, skip_bad_rows: bool, fingerprint: dict[str, Any]) -> _Read:
    """A ``.jsonl`` (or ``.json``) file checked row by row, then read by ``datasets``: the
    file itself (through the cache of its content) when every row is good, else a copy of
    the good rows as JSON lines."""
    items = _json_items(path) if path.suffix.lower() == ".json" else None
    blanks: list[int] = []
    rows = items if items is not None else _jsonl_lines(path, blanks)
    wheres, positions, good, skipped = [], [], [], 0
    for position, (where, row) in enumerate(rows):
        if isinstance(row, ValueError):
            _skip_or_raise(row, skip_bad_rows)
            skipped += 1
            continue
        wheres.append(where)
        positions.append(position)
        good.append(row)
    if not good:
        raise ValueError(f"{path}: no usable rows (skipped {skipped})")
    # datasets' reader of a column with mixed types (its Json feature) fails on blank lines
    # and byte-order marks: such a file is read as a clean copy too.
    with path.open("rb") as f:
        clean = not skipped and not blanks and not f.read(len(_BOM)).startswith(_BOM)
    if clean:
        cache = content_cache_dir("json", fingerprint)
        read = _Read(_load_local("json", path, cache_dir=cache), wheres, positions, raw=good)
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="contrastive-rlvr-data-") as tmp:
            copy = Path(tmp) / f"{path.stem}.jsonl"
            copy.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in good))
            dataset = _load_local("json", copy, cache_dir=tmp, keep_in_memory=True)
        read = _Read(dataset, wheres, positions, skipped, raw=good)
    if len(read.dataset) != len(wheres):
        raise ValueError(
            f"{path}: datasets.load_dataset read {len(read.dataset)} rows where the file has "
            f"{len(wheres)} JSON objects"
        )
    return read


def _csv_wheres(path: Path, rows: int) -> list[str]:
    """Where each of the ``rows`` data rows of a csv file is, as an editor numbers its
    lines: a quoted field may hold line breaks, so a row may span lines (``lines 3-5``).
    Blank lines hold no row. When the count of rows read here is not the count
    ``datasets`` read, rows are named by number instead (``row 2``), never by a wrong
    line."""
    import csv

    spans: list[tuple[int, int]] = []
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f)
        end = 0
        try:
            for record in reader:
                start, end = end + 1, reader.line_num
                if record:
                    spans.append((start, end))
        except csv.Error:
            spans = []
    spans = spans[1:]  # the header
    if len(spans) != rows:
        return [f"{path} row {i}" for i in range(1, rows + 1)]
    return [
        f"{path} line {start}" if start == end else f"{path} lines {start}-{end}"
        for start, end in spans
    ]


def _hub_dataset(name: str, config: str | None, split: str) -> Dataset:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise ValueError(
            f"{name!r} is not a local file, and HF_HUB_OFFLINE is set so it cannot be "
            "downloaded; pass a .jsonl, .json, .parquet or .csv path"
        )
    from datasets import load_dataset

    try:
        return load_dataset(name, config, split=split)
    except Exception as err:
        raise _datasets_error(f"{name!r} (config {config!r}, split {split!r})", err) from err


_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


#: The split a source without splits (one file, a saved ``Dataset``) stands for.
DEFAULT_SPLIT = "train"


def _no_configs(path: Path, hub_config: str | None, split: str, what: str) -> None:
    """A source that has no configurations (and, ``what`` says, maybe no splits) refuses
    a configuration or another split than the default rather than ignoring it."""
    if hub_config is not None:
        raise ValueError(
            f"dataset_config={hub_config!r} names a configuration, but {path} is {what}, "
            "which has none; drop dataset_config, or give the folder that holds the "
            "configurations"
        )
    if split != DEFAULT_SPLIT and "splits" not in what:
        raise ValueError(
            f"dataset_train_split={split!r} names a split, but {path} is {what}, which has "
            f"none (it is read whole, as split {DEFAULT_SPLIT!r}); drop dataset_train_split, "
            "or give a source with that split"
        )


def _read_folder(path: Path, hub_config: str | None, split: str) -> Dataset:
    """A local dataset folder in any layout ``datasets`` writes or the Hub uses:

    - ``Dataset.save_to_disk`` (``state.json``): one dataset, no configuration, no split;
    - ``DatasetDict.save_to_disk`` (``dataset_dict.json``): ``split`` picks one of its
      splits, no configuration;
    - a Hub repository's files (data files, a ``README.md`` whose YAML lists the
      configurations): read by ``datasets.load_dataset`` with ``hub_config`` as its
      configuration name and ``split``, as a TRL script reads a Hub name.
    A configuration or split the folder does not have is an error naming those it has."""
    from datasets import DatasetDict, load_dataset, load_from_disk

    if (path / "dataset_dict.json").is_file():
        _no_configs(path, hub_config, split, "a DatasetDict saved with save_to_disk (splits)")
        saved = load_from_disk(str(path))
        assert isinstance(saved, DatasetDict)
        if split not in saved:
            raise ValueError(
                f"{path} (a saved DatasetDict) has no split {split!r}; its splits are "
                f"{sorted(saved)}: set dataset_train_split to one of them"
            )
        return saved[split]
    if (path / "state.json").is_file():
        _no_configs(path, hub_config, split, "a Dataset saved with save_to_disk")
        return load_from_disk(str(path))
    try:
        return load_dataset(str(path), hub_config, split=split)
    except Exception as err:
        where = f"{path} (folder; config {hub_config!r}, split {split!r})"
        raise _datasets_error(where, err) from err


def _read(source: str | os.PathLike[str], hub_config: str | None, split: str, skip: bool) -> _Read:
    """The rows of ``source``, read by ``datasets.load_dataset``, and where each came from."""
    path = Path(source)
    suffix = "".join(path.suffixes[-1:]).lower()
    if path.is_dir():
        dataset = _read_folder(path, hub_config, split)
        wheres = [f"{path}[{split}] row {i}" for i in range(1, len(dataset) + 1)]
        return _Read(dataset, wheres, list(range(len(dataset))))
    if path.exists():
        # A pipe would block its first reader until a writer came, and give its rows once.
        refuse_non_regular(path, "dataset")
        _no_configs(path, hub_config, split, "a single file")
        if suffix not in _SUFFIXES:
            raise ValueError(
                f"{path}: unsupported file type {suffix!r} (.jsonl, .json, .parquet, .csv)"
            )
        if split != "train":
            # datasets names a local file's one split "train": any other name would be
            # ignored without a word.
            raise ValueError(
                f"dataset_train_split={split!r} names a split of a Hugging Face dataset, but "
                f"{path} is one local file, read whole; give the file of that split as "
                "dataset (and leave dataset_train_split at 'train')"
            )
        fingerprint = file_fingerprint(path)
        if suffix in (".jsonl", ".json"):
            read = _read_json(path, skip, fingerprint)
        else:
            builder = suffix[1:]
            dataset = _load_local(builder, path, cache_dir=content_cache_dir(builder, fingerprint))
            if suffix == ".csv":
                wheres = _csv_wheres(path, len(dataset))
            else:
                wheres = [f"{path} row {i}" for i in range(1, len(dataset) + 1)]
            read = _Read(dataset, wheres, list(range(len(dataset))))
        read.fingerprint = fingerprint
        return read
    if suffix in _SUFFIXES or str(source).startswith((".", os.sep)):
        raise ValueError(f"{path}: file not found")
    dataset = _hub_dataset(str(source), hub_config, split)
    wheres = [f"{source}[{split}] row {i}" for i in range(1, len(dataset) + 1)]
    identity = {"dataset": str(source), "config": hub_config, "split": split,
                "fingerprint": getattr(dataset, "_fingerprint", None)}  # fmt: skip
    return _Read(dataset, wheres, list(range(len(dataset))), fingerprint=identity)


def load_prompts(
    source: str | os.PathLike[str],
    *,
    prompt_field: str | None = None,
    answer_field: str | None = None,
    answer_format: AnswerFormat = "auto",
    id_field: str | None = None,
    split: str = "train",
    hub_config: str | None = None,
    skip_bad_rows: bool = False,
    limit: int | None = None,
    nested_columns: Sequence[str] = (),
) -> LoadedPrompts:
    """Load a prompt dataset (see the module docstring).

    ``source`` is a ``.jsonl``, ``.json`` (a list of objects, or JSON lines),
    ``.parquet`` or ``.csv`` file, a local dataset folder (:func:`_read_folder`:
    ``save_to_disk`` output or a Hub repository's files; ``split``, ``hub_config``), or a
    Hugging Face dataset name (``split``, ``hub_config``; online only). A single file
    has no configurations or splits: a ``hub_config``, or a ``split`` other than
    ``train``, is refused for it rather than ignored. ``id_field`` names a row id column
    (default: ``id`` when the rows have one, else the row's position). ``limit`` keeps the first
    ``limit`` good rows. Fields may be dotted paths (:func:`field_value`);
    ``nested_columns``: dotted paths whose values are copied to a column of that name
    (OC-GRPO's ``oc_solution_column=extra_info.solution``), a row without one an error.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    read = _read(source, hub_config, split, skip_bad_rows)
    examples: list[dict[str, Any]] = []
    kept: list[int] = []
    skipped = read.skipped
    used: dict[str, Any] = {"prompt": {}, "answer": {}, "id": id_field, "reduced": 0}
    for index, row in enumerate(read.raw if read.raw is not None else read.dataset):
        if limit is not None and len(examples) >= limit:
            break
        where, position = read.wheres[index], read.positions[index]
        try:
            example = row_to_example(
                row,
                where,
                prompt_field=prompt_field,
                answer_field=answer_field,
                answer_format=answer_format,
            )
            if id_field is not None:
                example["id"] = str(field_value(row, id_field, where))
            else:
                # default: the row's own id, else its place in the source (bad rows counted)
                example["id"] = str(row["id"]) if row.get("id") is not None else str(position)
            for name in nested_columns:
                example[name] = field_value(row, name, where)
        except ValueError as e:
            _skip_or_raise(e, skip_bad_rows)
            skipped += 1
            continue
        _count_fields(used, row, example, prompt_field, answer_field, answer_format)
        examples.append(example)
        kept.append(index)
    if skipped:
        logger.warning("skipped %d bad rows of %s", skipped, source)
    if not examples:
        raise ValueError(f"{source}: no usable rows (skipped {skipped})")
    kinds = {isinstance(ex["prompt"], str) for ex in examples}
    if len(kinds) > 1:
        raise ValueError(
            f"{source}: some prompts are strings and some are message lists; use one format "
            "(TRL's standard or conversational) for every row"
        )
    # id, prompt and answer as this loader made them; every other column as datasets read
    # it (its own types, nested columns included), rows aligned.
    from datasets import concatenate_datasets

    ours = Dataset.from_list(examples)
    rest = read.dataset if len(kept) == len(read.dataset) else read.dataset.select(kept)
    rest = rest.remove_columns([c for c in ours.column_names if c in rest.column_names])
    dataset = concatenate_datasets([ours, rest], axis=1) if rest.column_names else ours
    if id_field is None:
        used["id"] = "id" if "id" in read.dataset.column_names else None
    return LoadedPrompts(
        dataset=dataset,
        skipped=skipped,
        source=str(source),
        fields=used,
        fingerprint=read.fingerprint,
    )


def _count_fields(
    used: dict[str, Any],
    row: Mapping[str, Any],
    example: Mapping[str, Any],
    prompt_field: str | None,
    answer_field: str | None,
    answer_format: str,
) -> None:
    """Count which columns gave a good row its prompt and answer, and whether its answer
    was reduced to the number after GSM8K's ``####`` (:attr:`LoadedPrompts.fields`)."""
    p_field = _pick_field(row, prompt_field, PROMPT_FIELDS)
    a_field = _pick_field(row, answer_field, ANSWER_FIELDS)
    used["prompt"][p_field] = used["prompt"].get(p_field, 0) + 1
    used["answer"][a_field] = used["answer"].get(a_field, 0) + 1
    if answer_format != "plain":
        raw = row[a_field] if a_field in row else None
        used["reduced"] += isinstance(raw, str) and "####" in raw and example["answer"] != raw


def is_conversational_prompt(prompt: Any) -> bool:
    """Whether ``prompt`` is in TRL's conversational format (a list of messages)."""
    return isinstance(prompt, list)


def resolve_instruction(option: str, conversational: bool) -> str | None:
    """The text an ``instruction`` option appends (None: nothing): ``auto`` is the
    box-your-answer instruction for string prompts and nothing for conversational ones,
    which pass as the user wrote them; ``default`` that instruction; ``none`` nothing."""
    from .generation import DEFAULT_INSTRUCTION

    if option == "auto":
        return None if conversational else DEFAULT_INSTRUCTION
    if option == "default":
        return DEFAULT_INSTRUCTION
    if option in ("none", ""):
        return None
    return option


def with_instruction(
    prompt: str | list[dict[str, Any]], instruction: str | None, *, chat: bool
) -> str | list[dict[str, Any]]:
    """The prompt TRL gets: a string prompt with ``instruction`` on a new line, as one user
    message when ``chat`` (else text ending in a newline); a conversation with
    ``instruction`` added to its last user turn, every other turn (system ones too) as it was.
    The chat template is TRL's to apply."""
    if isinstance(prompt, str):
        content = f"{prompt}\n{instruction}" if instruction else prompt
        return [{"role": "user", "content": content}] if chat else f"{content}\n"
    if not instruction:
        return prompt
    users = [i for i, m in enumerate(prompt) if m["role"] == "user"]
    if not users:
        raise ValueError(f"instruction given but the conversation has no user turn: {prompt!r}")
    last = users[-1]
    turn = {**prompt[last], "content": f"{prompt[last]['content']}\n{instruction}"}
    return [*prompt[:last], turn, *prompt[last + 1 :]]


@dataclass(frozen=True)
class HeldoutSplit:
    """A held-out split by problem (:func:`split_heldout`): row positions in the dataset
    given, each list in the dataset's order.

    ``heldout``: one row per held-out problem (its first); ``train``: every row whose
    prompt is not held out, repeats kept; ``problems``: distinct prompts in the dataset;
    ``repeats``: rows whose prompt an earlier row already has; ``dropped``: the other
    rows of held-out problems, in neither list.
    """

    heldout: list[int]
    train: list[int]
    problems: int
    repeats: int
    dropped: int


def prompt_key(prompt: Any) -> bytes:
    """Rows with the same prompt have the same key: a 16-byte digest of the string, or of
    the message list as canonical JSON (keys sorted), exactly as the rows hold them."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def split_heldout(dataset: Dataset, heldout_size: int, batch_size: int = 4096) -> HeldoutSplit:
    """The first ``heldout_size`` distinct prompts of ``dataset`` (already in its seeded
    order) held out, with every row that repeats one of them kept out of training.

    Hub copies repeat problems (DAPO-Math-17k's processed copy has each of its ~17k
    problems about a hundred times), so a split by rows would put copies of one problem
    on both sides. Prompts are compared exactly as loaded (:func:`prompt_key`), before
    any instruction is added (the same for every row). With no repeated prompt the split
    is the split by rows: ``heldout`` is ``range(heldout_size)``, ``train`` the rest.
    ``heldout_size`` counts problems; the caller checks that some are left to train on.
    """
    held: set[bytes] = set()
    seen: set[bytes] = set()
    heldout: list[int] = []
    train: list[int] = []
    repeats = dropped = 0
    position = 0
    for batch in dataset.select_columns(["prompt"]).iter(batch_size=batch_size):
        for prompt in batch["prompt"]:
            key = prompt_key(prompt)
            if key in seen:
                repeats += 1
                if key in held:
                    dropped += 1
                else:
                    train.append(position)
            else:
                seen.add(key)
                if len(held) < heldout_size:
                    held.add(key)
                    heldout.append(position)
                else:
                    train.append(position)
            position += 1
    return HeldoutSplit(heldout, train, len(seen), repeats, dropped)
