"""The one secrets rule: a token never reaches disk or the terminal in clear.

A secret is the value of a field or key whose name is a secret's (``token``, ``*_token``,
``api_key``, ``password``, ``secret``): ``--hub_token``, ``model_init_kwargs``'
``{"token": ...}``, and the same inside a JSON string or a ``--field value`` list.
Every writer of settings goes through :func:`redact` (``config.yaml``, compare's
``results.json``, the pickled ``training_args.bin``) and every printer of them too
(``train --fields``, ``train --help``), so a new secret field is hidden everywhere at once.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: What a secret is written as.
HIDDEN = "<HIDDEN>"
_SECRET_NAME = re.compile(r"(^|_)(token|api_key|apikey|password|secret)$", re.IGNORECASE)
#: Names ending in ``_token`` that are no secret (token ids and counts).
_NOT_SECRET = re.compile(r"(_id|_ids)$|^(pad|eos|bos|unk|sep|cls|mask)_token$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether a field or key called ``name`` holds a secret."""
    name = name.lstrip("-").replace("-", "_")
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET.search(name)


def _redact_string(text: str) -> str:
    """A JSON object or list in a string (``--model_init_kwargs '{"token": ...}'``)
    redacted; any other string as it is."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return text
    try:
        parsed = json.loads(stripped)
    except ValueError:
        # not JSON: still never show a quoted token value
        return re.sub(
            r'(["\']?(?:\w*_)?token["\']?\s*[:=]\s*)["\']?[^"\',}\s]+["\']?', rf'\1"{HIDDEN}"', text
        )
    redacted = redact(parsed)
    return json.dumps(redacted) if redacted != parsed else text


def redact_args(args: list[str]) -> list[str]:
    """A ``--field value`` list with the value of every secret field hidden (also
    ``--field=value``), and JSON values redacted."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(HIDDEN)
            hide_next = False
            continue
        if isinstance(arg, str) and arg.startswith("--"):
            name, eq, _value = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={HIDDEN}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
            if eq:
                out.append(f"{name}={_redact_string(_value)}")
                continue
        out.append(_redact_string(arg) if isinstance(arg, str) else redact(arg))
    return out


def _nothing_to_hide(value: Any) -> bool:
    """None, empty, or a placeholder already (transformers writes ``<HUB_TOKEN>``)."""
    return value in (None, "") or (
        isinstance(value, str) and value.startswith("<") and value.endswith(">")
    )


def strip_secrets(value: Any) -> Any:
    """``value`` with every secret key removed (dicts) or set to None (a pickled config
    carries no token; the process that parsed it keeps its own)."""
    if isinstance(value, dict):
        return {
            k: strip_secrets(v)
            for k, v in value.items()
            if not (isinstance(k, str) and is_secret_name(k))
        }
    if isinstance(value, str):
        redacted = _redact_string(value)
        return redacted
    return value


def redact(value: Any) -> Any:
    """``value`` (a dict, list, string, ...) with every secret hidden; a copy, never
    the object given. A ``None`` or empty secret stays as it is (nothing to hide)."""
    if isinstance(value, dict):
        return {
            k: (
                HIDDEN
                if isinstance(k, str) and is_secret_name(k) and not _nothing_to_hide(v)
                else redact(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        items = list(value)
        if any(isinstance(x, str) and x.startswith("--") for x in items):
            items = redact_args([str(x) if not isinstance(x, str) else x for x in items])
        else:
            items = [redact(x) for x in items]
        return type(value)(items) if isinstance(value, tuple) else items
    if isinstance(value, str):
        return _redact_string(value)
    return value
