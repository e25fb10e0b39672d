"""The validation helpers every configuration group uses."""

from __future__ import annotations

import math

from ...errors import UserError


def check(ok: bool, name: str, value: object, fix: str) -> None:
    """Raise ``UserError("name=value is invalid: fix")`` unless ``ok``.

    ``UserError`` is a ``ValueError`` the CLI prints as one ``error:`` line (exit 2):
    a config value is the user's input."""
    if not ok:
        raise UserError(f"{name}={value!r} is invalid: {fix}")


def finite(value: object) -> bool:
    """A real number that is neither NaN nor +-inf (bools and strings are not numbers here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
