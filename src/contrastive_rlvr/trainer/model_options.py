"""TRL's model options of a config, turned into what loads the model: the keyword
arguments of ``from_pretrained`` and the PEFT adapter config.

A TRL script loads its model from ``ModelConfig`` (``dtype``, ``attn_implementation``,
``model_revision``, quantization) and ``GRPOConfig.model_init_kwargs``; the run loads
the model itself (GGUF aliases, the embedded warm start), so it reads the same fields
here: ``model_init_kwargs`` wins over the ``ModelConfig`` field of the same name, as
the more specific setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def model_load_kwargs(config: Any) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments of ``config`` (``dtype`` a torch dtype, or
    ``"auto"``: the checkpoint's)."""
    from trl import get_quantization_config

    from ..models import resolve_dtype

    kwargs: dict[str, Any] = {"dtype": config.dtype or "float32"}
    # A model (or tokenizer) whose code ships with its checkpoint loads only when the user
    # said so; the field reaches every load, as a TRL script passes it.
    kwargs["trust_remote_code"] = bool(config.trust_remote_code)
    if config.model_revision not in (None, "main"):
        kwargs["revision"] = config.model_revision
    if config.attn_implementation is not None:
        kwargs["attn_implementation"] = config.attn_implementation
    quantization = get_quantization_config(config)
    if quantization is not None:
        kwargs["quantization_config"] = quantization
    init = config.model_init_kwargs or {}
    if isinstance(init, str):  # TRL accepts a JSON string on the command line
        import json

        init = json.loads(init)
    kwargs.update(init)
    kwargs["dtype"] = resolve_dtype(kwargs["dtype"])
    return kwargs


def peft_config_of(config: Any) -> Any:
    """The LoRA config of ``config`` (``use_peft`` and the ``lora_*`` fields, as TRL's
    ``get_peft_config`` builds it), or None."""
    if not config.use_peft:
        return None
    from trl import get_peft_config

    return get_peft_config(config)


def init_kwargs_error(config: Any, err: TypeError) -> Exception | None:
    """A ``from_pretrained`` TypeError caused by a ``model_init_kwargs`` key that is neither
    a loading option nor a field of the model's config (the model's ``__init__`` got it)
    as a one-line :class:`UserError`; None for any other TypeError."""
    import json
    import re

    from ..errors import UserError

    init = config.model_init_kwargs or {}
    if isinstance(init, str):
        init = json.loads(init)
    m = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(err))
    if m is None or m.group(2) not in init:
        return None
    return UserError(
        f"model_init_kwargs: {m.group(2)!r} is neither an option of from_pretrained nor a "
        f"field of the model's config ({m.group(1)} does not take it); remove it or fix its "
        "name"
    )


@contextlib.contextmanager
def init_kwargs_as_user_error(config: Any) -> Iterator[None]:
    """A ``model_init_kwargs`` key the model does not take, as one line (raised when the
    model class is built, before any weight is read)."""
    try:
        yield
    except TypeError as err:
        user_error = init_kwargs_error(config, err)
        if user_error is None:
            raise
        raise user_error from err
