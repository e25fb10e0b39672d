"""The one validation helper every configuration group uses."""

from __future__ import annotations


def check(ok: bool, name: str, value: object, fix: str) -> None:
    """Raise ``ValueError("name=value is invalid: fix")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{name}={value!r} is invalid: {fix}")
