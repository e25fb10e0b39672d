"""What a run's output folder holds: the names of a run's files, the resolved config and
data identity it writes at its start, and which entries are a run's, this project's
preparation, or the user's own (checked before a run writes anything there)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import yaml

from ..checkpoints import list_checkpoints
from ..errors import UserError
from ..run_files import OWNER_RECORD, write_file
from ..trainer.config import RLVRConfig

logger = logging.getLogger(__name__)

SFT_DIR = "sft-model"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
#: The identity of the data a run trained on (:func:`~contrastive_rlvr.data.file_fingerprint`),
#: written with config.yaml when the run starts, checked by a resume and by compare.
DATA_FILE = "data.json"
#: Files and folders of a run in its output directory (``sft-model`` is a reusable
#: warm start, not a run: compare copies it in before the run starts).
RUN_FILES = (
    CONFIG_FILE, DATA_FILE, SUMMARY_FILE, "metrics.jsonl", "deltas.jsonl", "diagnostics.jsonl"
)  # fmt: skip
#: The first line of a config.yaml a run wrote: a config.yaml without it is the user's
#: own file, which no run replaces or removes.
RUN_CONFIG_HEADER = "# contrastive-rlvr train: the resolved config of the run in this folder"
#: What this project puts in a run's folder before (or without) the run's config.yaml:
#: the embedded warm start (built there, or copied in by compare) and compare's notes and
#: log. A folder holding only these is free for a fresh run.
PREPARED_ENTRIES = frozenset(
    {SFT_DIR, f"{SFT_DIR}.partial", "train.log", "error.txt", "interrupted.txt", OWNER_RECORD}
)


def save_resolved_config(config: RLVRConfig, path: Path) -> None:
    """Write every field of the resolved config as YAML (TrainingArguments.to_dict
    turns enums into their values and hides tokens), under :data:`RUN_CONFIG_HEADER`."""
    text = RUN_CONFIG_HEADER + "\n" + yaml.safe_dump(config.to_dict(), sort_keys=True)
    write_file(path.parent, path.name, text)


def written_by_a_run(path: Path) -> bool:
    """Whether the config.yaml at ``path`` is one a run wrote (its first line is
    :data:`RUN_CONFIG_HEADER`), not the user's own."""
    with path.open(errors="replace") as f:
        return f.readline().rstrip("\n") == RUN_CONFIG_HEADER


def holds_run(out: Path) -> list[str]:
    """What of another run ``out`` holds (its config, summary, metrics, checkpoints).

    A run's own config.yaml with nothing else is a start that failed or was stopped
    before its first step: there is nothing to resume or lose, so it holds no run."""
    found = [name for name in RUN_FILES if (out / name).exists()]
    found += [p.name for p in reversed(list_checkpoints(out))]
    started_only = CONFIG_FILE in found and set(found) <= {CONFIG_FILE, DATA_FILE}
    if started_only and written_by_a_run(out / CONFIG_FILE):
        return []
    return found


def save_data_identity(out: Path, config: RLVRConfig, fingerprint: dict | None) -> None:
    """Record what the run reads (``data.json``): the dataset file's content and the run's
    identity (reward code, dataset folder, model files: :mod:`.run_identity`); nothing for
    the embedded task."""
    from .identity import identity_of

    if config.model == "embedded" and fingerprint is None:
        (out / DATA_FILE).unlink(missing_ok=True)
        return
    record = {"dataset": config.dataset, **(fingerprint or {}), "identity": identity_of(config)}
    write_file(out, DATA_FILE, json.dumps(record, indent=2) + "\n")


def foreign_entries(out: Path) -> list[str]:
    """The entries of ``out`` that are not a run's of this project, sorted (empty: the
    folder is absent, empty, holds a run, or holds only what compare and the warm start
    prepare, :data:`PREPARED_ENTRIES`). A folder whose config.yaml a run wrote is a run's
    folder whole: its model files (config.json, tokenizer, README.md) are the run's own."""
    if not out.is_dir():
        return []
    own = out / CONFIG_FILE
    if own.is_file() and written_by_a_run(own):
        return []
    ours = set(PREPARED_ENTRIES) | set(RUN_FILES)
    ours.update(p.name for p in list_checkpoints(out))
    # a write cut short leaves its temporary file (".NAME.<random>.tmp", run_files)
    return sorted(
        p.name
        for p in out.iterdir()
        if p.name not in ours and not (p.name.startswith(".") and p.name.endswith(".tmp"))
    )


def check_foreign_files(config: RLVRConfig, out: Path, *, may_write: bool) -> None:
    """Refuse a fresh run into a folder holding files no run wrote (the run would replace
    a model card, a model's config and tokenizer with its own) unless
    ``overwrite_output_dir`` is set."""
    foreign = foreign_entries(out)
    if not foreign:
        return
    shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if len(foreign) > 4 else "")
    if not config.overwrite_output_dir:
        raise UserError(
            f"output_dir={str(out)!r} holds files no run of this project wrote ({shown}); "
            "a run writes its model there (config.json, model.safetensors, the tokenizer "
            "files, README.md) and would replace yours: choose a new or empty output_dir, "
            "or set overwrite_output_dir=true to let it replace them"
        )
    if may_write:
        logger.warning(
            "%s holds files no run wrote (%s); overwrite_output_dir=true: the run's files of "
            "the same names replace them",
            out,
            shown,
        )


def clear_run(out: Path) -> None:
    """Remove the files of the run in ``out`` (the warm start ``sft-model`` stays)."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for ckpt in list_checkpoints(out):
        shutil.rmtree(ckpt)
