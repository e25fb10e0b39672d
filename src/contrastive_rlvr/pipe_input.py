"""Input files that may be pipes: read with a deadline, or refused, never waited on forever.

Opening a FIFO (named pipe) for reading blocks until some process opens it for
writing; one that nobody writes to would hang the command before it printed a word.

- A config file (``--config``, ``--spec``) may be a pipe: ``--config <(make-config)``
  is how a shell hands over generated YAML. :func:`read_config_text` opens it without
  blocking and waits for its writer's data (or end) at most :func:`pipe_wait_s`
  seconds from the start and from each piece of data, then stops with one line
  naming the file.
- A dataset is read more than once (checked row by row, then by ``datasets``), which a
  pipe cannot give: :func:`refuse_non_regular` refuses it (and any other non-regular
  file) in one line.
"""

from __future__ import annotations

import os
import select
import stat
import time
from pathlib import Path

#: Environment variable: seconds a config pipe may stay silent (default :data:`PIPE_WAIT_S`).
PIPE_WAIT_ENV = "CONTRASTIVE_RLVR_PIPE_WAIT_S"
PIPE_WAIT_S = 60.0
_CHUNK = 1 << 16


def pipe_wait_s() -> float:
    """Seconds a config pipe may stay silent: ``$CONTRASTIVE_RLVR_PIPE_WAIT_S`` or 60."""
    raw = os.environ.get(PIPE_WAIT_ENV, "")
    try:
        value = float(raw) if raw else PIPE_WAIT_S
    except ValueError:
        raise ValueError(f"{PIPE_WAIT_ENV}={raw!r} is not a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{PIPE_WAIT_ENV}={raw!r} must be > 0")
    return value


def file_kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_config_text(path: str | os.PathLike[str], what: str = "config file") -> str:
    """The text (UTF-8) of ``path``; a pipe is read as described in the module docstring.
    Raises ``ValueError`` naming ``what`` and the file when a pipe stays silent."""
    path = Path(path)
    if not stat.S_ISFIFO(os.stat(path).st_mode):
        return path.read_text(encoding="utf-8")
    wait = pipe_wait_s()
    # O_NONBLOCK: the open returns at once, writer or not; poll then waits for data, or
    # for the end of a writer that came and went, never past the deadline.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        deadline = time.monotonic() + wait
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                got = f"after {sum(map(len, chunks))} bytes " if chunks else ""
                raise ValueError(
                    f"{what} {path} is a pipe (FIFO) that nothing wrote to {got}for "
                    f"{wait:g} s; start the program that writes it, give a regular file, or "
                    f"wait longer with {PIPE_WAIT_ENV}=SECONDS"
                )
            if not poller.poll(max(1, int(left * 1000))):
                continue
            try:
                data = os.read(fd, _CHUNK)
            except BlockingIOError:  # a writer is there, with nothing written yet
                time.sleep(0.01)
                continue
            if not data:  # end of file: the writer closed it
                break
            chunks.append(data)
            deadline = time.monotonic() + wait
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def refuse_non_regular(path: str | os.PathLike[str], what: str) -> None:
    """Raise ``ValueError`` naming ``what`` when ``path`` exists and is a pipe, a device,
    a socket or a folder: files that are read more than once must be regular files."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    kind = file_kind(mode)
    if kind is not None:
        raise ValueError(
            f"{what} {path} is {kind}, not a regular file: it is read more than once, which "
            "a pipe cannot give; write it to a file first and give that file"
        )
