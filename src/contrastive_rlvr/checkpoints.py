"""Which checkpoint a resumed run starts from, and whether a resume may change the config.

A checkpoint directory ``checkpoint-<step>`` is *complete* when everything the
Trainer reads on resume is there and whole (:func:`checkpoint_problems`):

- the weights: ``model.safetensors`` (or the shards its ``.index.json`` lists, or a
  PEFT ``adapter_model.safetensors``) whose header parses and whose size is exactly
  8 + header + the end of the last tensor; or a ``pytorch_model.bin`` zip archive;
- ``optimizer.pt`` and ``scheduler.pt``: torch zip archives whose central directory
  (written last, at the end of the file) reads;
- ``trainer_state.json``: parses, with an integer ``global_step``.

A save cut short by Ctrl-C, SIGKILL or a full disk leaves one of these missing or
truncated: such a checkpoint is skipped (and named) and the newest complete one
is used. The checks read headers only, never the tensors.
"""

from __future__ import annotations

import contextlib
import json
import logging
import pickle
import re
import struct
import zipfile
from collections.abc import Iterator
from pathlib import Path

from .errors import UserError

logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024


def checkpoint_step(path: Path) -> int | None:
    m = _CHECKPOINT.match(path.name)
    return int(m.group(1)) if m else None


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    if size < 8:
        return f"{path.name} is truncated ({size} bytes)"
    with path.open("rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        if header_len > min(size - 8, _SAFETENSORS_HEADER_MAX):
            return f"{path.name} is truncated (header of {header_len} bytes, file of {size})"
        try:
            header = json.loads(f.read(header_len))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path.name} has an unreadable header"
    try:
        end = max(
            (int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"),
            default=0,
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return f"{path.name} has a malformed header"
    expected = 8 + header_len + end
    if size != expected:
        return f"{path.name} is {size} bytes, its header says {expected}"
    return None


def _zip_problem(path: Path) -> str | None:
    try:
        with zipfile.ZipFile(path) as archive:
            archive.infolist()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        return f"{path.name} is not a whole torch archive ({err})"
    return None


def weights_problems(ckpt: Path) -> list[str]:
    """Why the model weights saved in folder ``ckpt`` are not whole (empty: they are)."""
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = ckpt / index_name
        if index.exists():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                return [f"{index_name} is unreadable"]
            problems = []
            for shard in shards:
                if not (ckpt / shard).is_file():
                    problems.append(f"{shard} is missing")
                elif shard.endswith(".safetensors"):
                    problems.append(_safetensors_problem(ckpt / shard))
                else:
                    problems.append(_zip_problem(ckpt / shard))
            return [p for p in problems if p]
    for name in ("model.safetensors", "adapter_model.safetensors"):
        if (ckpt / name).is_file():
            return [p for p in (_safetensors_problem(ckpt / name),) if p]
    for name in ("pytorch_model.bin", "adapter_model.bin"):
        if (ckpt / name).is_file():
            return [p for p in (_zip_problem(ckpt / name),) if p]
    return ["model weights are missing (no model.safetensors)"]


def checkpoint_problems(ckpt: str | Path) -> list[str]:
    """Why checkpoint directory ``ckpt`` cannot be resumed from (empty: it is complete)."""
    ckpt = Path(ckpt)
    problems = weights_problems(ckpt)
    for name in ("optimizer.pt", "scheduler.pt"):
        path = ckpt / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        else:
            problem = _zip_problem(path)
            if problem:
                problems.append(problem)
    state = ckpt / "trainer_state.json"
    if not state.is_file():
        problems.append("trainer_state.json is missing")
    else:
        try:
            step = json.loads(state.read_text()).get("global_step")
            if not isinstance(step, int):
                problems.append("trainer_state.json has no integer global_step")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            problems.append("trainer_state.json does not parse")
    return problems


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """``checkpoint-<step>`` directories of ``output_dir``, newest (highest step) first."""
    out = Path(output_dir)
    if not out.is_dir():
        return []
    found = [p for p in out.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0, reverse=True)


def newest_complete_checkpoint(
    output_dir: str | Path,
) -> tuple[Path | None, list[tuple[Path, list[str]]]]:
    """The newest complete checkpoint (or None) and the newer incomplete ones it skipped,
    each with its problems; every skip is logged as a warning."""
    skipped: list[tuple[Path, list[str]]] = []
    for ckpt in list_checkpoints(output_dir):
        problems = checkpoint_problems(ckpt)
        if not problems:
            return ckpt, skipped
        logger.warning("skipping incomplete checkpoint %s: %s", ckpt, "; ".join(problems))
        skipped.append((ckpt, problems))
    return None, skipped


@contextlib.contextmanager
def refused_pickles_as_user_error(checkpoint: str | Path | None) -> Iterator[None]:
    """Around a resume from ``checkpoint``: a file there that the safe loader
    (``torch.load(weights_only=True)``) refuses, one naming code to run as it loads (a
    tampered or foreign file; nothing of it ran), becomes one line naming the file and
    the globals it asks for, with a fix that keeps the safe loader (torch's own text
    suggests ``weights_only`` off, which would run that code)."""
    try:
        yield
    except pickle.UnpicklingError as err:
        if checkpoint is None:
            raise
        ckpt = Path(checkpoint)
        found = _unsafe_files(ckpt)
        what = "; ".join(f"{n}: {', '.join(g[:3])}" for n, g in found) or "a file"
        raise UserError(
            f"resume: {ckpt} holds a file the safe loader refuses ({what}): it asks to run "
            "code as it loads, which no checkpoint a run saves does, and none of it ran; "
            f"remove {ckpt} (a resume then starts from the checkpoint before it) or start "
            "the run again with overwrite_output_dir=true"
        ) from err


def _unsafe_files(ckpt: Path) -> list[tuple[str, list[str]]]:
    """``(file, globals)`` of the torch archives in ``ckpt`` whose pickle names globals
    outside torch's safe set (numpy's, which the Trainer allows for its RNG state, left
    out), read from the pickle's opcodes: nothing is loaded."""
    from torch.serialization import get_unsafe_globals_in_checkpoint

    found: list[tuple[str, list[str]]] = []
    if not ckpt.is_dir():
        return found
    for path in sorted(ckpt.iterdir()):
        if path.suffix not in (".pt", ".pth", ".bin") or not path.is_file():
            continue
        try:
            names = get_unsafe_globals_in_checkpoint(str(path))
        except Exception:
            continue
        names = [n for n in names if not n.startswith("numpy.")]
        if names:
            found.append((path.name, names))
    return found
