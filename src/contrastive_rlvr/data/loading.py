"""Loading a prompt dataset (:func:`load_prompts`): the source read, each row made an
example (its fields, its id, nested columns copied), bad rows skipped or refused, and the
result with what it was read from (:class:`LoadedPrompts`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from datasets import Dataset

from .fields import ANSWER_FORMATS, AnswerFormat, _count_fields, field_value, row_to_example
from .reading import _read, _skip_or_raise, logger


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
