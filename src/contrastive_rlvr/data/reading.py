"""Reading a prompt dataset's source: a local file (``.jsonl`` and ``.json`` checked line by
line, ``.parquet``, ``.csv``), a local dataset folder or a Hub name, each through
``datasets.load_dataset``; and the identity of a local file's content (its fingerprint,
the ``datasets`` cache folder of that content)."""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import Dataset

from ..pipe_input import refuse_non_regular

#: The package's logger (``contrastive_rlvr.data``), shared by its modules.
logger = logging.getLogger(__package__)

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
            else:
                row = _wide_integer(row, where) or row
            yield where, row


_INT64 = (-(2**63), 2**63 - 1)


def _wide_integer(row: dict, where: str) -> ValueError | None:
    """An integer beyond 64 bits in a column (nested too): ``datasets`` stores it as a
    float, so a reward would get 1.2089258196146292e+24 for 2**80, without a word."""
    stack = [(k, v) for k, v in row.items()]
    while stack:
        key, value = stack.pop()
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT64[0] <= value <= _INT64[1]:
                return ValueError(
                    f"{where}: column {key!r} holds the integer {value}, beyond 64 bits, which "
                    "the dataset would turn into a float; write it as a string"
                )
        elif isinstance(value, dict):
            stack += [(f"{key}.{k}", v) for k, v in value.items()]
        elif isinstance(value, list):
            stack += [(f"{key}[{i}]", v) for i, v in enumerate(value)]
    return None


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
        (
            f"{path} item {i}",
            (_wide_integer(row, f"{path} item {i}") or row)
            if isinstance(row, dict)
            else ValueError(f"{path} item {i}: expected a JSON object, got {type(row).__name__}"),
        )
        for i, row in enumerate(data, start=1)
    )


def _datasets_error(source: object, err: Exception) -> ValueError:
    """An error of ``datasets.load_dataset`` as one line naming the file."""
    cause: BaseException = err
    while cause.__cause__ is not None:  # DatasetGenerationError wraps the reader's error
        cause = cause.__cause__
    text = " ".join(str(cause).split())[:300] or type(cause).__name__
    return ValueError(f"{source}: datasets.load_dataset could not read it ({text})")


def _load_local(builder: str, path: Path, **kwargs: Any) -> Dataset:
    from datasets import load_dataset

    try:  # data_files is a glob pattern: a "[v2]" in the path would be read as one
        return load_dataset(builder, data_files=glob.escape(str(path)), split="train", **kwargs)
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
    if glob.has_magic(str(path)):  # datasets globs inside it, and no escape reaches that
        raise ValueError(
            f"{path}: datasets finds a folder's files by glob patterns, and this path holds "
            "a glob character ([, ], * or ?) it would misread (it finds no files): rename the "
            "folder, or pass one of its data files (.jsonl, .json, .parquet, .csv)"
        )
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
    identity = {
        "dataset": str(source),
        "config": hub_config,
        "split": split,
        "fingerprint": getattr(dataset, "_fingerprint", None),
    }
    return _Read(dataset, wheres, list(range(len(dataset))), fingerprint=identity)
