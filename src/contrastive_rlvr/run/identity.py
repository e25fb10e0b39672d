"""One run identity: what a run's result depends on beyond its config fields.

``config.yaml`` records the settings and ``data.json`` the content of a dataset file.
Neither says whether the reward's code, a dataset folder's files or the model's files are
the ones the run used: a reward file edited after the run, a dataset folder whose files
changed, a model folder retrained in place. :func:`identity_of` records them (in
``data.json`` under ``identity``) when a run starts, and :func:`identity_differences` says
what changed. Every path that reuses a run checks it: the same command again
(``output_plan.same_finished_run``), ``resume`` and ``resume_from_checkpoint``
(``output_plan``), and ``compare``'s reuse of a finished run (``compare.spec``).

What is hashed is cheap: reward files and modules (their source), a dataset folder's files
(names, sizes and SHA-256, as a dataset file's content is), a model folder's
``config.json`` / ``adapter_config.json``, the sizes of its weight files and a SHA-256 of
samples of each (its first MiB, which holds a safetensors header, and 64 regions of 64 KiB
spread evenly over the rest: 5 MiB read of a file of any size, where the weights can be
many GB). A model retrained in place changes nearly every weight, so it changes the
samples; a change that misses all 65 sampled regions is not told apart.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

#: A model folder's files read whole into the identity; weights are recorded by size and
#: by samples of their content.
_MODEL_TEXT_FILES = ("config.json", "adapter_config.json")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
#: What :func:`sampled_sha256` reads of a weight file: its head, then evenly spaced regions.
SAMPLE_HEAD, SAMPLE_REGIONS, SAMPLE_REGION = 1 << 20, 64, 1 << 16


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def sampled_sha256(path: Path) -> str:
    """SHA-256 of a file's first :data:`SAMPLE_HEAD` bytes, then of :data:`SAMPLE_REGIONS`
    regions of :data:`SAMPLE_REGION` bytes starting at evenly spaced offsets over the rest
    (the whole file when it is no longer than what is sampled), then of its size."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as f:
        if size <= SAMPLE_HEAD + SAMPLE_REGIONS * SAMPLE_REGION:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        else:
            digest.update(f.read(SAMPLE_HEAD))
            span = size - SAMPLE_HEAD - SAMPLE_REGION
            for i in range(SAMPLE_REGIONS):
                f.seek(SAMPLE_HEAD + span * i // (SAMPLE_REGIONS - 1))
                digest.update(f.read(SAMPLE_REGION))
    digest.update(str(size).encode())
    return digest.hexdigest()


def reward_code(spec: str) -> str | None:
    """SHA-256 of the source a reward spec runs (``file.py:fn`` or ``pkg.module:fn``); None
    for a built-in name (the package's own code, versioned with it) or a source not found."""
    if ":" not in spec:
        return None
    where = spec.rsplit(":", 1)[0]
    path = Path(where).expanduser()
    if where.endswith(".py") or path.is_file():
        return _sha256(path) if path.is_file() else None
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return _sha256(Path(origin)) if origin and Path(origin).is_file() else None


def folder_fingerprint(folder: Path) -> str:
    """One SHA-256 over a folder's files (relative names, sizes and contents), recursive."""
    total = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue  # hidden files (caches, .git) are no part of the data
        total.update(f"{rel}\0{path.stat().st_size}\0{_sha256(path)}\n".encode())
    return total.hexdigest()


def model_identity(model: str) -> dict[str, Any]:
    """A local model folder: the SHA-256 of its config files, its weight files' sizes and
    their :func:`sampled_sha256`; anything else (a Hub id, an alias): its name."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return {"name": model}
    out: dict[str, Any] = {}
    for name in _MODEL_TEXT_FILES:
        if (path / name).is_file():
            out[name] = _sha256(path / name)
    weights = [p for p in sorted(path.iterdir()) if p.is_file() and p.suffix in _WEIGHT_SUFFIXES]
    out["weights"] = {p.name: p.stat().st_size for p in weights}
    out["weights_sampled"] = {p.name: sampled_sha256(p) for p in weights}
    return out


def identity_of(config: Any) -> dict[str, Any]:
    """What a run of ``config`` depends on beyond its fields (see the module docstring)."""
    rewards = {spec: reward_code(spec) for spec in (getattr(config, "rewards", None) or [])}
    identity: dict[str, Any] = {"rewards": {k: v for k, v in rewards.items() if v}}
    dataset = getattr(config, "dataset", None)
    if dataset and Path(dataset).expanduser().is_dir():
        identity["dataset_folder"] = folder_fingerprint(Path(dataset).expanduser())
    model = str(getattr(config, "model", "") or "")
    if model and model != "embedded":
        identity["model"] = model_identity(model)
    return identity


def identity_differences(saved: Any, now: dict[str, Any]) -> str | None:
    """What of ``now`` differs from the identity a run recorded (None: the same, or a run
    recorded before identities were: nothing to compare)."""
    if not isinstance(saved, dict):
        return None
    changes = []
    before = saved.get("rewards") or {}
    for spec, code in now.get("rewards", {}).items():
        if spec in before and before[spec] != code:
            changes.append(
                f"the code of reward {spec!r} changed (sha256 {before[spec][:12]} "
                f"then, {code[:12]} now)"
            )
    if "dataset_folder" in saved and saved.get("dataset_folder") != now.get("dataset_folder"):
        changes.append("the files of the dataset folder changed")
    if "model" in saved and _recorded(saved["model"], now.get("model")) != saved["model"]:
        detail = _model_change(saved["model"], now.get("model"))
        changes.append(f"the model's files changed ({detail})")
    return "; ".join(changes) or None


def _recorded(before: Any, after: Any) -> Any:
    """``after`` less what ``before`` did not record (a run from before the weights were
    sampled is compared on what it kept: names, config files, sizes)."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: v for k, v in after.items() if k in before}
    return after


def _model_change(before: Any, after: Any) -> str:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return "another model"
    after = _recorded(before, after)
    names = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return ", ".join(names) + " differ"


def model_shape(folder: Path) -> dict[str, Any] | None:
    """The fields of a saved model's ``config.json`` that fix its weights' shapes (None: no
    readable config)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    keys = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "vocab_size")  # fmt: skip
    return {k: config.get(k) for k in keys if k in config} if isinstance(config, dict) else None
