"""Prompt datasets from jsonl, json, parquet or a Hugging Face dataset name.

Every source becomes a :class:`datasets.Dataset` with the columns ``id``,
``prompt`` and ``answer`` (a string), which is what the trainer and
:class:`~contrastive_rlvr.rewards.MathVerifyReward` expect, plus every other
column of the source unchanged: TRL hands each column to the reward functions
as a keyword argument, and the stages (OC-GRPO's ``solution``) read them.

Field mapping: the prompt comes from ``prompt_field`` or else the first of
``prompt``, ``messages``, ``problem``, ``question`` that a row has; the answer
from ``answer_field`` or else ``answer``, ``final_answer``, ``target``. A
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
the line (parquet: the row) and the field or byte. With
``skip_bad_rows=True`` such rows are skipped, logged, and counted in
:attr:`LoadedPrompts.skipped`. ``.jsonl`` and ``.json`` files are UTF-8; a
byte-order mark at the start (as some Windows editors write) is accepted and
dropped. A ``.json`` file is one document, so a bad byte in it is an error
(naming the line) even with ``skip_bad_rows``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset

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
    """A loaded prompt dataset and how many bad rows were skipped to get it."""

    dataset: Dataset
    skipped: int
    source: str


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
        if name in row:
            return name
    return candidates[0]  # reported as the missing field


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
    """``{"prompt", "answer"}`` from one raw row; ``where`` ("file line N") prefixes errors."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    p_field = _pick_field(row, prompt_field, PROMPT_FIELDS)
    a_field = _pick_field(row, answer_field, ANSWER_FIELDS)
    for field, options in ((p_field, prompt_field), (a_field, answer_field)):
        if field not in row:
            hint = "" if options else f" (looked for {field!r} and its alternatives)"
            raise ValueError(
                f"{where}: missing field {field!r}{hint}; row has fields {sorted(row)}"
            )
    prompt = _check_prompt(row[p_field], p_field, where)
    if p_field == "messages" and isinstance(prompt, list):
        # A whole conversation: the prompt is what comes before the assistant's reply.
        while prompt and prompt[-1]["role"] == "assistant":
            prompt = prompt[:-1]
        if not prompt:
            raise ValueError(f"{where}: field 'messages' holds only assistant turns, no prompt")
    answer = normalize_answer(row[a_field], field=a_field, where=where)
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


def _jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    # Read as bytes and decode line by line, so that one badly encoded line
    # is an error naming that line (or, with skip_bad_rows, a skipped row)
    # rather than a UnicodeDecodeError from somewhere inside the file.
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]  # a byte-order mark starts the file, not the row
            if not raw.strip():
                continue
            where = f"{path} line {line_no}"
            try:
                yield where, json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                yield where, _utf8_error(path, raw, e, line_no)
            except json.JSONDecodeError as e:
                yield where, ValueError(f"{where}: invalid JSON ({e.msg} at column {e.colno})")


def _json_rows(path: Path) -> Iterator[tuple[str, Any]]:
    raw = path.read_bytes().removeprefix(_BOM)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _utf8_error(path, raw, e, 1) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} line {e.lineno}: invalid JSON ({e.msg})") from e
    if not isinstance(data, list):
        raise ValueError(f"{path}: a .json prompt file must hold a list of objects")
    for i, row in enumerate(data, start=1):
        yield f"{path} item {i}", row


def _parquet_rows(path: Path) -> Iterator[tuple[str, Any]]:
    import pyarrow.parquet as pq

    for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
        yield f"{path} row {i}", row


def _hub_rows(name: str, config: str | None, split: str) -> Iterator[tuple[str, Any]]:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        raise ValueError(
            f"{name!r} is not a local file, and HF_HUB_OFFLINE is set so it cannot be "
            "downloaded; pass a .jsonl, .json or .parquet path"
        )
    from datasets import load_dataset

    ds = load_dataset(name, config, split=split)
    for i, row in enumerate(ds, start=1):
        yield f"{name}[{split}] row {i}", row


def _csv_rows(path: Path) -> Iterator[tuple[str, Any]]:
    # datasets' csv builder, as a TRL script would read the file (line 1 is the header).
    from datasets import load_dataset

    ds = load_dataset("csv", data_files=str(path), split="train")
    for i, row in enumerate(ds, start=2):
        yield f"{path} line {i}", row


_READERS = {
    ".jsonl": _jsonl_rows,
    ".json": _json_rows,
    ".parquet": _parquet_rows,
    ".csv": _csv_rows,
}


def _rows(
    source: str | os.PathLike[str], hub_config: str | None, split: str
) -> Iterator[tuple[str, Any]]:
    """``(where, row)`` pairs; a row that is a ``ValueError`` is one that could not be read."""
    path = Path(source)
    suffix = "".join(path.suffixes[-1:]).lower()
    if path.exists():
        if suffix not in _READERS:
            raise ValueError(
                f"{path}: unsupported file type {suffix!r} (.jsonl, .json, .parquet, .csv)"
            )
        return _READERS[suffix](path)
    if suffix in _READERS or str(source).startswith((".", os.sep)):
        raise ValueError(f"{path}: file not found")
    return _hub_rows(str(source), hub_config, split)


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
) -> LoadedPrompts:
    """Load a prompt dataset (see the module docstring).

    ``source`` is a ``.jsonl``, ``.json`` (a list of objects) or ``.parquet``
    file, or a Hugging Face dataset name (``split``, ``hub_config``; online
    only). ``id_field`` names a row id column (default: the row's position).
    ``limit`` keeps the first ``limit`` good rows.
    """
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    examples: list[dict[str, Any]] = []
    skipped = 0
    for index, (where, row) in enumerate(_rows(source, hub_config, split)):
        if limit is not None and len(examples) >= limit:
            break
        try:
            if isinstance(row, ValueError):
                raise row
            example = row_to_example(
                row,
                where,
                prompt_field=prompt_field,
                answer_field=answer_field,
                answer_format=answer_format,
            )
            if id_field is not None:
                if id_field not in row:
                    raise ValueError(f"{where}: missing field {id_field!r}")
                example["id"] = str(row[id_field])
            else:
                example["id"] = str(row["id"]) if "id" in row else str(index)
            # Every other column passes through as it is (rewards and stages read them).
            example = {**row, **example}
        except ValueError as e:
            if not skip_bad_rows:
                raise
            skipped += 1
            logger.warning("skipping bad row: %s", e)
            continue
        examples.append(example)
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
    columns = ["id", "prompt", "answer"]
    columns += sorted({c for ex in examples for c in ex} - set(columns))
    try:
        dataset = Dataset.from_list([{c: ex.get(c) for c in columns} for ex in examples])
    except (TypeError, ValueError) as err:  # pyarrow: a column with mixed types
        raise ValueError(
            f"{source}: a column holds values of different types in different rows ({err}); "
            "give each column one type"
        ) from None
    return LoadedPrompts(dataset=dataset, skipped=skipped, source=str(source))


def is_conversational_prompt(prompt: Any) -> bool:
    """Whether ``prompt`` is in TRL's conversational format (a list of messages)."""
    return isinstance(prompt, list)


def resolve_instruction(option: str, conversational: bool) -> str | None:
    """The text an ``instruction`` option appends (None: nothing): ``auto`` is the
    box-your-answer instruction for string prompts and nothing for conversational ones,
    which pass as the user wrote them; ``default`` that instruction; ``none`` nothing."""
    from .evaluation.generate import DEFAULT_INSTRUCTION

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
