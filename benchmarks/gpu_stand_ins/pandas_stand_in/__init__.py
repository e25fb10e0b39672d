"""A stand-in for ``pandas`` in the GPU check's bundle (see ../README.md): importable, and
every attribute a placeholder that raises when used (TRL uses pandas only to build the
completions table of ``log_completions``, off in the check)."""

from __future__ import annotations

from typing import Any

__version__ = "0.0.0+gpu-check-stand-in"
STAND_IN = True


def _placeholder(name: str) -> type:
    def refuse(*_: Any, **__: Any) -> None:
        raise ImportError(f"pandas.{name}: pandas is not installed (GPU check stand-in)")

    return type(name, (), {"__new__": refuse, "__init__": refuse})


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return _placeholder(name)
