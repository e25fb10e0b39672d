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
:attr:`.loading.LoadedPrompts.skipped`. ``.jsonl`` and ``.json`` files are UTF-8; a
byte-order mark at the start (as some Windows editors write) is accepted and
dropped. A ``.json`` file is one document (a list of objects), so a bad byte in it is
an error (naming the line) even with ``skip_bad_rows``; a ``.json`` file of JSON lines
(what ``Dataset.to_json`` writes) is read as ``.jsonl``. With rows skipped, ``datasets``
reads a copy of the file without them (in a temporary folder, removed after).

Data identity: ``datasets`` keys its cache of a local file on the file's path and
modification time, so a file rewritten with its old mtime (``touch -r``, an archive or a
sync that keeps timestamps) would be read from the cache as it was. A local file is
therefore hashed (:func:`file_fingerprint`: size and SHA-256 of its bytes) and read
through a cache folder of its own content (:func:`.reading.content_cache_dir`): new bytes, a new
cache. :attr:`.loading.LoadedPrompts.fingerprint` carries the hash, which a run records
(``data.json``) and a resume or ``compare`` checks.

The package: :mod:`.loading` (:func:`load_prompts`), :mod:`.reading` (the sources and
the content fingerprint), :mod:`.fields` (field mapping, checks, instructions),
:mod:`.heldout` (the held-out split by problem).
"""

from __future__ import annotations

from .fields import (
    AnswerFormat,
    gsm8k_final_answer,
    is_conversational_prompt,
    resolve_instruction,
    with_instruction,
)
from .heldout import prompt_key, split_for, split_heldout
from .loading import load_prompts
from .reading import file_fingerprint, fingerprint_differences

__all__ = [
    "AnswerFormat",
    "file_fingerprint",
    "fingerprint_differences",
    "gsm8k_final_answer",
    "is_conversational_prompt",
    "load_prompts",
    "prompt_key",
    "resolve_instruction",
    "split_for",
    "split_heldout",
    "with_instruction",
]
