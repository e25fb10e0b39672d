"""The one way every command writes into, and reads from, a run's folder.

Every command that writes (``train`` and its resume, ``premise``, ``eval``, ``compare``,
``plot``, ``report``, the merged model) goes through :func:`write_file`,
:func:`open_atomic` or :func:`open_append`, so a guarantee added here holds for all of
them:

- *inside the folder*: a name with ``..``, an absolute path or an empty part is refused
  (a benchmark named ``../../../X`` cannot write three levels up);
- *never through a link*: a symbolic link at the file or at any folder between the run's
  folder and the file is refused, never followed or replaced;
- *never over a file no run wrote*: each folder keeps the names this project wrote there
  in :data:`OWNER_RECORD`; an existing file not listed there (and not in a run folder
  whose ``config.yaml`` a run wrote) is the user's and is refused, unless the caller was
  told to replace it (``overwrite_output_dir=true``);
- *whole or not at all*: a file is written to a new temporary file (``mkstemp``: a random
  name, ``O_EXCL``) in the same folder and renamed into place, so a reader sees the old
  file or the new one, never half of one;
- *readable as the umask says*: ``mkstemp`` makes 0600 files; the file gets
  ``0666 & ~umask`` as an ordinary ``open`` would give it;
- *one writer*: the folder's lock (:class:`~contrastive_rlvr.folder_lock.
  OutputDirLock`) is taken for the write, so ``eval`` or ``premise`` cannot write into a
  folder a live ``train`` holds. A folder whose lock this process holds already (a run
  writing its own files, compare writing its table) is written under that lock. Under a
  multi-process launch the lock is the main process's alone (``RANK`` 0), as ``train``
  takes it.

A whole folder another library writes (a merged model's ``save_pretrained``) is made by
:func:`build_folder`: written into a new temporary folder, then renamed into place, so no
link planted in the old one is followed.

Every reader goes through :func:`read_bytes`, :func:`read_text`, :func:`read_json` or
:func:`read_jsonl`: regular files only (a link to ``/dev/zero`` or a FIFO is refused, never
read or waited on), at most :data:`MAX_READ_BYTES` (``CONTRASTIVE_RLVR_MAX_READ_BYTES``),
the torn last line of a live run's JSON-lines log dropped, and the file named in every
error.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import UserError
from .pipe_input import file_kind

#: Per folder: the names of the files this project wrote there, one per line.
OWNER_RECORD = ".contrastive-rlvr-files"
#: The first line of a run's config.yaml (the same as ``run_folder.RUN_CONFIG_HEADER``;
#: repeated here so this bottom module imports nothing of the trainer).
RUN_CONFIG_HEADER = "# contrastive-rlvr train: the resolved config of the run in this folder"
MAX_READ_ENV = "CONTRASTIVE_RLVR_MAX_READ_BYTES"
#: Default bound on a file a command reads whole (1 GiB): a metrics.jsonl of a million
#: steps is far below it; /dev/zero or a runaway log is not read into memory.
MAX_READ_BYTES = 1 << 30
_RECORD_LOCK = threading.Lock()


def _umask() -> int:
    """The process's umask, read without changing it (Linux: /proc), else set and reset."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    with _RECORD_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode an ordinary ``open(path, "w")`` would give a new file: 0666 less the umask."""
    return 0o666 & ~_umask()


def inside(folder: str | os.PathLike[str], name: str | os.PathLike[str]) -> Path:
    """``folder / name`` after checking that ``name`` stays inside ``folder``: relative,
    no ``..`` part, no empty name, and no symbolic link at the file or at any folder
    between ``folder`` and it. Raises :class:`UserError` naming the path and the fix."""
    folder = Path(folder)
    raw = str(name)
    parts = Path(raw).parts
    if not raw or Path(raw).is_absolute() or ".." in parts or not parts:
        raise UserError(
            f"{raw!r} is not a file name inside {folder}: a name there must be relative and "
            "hold no '..' (rename it, e.g. NAME=PATH with a plain NAME)"
        )
    path = folder
    for part in parts:
        path = path / part
        if path.is_symlink():
            raise UserError(
                f"{path} is a symbolic link (to {os.readlink(path)}); this program never writes "
                "through a link in a run folder: remove the link or choose another folder"
            )
    if path.exists() and not path.is_file():
        raise UserError(
            f"{path} is not a regular file (a folder, pipe or device); remove it or choose "
            "another folder"
        )
    return path


def _recorded(folder: Path) -> set[str]:
    """The names :data:`OWNER_RECORD` of ``folder`` lists (none when it is absent or odd)."""
    record = folder / OWNER_RECORD
    try:
        if record.is_symlink() or not record.is_file() or record.stat().st_size > 1 << 20:
            return set()
        return {line for line in record.read_text(errors="replace").splitlines() if line}
    except OSError:
        return set()


def _in_a_run_folder(path: Path) -> bool:
    """Whether ``path`` is inside a folder whose config.yaml a run wrote (checked up to two
    folders up: a run's own files and those of its ``generations/`` or ``figures/``)."""
    for folder in list(path.parents)[:3]:
        config = folder / "config.yaml"
        try:
            if config.is_file() and not config.is_symlink():
                with config.open(errors="replace") as f:
                    if f.readline().rstrip("\n") == RUN_CONFIG_HEADER:
                        return True
        except OSError:
            continue
    return False


def ours(path: Path) -> bool:
    """Whether ``path`` (an existing file) is one this project wrote: listed in its
    folder's :data:`OWNER_RECORD`, or in a run's folder."""
    return path.name in _recorded(path.parent) or _in_a_run_folder(path)


def claim(path: Path) -> None:
    """Add ``path``'s name to its folder's :data:`OWNER_RECORD` (a file this project wrote;
    also for files another library wrote for the run, such as a model's weights)."""
    folder = path.parent
    with _RECORD_LOCK:
        if path.name in _recorded(folder):
            return
        record = folder / OWNER_RECORD
        if record.is_symlink():
            raise UserError(
                f"{record} is a symbolic link; remove it (the project keeps its "
                "list of written files there)"
            )
        fd = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, file_mode())
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(path.name + "\n")


def adopt(folder: Path, names: list[str]) -> None:
    """Claim the existing regular files ``names`` of ``folder`` when it has no record yet:
    a folder an earlier version of this project wrote (before the record existed), which
    the caller has recognised as its own by content (eval's results.json, compare's
    base-config.yaml). A folder with a record is left as it is."""
    if not folder.is_dir() or (folder / OWNER_RECORD).exists():
        return
    for name in names:
        path = folder / name
        if path.is_file() and not path.is_symlink():
            claim(path)


def _check_owner(path: Path, replace_foreign: bool) -> None:
    if path.exists() and not replace_foreign and not ours(path):
        raise UserError(
            f"{path} exists and no run of this project wrote it (your own file?); it is never "
            "replaced: move it, or choose another output folder"
        )


def check_replaceable(folder: str | os.PathLike[str], name: str | os.PathLike[str]) -> Path:
    """Check, before any work, that :func:`write_file` may write ``folder/name``: inside the
    folder, no link, and absent or this project's. Writes nothing."""
    target = inside(folder, name)
    _check_owner(target, False)
    return target


@contextlib.contextmanager
def writer_lock(folder: Path, in_use: str | None = None) -> Iterator[None]:
    """The lock of ``folder`` for a write: taken for the write, or already held by this
    process (the run's own lock); the main process's alone under a multi-process launch."""
    from .folder_lock import OutputDirLock, held_by_this_process

    if os.environ.get("RANK", "0") != "0" or held_by_this_process(folder):
        yield
        return

    with OutputDirLock(folder, in_use=in_use):
        yield


@contextlib.contextmanager
def open_atomic(
    folder: str | os.PathLike[str],
    name: str | os.PathLike[str],
    mode: str = "w",
    *,
    replace_foreign: bool = False,
) -> Iterator[IO[Any]]:
    """``with open_atomic(folder, name) as f:`` writes ``folder/name`` as the module
    docstring says (checked, locked, atomic, umask). The file appears only if the block
    ends without an exception."""
    folder = Path(folder)
    target = inside(folder, name)
    with writer_lock(folder):
        target = inside(folder, name)  # again, under the lock
        _check_owner(target, replace_foreign)
        target.parent.mkdir(parents=True, exist_ok=True)
        inside(folder, name)  # a link planted as the folders were made
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            os.fchmod(fd, file_mode())
            encoding = None if "b" in mode else "utf-8"
            with os.fdopen(fd, mode, encoding=encoding) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        claim(target)


def write_file(
    folder: str | os.PathLike[str],
    name: str | os.PathLike[str],
    data: str | bytes,
    *,
    replace_foreign: bool = False,
) -> Path:
    """Write ``data`` to ``folder/name`` whole (see the module docstring); returns the path."""
    with open_atomic(
        folder, name, "wb" if isinstance(data, bytes) else "w", replace_foreign=replace_foreign
    ) as f:
        f.write(data)
    return Path(folder) / name


@contextlib.contextmanager
def open_append(folder: str | os.PathLike[str], name: str | os.PathLike[str]) -> Iterator[IO[str]]:
    """``folder/name`` opened to append lines (a run's logs), with the same checks as a
    write; the file is made (umask mode) and claimed when absent. ``O_NOFOLLOW``: a link
    planted between the check and the open fails the open, never is followed."""
    folder = Path(folder)
    with writer_lock(folder):
        target = inside(folder, name)
        _check_owner(target, False)
        target.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = os.open(target, flags, file_mode())
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UserError(f"{target} is not a regular file; remove it")
        claim(target)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            yield f


@contextlib.contextmanager
def build_folder(folder: str | os.PathLike[str], name: str) -> Iterator[Path]:
    """``with build_folder(out, "merged") as tmp:`` fill ``tmp`` (a new folder of a random
    name beside the target); on success it replaces ``out/name``, which must be a folder
    this project made (claimed) or absent; never a link."""
    import shutil

    folder = Path(folder)
    with writer_lock(folder):
        target = folder / name
        if target.is_symlink():
            inside(folder, name)  # raises, naming the link
        if target.exists() and (not target.is_dir() or not ours(target)):
            raise UserError(
                f"{target} exists and no run of this project made it; it is never replaced: "
                "move it, or choose another output folder"
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=folder))
        try:
            os.chmod(tmp, 0o777 & ~_umask())
            yield tmp
            if target.is_dir():
                shutil.rmtree(target)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        claim(target)


def open_log(folder: str | os.PathLike[str], name: str) -> IO[str]:
    """``folder/name`` opened empty for a child process's output (a log another process
    writes while this one waits): the checks of a write (inside, no link, this project's
    file), ``O_NOFOLLOW`` and umask mode, and no lock held (the child takes the folder's
    lock itself)."""
    folder = Path(folder)
    target = inside(folder, name)
    _check_owner(target, False)
    target.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(target, flags, file_mode())
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UserError(f"{target} is not a regular file; remove it")
    claim(target)
    return os.fdopen(fd, "w", encoding="utf-8")


def max_read_bytes() -> int:
    """The bound on a file read whole: ``$CONTRASTIVE_RLVR_MAX_READ_BYTES`` or 1 GiB."""
    raw = os.environ.get(MAX_READ_ENV, "")
    try:
        value = int(raw) if raw else MAX_READ_BYTES
    except ValueError:
        raise UserError(f"{MAX_READ_ENV}={raw!r} is not a number of bytes") from None
    if value <= 0:
        raise UserError(f"{MAX_READ_ENV}={raw!r} must be > 0")
    return value


def read_bytes(path: str | os.PathLike[str], *, limit: int | None = None) -> bytes:
    """The bytes of ``path``, a regular file (a link to one is followed) of at most
    ``limit`` bytes (default :func:`max_read_bytes`). Opened without blocking, so a FIFO
    is refused, never waited on; a device is refused before any byte is read."""
    path = Path(path)
    limit = max_read_bytes() if limit is None else limit
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(
                f"{path} is {file_kind(info.st_mode)}, not a regular file; a run's files are "
                "read only from regular files: replace it with the file itself"
            )
        if info.st_size > limit:
            raise UserError(
                f"{path} is {info.st_size} bytes, more than the {limit} this program reads "
                f"(raise {MAX_READ_ENV} if the file is right)"
            )
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise UserError(f"{path} grew past {limit} bytes while read (raise {MAX_READ_ENV})")
    return data


def read_tail(path: str | os.PathLike[str], chars: int) -> str:
    """The last ``chars`` bytes of a log (a regular file: a FIFO or a device is refused, as
    :func:`read_bytes` refuses it), decoded as UTF-8 with bad bytes replaced; whatever
    the log's size, only its end is read."""
    path = Path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{path} is {file_kind(info.st_mode)}, not a regular file; remove it")
        os.lseek(fd, max(0, info.st_size - chars), os.SEEK_SET)
        return os.read(fd, chars).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], *, limit: int | None = None) -> str:
    """:func:`read_bytes` as UTF-8 (bad bytes replaced: a run's files are the program's)."""
    return read_bytes(path, limit=limit).decode("utf-8", errors="replace")


def read_json(path: str | os.PathLike[str], *, limit: int | None = None) -> Any:
    """The JSON document in ``path``; an error names the file and what is wrong (a file cut
    short: its size and where the JSON ends)."""
    text = read_text(path, limit=limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        ends = err.pos >= len(text.rstrip()) or err.msg.startswith("Unterminated")
        cut = " (it ends early: a write cut short?)" if ends else ""
        raise UserError(
            f"{path} is not JSON{cut}: {err.msg} (line {err.lineno}, column {err.colno}); "
            "repair or remove it"
        ) from None


def read_jsonl(
    path: str | os.PathLike[str], *, limit: int | None = None, objects: bool = True
) -> list[Any]:
    """The rows of a JSON-lines log (each a JSON object unless ``objects=False``: then the
    caller checks them). The last line, when it does not parse and is not ended by a
    newline, is what a live or killed writer leaves: dropped. Any other bad line is an
    error naming the file and line."""
    text = read_text(path, limit=limit)
    lines = text.split("\n")
    torn = not text.endswith("\n")
    rows: list[Any] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if torn and number == len(lines):
                break
            raise UserError(
                f"{path}: line {number} is not JSON ({err.msg}); repair or remove the line"
            ) from None
        if objects and not isinstance(row, dict):
            raise UserError(f"{path}: line {number} is not a JSON object; repair or remove it")
        rows.append(row)
    return rows
