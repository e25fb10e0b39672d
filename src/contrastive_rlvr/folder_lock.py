"""One writer per output folder: an advisory ``flock`` on the folder itself.

The kernel drops the lock when its holder ends, however it ends (SIGKILL, a crash,
the machine's OOM killer), so a killed run never leaves the folder locked. The lock
is taken on the directory, not on a file in it: it writes nothing, so a run that
only reports a finished run leaves every file as it was.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType

from .errors import UserError

#: Folders this process holds the lock of, by (device, inode): a write of the run's own
#: files (``run_files``) in such a folder is the holder's and needs no lock of its own.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()


def _key(fd: int) -> tuple[int, int]:
    info = os.fstat(fd)
    return (info.st_dev, info.st_ino)


def held_by_this_process(folder: str | os.PathLike[str]) -> bool:
    """Whether this process holds ``folder``'s lock (an :class:`OutputDirLock` open on it)."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    with _HELD_LOCK:
        return (info.st_dev, info.st_ino) in _HELD


class OutputDirLock:
    """``with OutputDirLock(out):`` holds ``out``'s lock (making ``out``) or raises
    :class:`UserError` naming the folder (``in_use``: that error's text, ``{path}`` for
    the folder; default: a training run's wording)."""

    def __init__(self, out: str | os.PathLike[str], in_use: str | None = None) -> None:
        self.path = Path(out)
        self.in_use = in_use
        self._fd: int | None = None

    def __enter__(self) -> OutputDirLock:
        existing = self.path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if existing.exists() and not existing.is_dir():
            raise UserError(
                f"{self.path} cannot be a folder: {existing} is a file; choose another "
                "output folder, or move the file"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(fd)
            if self.in_use is not None:
                raise UserError(self.in_use.format(path=str(self.path))) from err
            raise UserError(
                f"output_dir={str(self.path)!r} is in use by another run (a live process "
                "holds its lock); wait for it to end, stop it, or choose another output_dir"
            ) from err
        self._fd = fd
        with _HELD_LOCK:
            _HELD.add(_key(fd))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            with _HELD_LOCK:
                _HELD.discard(_key(self._fd))
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def held_by_a_live_process(folder: str | os.PathLike[str]) -> bool:
    """Whether a live process holds ``folder``'s lock (a run writing in it). Makes and
    writes nothing: a folder that does not exist is held by no one."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the probe's own lock, if it got it
    return False
