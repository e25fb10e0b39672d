"""On-disk cache of generations, so that an interrupted evaluation resumes.

One jsonl file per benchmark and generation setting, one line per sample:
``{"problem_id": ..., "seed": j, "completion": ...}``. The file name holds a
hash of everything that changes what a sample would be (model, sampling
parameters, prompt format, backend), so a changed setting starts a new file
instead of mixing samples; ``<name>.meta.json`` next to it spells the setting
out. Lines are appended and flushed as batches finish; a last line cut off
by a kill is ignored on reading.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def fingerprint(setting: Mapping[str, Any]) -> str:
    """A short stable hash of a JSON-serialisable generation setting."""
    blob = json.dumps(setting, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


class GenerationCache:
    """Samples of one benchmark under one setting, keyed by ``(problem_id, seed)``."""

    def __init__(self, directory: str | Path, benchmark: str, setting: Mapping[str, Any]) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"{benchmark}-{fingerprint(setting)}"
        self.path = directory / f"{stem}.jsonl"
        meta = directory / f"{stem}.meta.json"
        if not meta.exists():
            meta.write_text(json.dumps(dict(setting), indent=2, sort_keys=True, default=str))
        self._samples: dict[tuple[str, int], str] = {}
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
        with self.path.open(encoding="utf-8") as f:
            for line_no, line in enumerate(f, start=1):
                try:
                    rec = json.loads(line)
                    key = (str(rec["problem_id"]), int(rec["seed"]))
                    self._samples[key] = str(rec["completion"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    logger.warning("%s line %d: unreadable cache line ignored", self.path, line_no)

    def __len__(self) -> int:
        return len(self._samples)

    def get(self, problem_id: str, seed: int) -> str | None:
        return self._samples.get((str(problem_id), seed))

    def add(self, records: Iterable[tuple[str, int, str]]) -> None:
        """Append ``(problem_id, seed, completion)`` samples and flush them to disk."""
        with self.path.open("a", encoding="utf-8") as f:
            if self._torn_tail:
                f.write("\n")
                self._torn_tail = False
            for problem_id, seed, completion in records:
                rec = {"problem_id": str(problem_id), "seed": seed, "completion": completion}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                self._samples[(str(problem_id), seed)] = completion
            f.flush()
