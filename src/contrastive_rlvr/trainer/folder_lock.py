"""One writer per output folder: an advisory ``flock`` on the folder itself.

The kernel drops the lock when its holder ends, however it ends (SIGKILL, a crash,
the machine's OOM killer), so a killed run never leaves the folder locked. The lock
is taken on the directory, not on a file in it: it writes nothing, so a run that
only reports a finished run leaves every file as it was.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from ..errors import UserError


class OutputDirLock:
    """``with OutputDirLock(out):`` holds ``out``'s lock (making ``out``) or raises
    :class:`UserError` naming the folder (``in_use``: that error's text, ``{path}`` for
    the folder; default: a training run's wording)."""

    def __init__(self, out: str | os.PathLike[str], in_use: str | None = None) -> None:
        self.path = Path(out)
        self.in_use = in_use
        self._fd: int | None = None

    def __enter__(self) -> OutputDirLock:
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
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
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
