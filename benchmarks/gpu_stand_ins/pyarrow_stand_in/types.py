"""A stand-in for ``pyarrow.types`` in the GPU check's bundle (see ../README.md): the
package's placeholders, which raise when used."""

from __future__ import annotations

from . import STAND_IN, _placeholder

__all__ = ["STAND_IN"]


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    return _placeholder(f"types.{name}")
