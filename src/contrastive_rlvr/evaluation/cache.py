"""On-disk cache of generations, so that an interrupted evaluation resumes.

One jsonl file per benchmark and generation setting, one line per sample:
``{"problem_id": ..., "seed": j, "completion": ..., "batch": ...}``, ``batch``
naming the batch of problems the sample was drawn in (HF draws a batch from one
seed, so a sample depends on the batch). The file name holds a
hash of everything that changes what a sample would be (the weights, sampling
parameters, prompt format, backend), so a changed setting starts a new file
instead of mixing samples; ``<name>.meta.json`` next to it spells the setting
out. Lines are appended and flushed as batches finish; a last line cut off
by a kill is ignored on reading.

The weights enter the key by content, not by name (:func:`weights_fingerprint`):
the SHA-256 of every file of the model directory (or the ``.gguf`` file, or the
Hub snapshot), so that new weights saved under the same path can never be
answered from the old weights' samples. Hashing a large model takes a while
once; each file's hash is remembered in ``weights-hashes.json`` under its
path, size, modification time, status-change time and inode, so a later run
rehashes only files that changed. (The status-change time cannot be set by
the user, so a copy that keeps the old size and modification time is still
seen as changed.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

HASH_INDEX = "weights-hashes.json"
_CHUNK = 8 * 1024 * 1024


def fingerprint(setting: Mapping[str, Any]) -> str:
    """A short stable hash of a JSON-serialisable generation setting."""
    blob = json.dumps(setting, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class GenerationCache:
    """Samples of one benchmark under one setting, keyed by ``(problem_id, seed)``."""

    def __init__(self, directory: str | Path, benchmark: str, setting: Mapping[str, Any]) -> None:
        from ..run_files import inside, write_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{benchmark}-{fingerprint(setting)}"
        self.path = inside(directory, f"{stem}.jsonl")  # no link, no name outside
        meta = directory / f"{stem}.meta.json"
        if not meta.exists():
            text = json.dumps(dict(setting), indent=2, sort_keys=True, default=str)
            write_file(directory, meta.name, text)
        self._samples: dict[tuple[str, int], str] = {}
        self._batches: dict[tuple[str, int], str | None] = {}
        # A kill mid-write leaves a last line without its newline: new lines
        # must not be glued onto it.
        self._torn_tail = False
        if self.path.exists():
            self._read()
            with self.path.open("rb") as f:
                f.seek(0, 2)
                if f.tell() > 0:
                    f.seek(-1, 2)
                    self._torn_tail = f.read(1) != b"\n"

    def _read(self) -> None:
        from ..run_files import read_text

        for line_no, line in enumerate(read_text(self.path).splitlines(), start=1):
            if line.strip():
                try:
                    rec = json.loads(line)
                    key = (str(rec["problem_id"]), int(rec["seed"]))
                    self._samples[key] = str(rec["completion"])
                    self._batches[key] = rec.get("batch")
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    logger.warning("%s line %d: unreadable cache line ignored", self.path, line_no)

    def __len__(self) -> int:
        return len(self._samples)

    def get(self, problem_id: str, seed: int) -> str | None:
        return self._samples.get((str(problem_id), seed))

    def batch(self, problem_id: str, seed: int) -> str | None:
        """The batch the cached sample was drawn in (None: not cached, or not recorded)."""
        return self._batches.get((str(problem_id), seed))

    def add(self, records: Iterable[tuple[str, int, str]], batch: str | None = None) -> None:
        """Append ``(problem_id, seed, completion)`` samples drawn in ``batch`` and flush
        them to disk (a later line of a key replaces an earlier one on reading)."""
        from ..run_files import open_append

        with open_append(self.path.parent, self.path.name) as f:
            if self._torn_tail:
                f.write("\n")
                self._torn_tail = False
            for problem_id, seed, completion in records:
                rec = {"problem_id": str(problem_id), "seed": seed, "completion": completion}
                if batch is not None:
                    rec["batch"] = batch
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                self._samples[(str(problem_id), seed)] = completion
                self._batches[(str(problem_id), seed)] = batch
            f.flush()


def _file_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}|{st.st_ino}"


def file_sha256(path: str | Path, index: dict[str, str] | None = None) -> str:
    """SHA-256 of a file's content; ``index`` (key: path, size, times, inode) caches it."""
    path = Path(path)
    key = _file_key(path)
    if index is not None and key in index:
        return index[key]
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    value = digest.hexdigest()
    if index is not None:
        index[key] = value
    return value


def model_files(model: str) -> list[Path]:
    """The files that define the model named ``model``: a local directory's files (not
    recursive), a ``.gguf`` file, an alias's ``.gguf``, or a Hub id's cached snapshot.
    Empty when none is found on disk. A PEFT adapter folder: its files and its base
    model's (an alias's upstream id standing offline: the alias's file)."""
    from ..models import (
        ALIASES,
        TINY_ALIAS,
        adapter_base,
        alias_standing_in,
        gguf_path,
        is_adapter_folder,
        tiny_model,
    )

    if model in ALIASES:
        return [gguf_path(model)]
    if model == TINY_ALIAS:
        return model_files(str(tiny_model()))
    stand_in = alias_standing_in(model)
    if stand_in is not None:
        return [gguf_path(stand_in)]
    if is_adapter_folder(model):
        own = sorted(p for p in Path(model).expanduser().iterdir() if p.is_file())
        return own + model_files(adapter_base(model))
    path = Path(model).expanduser()
    if not path.exists():
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(model, local_files_only=True))
        except Exception:
            return []
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file())


def weights_fingerprint(model: str, index_file: str | Path | None = None) -> str | None:
    """One hash of the content of every file of ``model`` (:func:`model_files`), with
    each file's hash cached in ``index_file``; None when no file is found."""
    files = model_files(model)
    if not files:
        return None
    index_path = Path(index_file) if index_file is not None else None
    index: dict[str, str] = {}
    if index_path is not None and index_path.exists():
        from ..run_files import read_bytes

        try:
            index = json.loads(read_bytes(index_path))
        except (json.JSONDecodeError, UnicodeDecodeError):
            logger.warning("%s does not parse: rehashing", index_path)
        if not isinstance(index, dict):
            index = {}
    total = hashlib.sha256()
    for f in files:
        total.update(f"{f.name}\0{file_sha256(f, index)}\n".encode())
    if index_path is not None:
        live = {_file_key(f) for f in files}
        paths = {str(f.resolve()) for f in files}
        # Drop the stale entries of these files; keep those of other models.
        kept = {k: v for k, v in index.items() if k in live or k.split("|")[0] not in paths}
        from ..run_files import write_file

        write_file(index_path.parent, index_path.name, json.dumps(kept, indent=1, sort_keys=True))
    return total.hexdigest()


def state_fingerprint(model: Any) -> str:
    """Hash of an in-memory model's parameters and buffers (for a model passed in rather
    than loaded from files): reads every tensor once."""
    import torch

    total = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        t = tensor.detach().cpu().contiguous()
        total.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\n".encode())
        total.update(t.view(-1).view(dtype=torch.uint8).numpy().tobytes())
    return total.hexdigest()
