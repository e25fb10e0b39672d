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
    :class:`UserError` naming the folder."""

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.path = Path(out)
        self._fd: int | None = None

    def __enter__(self) -> OutputDirLock:
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(fd)
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
