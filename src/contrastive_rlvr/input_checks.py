"""Checks of the paths a user gives, run before any model loads: the model (a local folder,
a ``.gguf`` file, a cached or reachable Hub id) and the output folder.

Training (:func:`contrastive_rlvr.run.preflight.preflight`) and evaluation
(:func:`contrastive_rlvr.evaluation.evaluate`) both run them, so they live below both.
Each raises :class:`~contrastive_rlvr.errors.UserError` with one line naming the value and
the fix.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from .errors import UserError

#: Seconds the Hub has to answer whether a model id exists.
HUB_TIMEOUT_S = 10
#: ``org/name`` or ``name``: what the Hugging Face Hub accepts as a repository id.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value (the model loader's reading)."""
    from .models import hub_offline as models_hub_offline

    return models_hub_offline()


#: Files of which a saved model folder holds at least one: its tokenizer is loaded from it.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def check_model_path(model: str) -> None:
    """A local model path must exist (and hold a model); a Hub id must be cached when offline.

    A value that looks like a path (starts with ``/``, ``.`` or ``~``, has more than one
    ``/``, ends with ``.gguf``) and does not exist is reported as a missing path, not
    passed to the Hub client, whose message would be about an invalid repository id.
    """
    from .models import (
        ALIASES,
        TINY_ALIAS,
        alias_standing_in,
        gguf_path,
        is_adapter_folder,
    )

    if model == TINY_ALIAS:
        return
    if model in ALIASES:
        try:
            gguf_path(model)
        except FileNotFoundError as err:
            raise UserError(f"model={model!r}: {err}") from err
        return
    path = Path(model).expanduser()
    if is_adapter_folder(path):
        _check_adapter_folder(model, path)
        return
    if path.exists():
        if path.is_dir() and not (path / "config.json").is_file():
            raise UserError(
                f"model={model!r}: the directory has no config.json (nor a PEFT "
                "adapter_config.json), so it is not a saved Hugging Face model; point model "
                "at the folder save_pretrained wrote"
            )
        if path.is_dir() and not any((path / n).is_file() for n in TOKENIZER_FILES):
            raise UserError(
                f"model={model!r}: the folder {str(path)!r} holds no tokenizer files (none of "
                f"{', '.join(TOKENIZER_FILES)}); save the tokenizer there too "
                "(tokenizer.save_pretrained(folder)) or give the folder that holds both"
            )
        if path.is_file() and path.suffix != ".gguf":
            raise UserError(
                f"model={model!r} is a file: give a model directory, a .gguf file or a Hub id"
            )
        if path.is_dir():
            from .checkpoints import weights_problems

            # Read from the headers: a save cut short fails inside from_pretrained otherwise.
            problems = weights_problems(path)
            if problems:
                raise UserError(
                    f"model={model!r}: its weights are not whole: {'; '.join(problems)}; "
                    "point model at a folder save_pretrained finished writing"
                )
        return
    if not _HUB_ID.match(model) or model.endswith(".gguf"):
        raise UserError(
            f"model={model!r}: no such file or directory; give an existing local model "
            "directory, a .gguf file, a Hugging Face model id or 'embedded'"
        )
    if hub_offline():
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json")
        if not isinstance(cached, str) and alias_standing_in(model) is None:
            raise UserError(
                f"model={model!r} is not a local path and not in the Hugging Face cache, and "
                "HF_HUB_OFFLINE is set so it cannot be downloaded; give a local model directory "
                "or download it first"
            )
    else:
        check_hub_reachable(model)


def _check_adapter_folder(model: str, path: Path) -> None:
    """A folder ``train --use_peft`` saved: its base model (named in the adapter's config)
    must be loadable here, and peft installed."""
    from .models import adapter_base

    try:
        base = adapter_base(path)
    except ValueError as err:
        raise UserError(f"model={model!r}: {err}") from err
    if importlib.util.find_spec("peft") is None:
        raise UserError(
            f"model={model!r} is a PEFT adapter folder, which needs peft to load: pip "
            "install peft, or give a full (merged) model folder"
        )
    try:
        check_model_path(base)
    except UserError as err:
        raise UserError(f"model={model!r} is an adapter on {base!r}, which: {err}") from err


def check_hub_reachable(model: str) -> None:
    """A Hub id that is not in the local cache must be reachable now (else the download
    would fail inside the model's loading, as a traceback)."""
    from huggingface_hub import model_info, try_to_load_from_cache

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return
    try:
        model_info(model, timeout=HUB_TIMEOUT_S)
    except Exception as err:
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise UserError(
            f"model={model!r} is not in the Hugging Face cache and the Hub cannot give it "
            f"({type(err).__name__}: {reason}); check the id and the network, or give a "
            "local model directory"
        ) from err


def check_output_dir(path: str | os.PathLike[str]) -> None:
    """The output directory is named, and can be created and written to."""
    if not str(path).strip():
        # Path("") is the current folder: a run would write its files among the user's.
        raise UserError(
            f"output_dir={str(path)!r} is empty: give the folder the run writes to "
            "(e.g. runs/my-run)"
        )
    out = Path(path)
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise UserError(f"output_dir={str(out)!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"output_dir={str(out)!r}: {str(existing)!r} is not writable")


def _is_under(path: Path, folder: Path) -> bool:
    """Whether ``path`` is strictly inside ``folder`` (links resolved)."""
    inner, outer = path.resolve(), folder.resolve()
    return inner != outer and outer in inner.parents


def check_not_model_folder(model: str | None, output_dir: str, overwrite_output_dir: bool) -> None:
    """``output_dir`` is not the folder of the ``model`` trained (the run's final save would
    replace the base model's weights, config and tokenizer); refused whatever
    ``overwrite_output_dir`` says."""
    model = str(model or "")
    if model in ("", "embedded"):
        return
    model_path, out = Path(model).expanduser(), Path(output_dir).expanduser()
    if not model_path.exists() or not out.exists():
        return
    # A .gguf file's folder is not the model: the run writes no .gguf file.
    if overwrite_output_dir and _is_under(model_path, out):
        raise UserError(
            f"model={model!r} is inside output_dir={str(output_dir)!r}, and "
            "overwrite_output_dir=true removes that folder's checkpoints, the model among "
            "them; train into another output_dir, or copy the model out first"
        )
    if model_path.is_dir() and os.path.samefile(model_path, out):
        raise UserError(
            f"output_dir={str(output_dir)!r} is the folder of model={model!r}: the run "
            "would write its weights over the model it starts from; choose another output_dir "
            "(overwrite_output_dir never allows this)"
        )


#: Environment variables that name a folder where a library caches files: one that names
#: a file fails deep inside that library (a NotADirectoryError many frames down).
CACHE_VARIABLES = (
    "CONTRASTIVE_RLVR_CACHE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
    "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE", "XDG_CACHE_HOME", "TRITON_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR", "CONTRASTIVE_RLVR_BENCHMARKS_DIR",
)  # fmt: skip


def check_cache_variables(environ: Any = None) -> None:
    """Refuse a cache variable (:data:`CACHE_VARIABLES`) that names a file, or a folder
    under a file, in one line naming the variable and the fix; every command checks this
    first (``cli._run``)."""
    environ = os.environ if environ is None else environ
    for name in CACHE_VARIABLES:
        value = environ.get(name)
        if not value:
            continue
        path = Path(value).expanduser()
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing.exists() and not existing.is_dir():
            where = "" if existing == path else f" (under {existing}, a file)"
            raise UserError(
                f"{name}={value!r} names a file{where}, not a folder: the cache it names "
                f"must be a folder; point {name} at a folder, or unset it"
            )
