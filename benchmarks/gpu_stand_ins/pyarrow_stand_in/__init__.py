"""A stand-in for ``pyarrow`` in the GPU check's bundle (see ../README.md):
importable, and every attribute a placeholder that raises when used (TRL uses pyarrow only
for its SFT packing, which GRPO never calls)."""

from __future__ import annotations

from typing import Any

__version__ = "0.0.0+gpu-check-stand-in"
STAND_IN = True


def _placeholder(name: str) -> type:
    def refuse(*_: Any, **__: Any) -> None:
        raise ImportError(f"pyarrow.{name}: pyarrow is not installed (GPU check stand-in)")

    return type(name, (), {"__new__": refuse, "__init__": refuse})


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _placeholder(name)
