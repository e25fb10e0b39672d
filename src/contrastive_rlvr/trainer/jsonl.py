"""The run's JSON-lines logs (``metrics.jsonl``, ``deltas.jsonl``) cut back to a resumed
step, tolerating the torn last line a killed process leaves."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from ..errors import UserError
from ..run_files import read_text, write_file

logger = logging.getLogger(__name__)


def keep_steps_up_to(path: Path, step: int) -> None:
    """Rewrite ``path`` keeping its lines of steps ``<= step`` (a resume drops the lines of
    the steps it will train again, so no step is logged twice).

    A last line that does not parse is what a process killed in the middle of a write
    leaves: it is dropped, with a warning naming the file. A line that does not parse
    before the last one is not a torn write: :class:`UserError` naming the file and line.
    """
    text = read_text(path)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    kept = []
    for i, (number, line) in enumerate(lines):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if i == len(lines) - 1:
                logger.warning(
                    "%s: dropped its torn last line %d (a write cut short): %s", path, number, err
                )
                break
            raise UserError(
                f"{path}: line {number} is not JSON ({err}); it is not the last line, so not "
                "a write cut short: repair or remove the file to resume"
            ) from err
        if not isinstance(row, dict) or not isinstance(row.get("step", 0), int):
            raise UserError(f"{path}: line {number} has no integer 'step'; repair or remove it")
        if row.get("step", 0) <= step:
            kept.append(line)
    write_file(path.parent, path.name, "".join(line + "\n" for line in kept))
