"""Reward functions by name: the built-in ones, or a user's by import path.

``resolve_reward("math_verify")`` builds a built-in reward;
``resolve_reward("my_pkg.rewards:length_penalty")`` or
``resolve_reward("path/to/rewards.py:length_penalty")`` imports a user's
function. A user function must have TRL's signature
``f(prompts, completions, **kwargs) -> list[float]`` (dataset columns arrive
as keyword arguments).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

RewardFunction = Callable[..., list[float]]
logger = logging.getLogger(__name__)


def _builtin(name: str, options: dict[str, Any]) -> RewardFunction:
    if name == "math_verify":
        from .math_verify import MathVerifyReward

        return MathVerifyReward(**options)
    if name == "format":
        from .format import FormatReward

        return FormatReward(**options)
    if name == "gym":
        from .gym import GymReward

        return GymReward(**options)
    raise KeyError(name)


BUILTIN_REWARDS: tuple[str, ...] = ("math_verify", "format", "gym")


def load_reward_function(spec: str) -> RewardFunction:
    """Import ``module.path:function`` or ``file.py:function`` and return the callable.

    A module that changes the working directory when imported is moved back (with a
    warning): the run's relative paths (output_dir, the dataset, checkpoints) must keep
    their meaning."""
    cwd = os.getcwd()
    try:
        return _load(spec)
    finally:
        try:
            moved = os.getcwd() != cwd
        except FileNotFoundError:  # it removed the directory it moved to
            moved = True
        if moved:
            logger.warning(
                "reward %r changed the working directory when imported; changed back to %s",
                spec,
                cwd,
            )
            os.chdir(cwd)


def _load(spec: str) -> RewardFunction:
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise ValueError(
            f"reward {spec!r}: expected 'module:function' or 'file.py:function', "
            f"or a built-in name {BUILTIN_REWARDS}"
        )
    if module_part.endswith(".py"):
        module = _import_file(spec, Path(module_part))
    else:
        try:
            module = importlib.import_module(module_part)
        except Exception as e:
            raise ValueError(
                f"reward {spec!r}: cannot import module {module_part!r}: {_import_failure(e)}"
            ) from e
    fn = getattr(module, attr, None)
    if fn is None:
        raise ValueError(f"reward {spec!r}: module {module_part!r} has no attribute {attr!r}")
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {attr!r} is not callable")
    return fn


def _module_name(path: Path) -> str:
    """The name a reward file is imported under: its stem and a hash of its full path, so
    that two files named ``rewards.py`` in two folders are two modules."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"_user_reward_{stem}_{digest}"


def warn_if_others_can_write(path: Path) -> None:
    """Warn when another user of the machine could change the code a run imports: the file
    writable by others, or its folder writable by others without the sticky bit (anyone
    may then replace the file). The run still imports it: shared scratch folders exist."""
    import stat

    who = []
    if path.stat().st_mode & stat.S_IWOTH:
        who.append("the file is writable by every user")
    folder = path.resolve().parent.stat().st_mode
    if folder & stat.S_IWOTH and not folder & stat.S_ISVTX:
        who.append("its folder lets every user replace it")
    if who:
        logger.warning(
            "reward file %s: %s; this run imports and runs its code, so anyone on this "
            "machine could change what it runs: chmod o-w the file and its folder", path,
            " and ".join(who),
        )


def _import_file(spec: str, path: Path) -> ModuleType:
    """Import a reward file as a module registered in ``sys.modules`` (so that its
    functions pickle by reference, as a process pool over them needs: a forked worker
    finds the module there). A failure at import (a missing package, a syntax error, an
    exception raised by the file) is a ``ValueError`` of one line naming the file."""
    if not path.is_file():
        raise ValueError(f"reward {spec!r}: file {str(path)!r} not found")
    warn_if_others_can_write(path)
    name = _module_name(path)
    content = hashlib.sha256(path.read_bytes()).hexdigest()
    loaded = _IMPORTED.get(name)
    if loaded is not None and loaded[0] == content and sys.modules.get(name) is loaded[1]:
        # Imported once per content, as a module is: two rewards of one file share it
        # (each function then pickles as the module in sys.modules holds it).
        return loaded[1]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ValueError(f"reward {spec!r}: cannot import {str(path)!r}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # before it runs: pickling inside the module works too
    try:
        module_spec.loader.exec_module(module)
    except BaseException as e:
        del sys.modules[name]
        if not isinstance(e, Exception):
            raise  # KeyboardInterrupt, SystemExit: not the file's import failing
        raise ValueError(
            f"reward {spec!r}: importing {str(path)!r} failed: {_import_failure(e, path)}"
        ) from e
    _IMPORTED[name] = (content, module)
    return module


#: Reward files imported in this process: module name -> (sha256 of the source, module).
_IMPORTED: dict[str, tuple[str, ModuleType]] = {}


def _import_failure(err: BaseException, path: Path | None = None) -> str:
    """One line for an exception raised while importing the user's module: the missing
    package with how to get it, the syntax error's line, or the exception and the line of
    the file that raised it."""
    if isinstance(err, ModuleNotFoundError) and err.name:
        return f"no module named {err.name!r} (install it: pip install {err.name.split('.')[0]})"
    if isinstance(err, SyntaxError):
        return f"{type(err).__name__} at line {err.lineno}: {err.msg}"
    line = None
    if path is not None:
        import traceback

        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == str(path)]
        line = frames[-1].lineno if frames else None
    where = f" at line {line}" if line else ""
    text = " ".join(str(err).split())[:200]
    return f"{type(err).__name__}{where}: {text}" if text else f"{type(err).__name__}{where}"


def resolve_reward(name_or_spec: str, **options: Any) -> RewardFunction:
    """A built-in reward by name (``options`` go to its constructor), else an import path."""
    if name_or_spec in BUILTIN_REWARDS:
        return _builtin(name_or_spec, options)
    if options:
        raise ValueError(
            f"reward {name_or_spec!r}: options {sorted(options)} apply to built-in rewards only"
        )
    return load_reward_function(name_or_spec)
