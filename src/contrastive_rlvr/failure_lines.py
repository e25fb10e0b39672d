"""The one line a command ends with when the machine, not the user's input, stopped it:
memory (an address-space limit, an allocation that failed, a thread that could not start),
a full disk, a read-only file system. Each function reads an exception's whole chain and
returns the line, or None for any other error (the CLI then keeps the traceback)."""

from __future__ import annotations

import errno
import sys

#: errno values of a write that found no room: no space, quota, file-size limit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: How torch's and safetensors' writers word the same (they raise RuntimeError or their own).
#: torch's zip writer on a full disk: "basic_ios::clear: iostream error" (libstdc++) or
#: "unexpected pos N vs M" (the bytes it could not write).
_NO_ROOM_TEXT = ("No space left on device", "File too large", "FileTooLarge", "StorageFull",
                 "Disk quota exceeded", "file write failed", "basic_ios::clear",
                 "unexpected pos")  # fmt: skip


#: How torch, the C++ runtime and the loader word an allocation that failed (errno 12,
#: ENOMEM); the loader's when a library's segments find no room under ``ulimit -v``.
_NO_MEMORY_TEXT = ("can't allocate memory", "Cannot allocate memory", "std::bad_alloc",
                   "CUDA out of memory", "out of memory",
                   "failed to map segment from shared object")  # fmt: skip
#: How a thread that could not start is worded (pyarrow, Python's threading): under
#: ``ulimit -v`` its stack finds no room (measured: ``train`` under 1.3 GB).
_NO_THREAD_TEXT = ("Failed to launch worker thread", "can't start new thread")
#: Below this address-space limit (``ulimit -v``) importing torch aborts inside C or C++
#: (``std::bad_alloc``, OpenBLAS's "Memory allocation still failed", glibc's "cannot
#: allocate memory for thread-local data"), where no Python code can catch it: measured
#: at 500-800 MB on x86-64 Linux; ``train`` of the embedded default needs more than 1 GB.
MIN_ADDRESS_SPACE = 1 << 30


def address_limit() -> int | None:
    """The address-space limit (``ulimit -v``) in bytes; None when there is none."""
    try:
        import resource
    except ImportError:  # not on POSIX: no ulimit -v
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def drop_exit_reports() -> None:
    """Memory ran out: torch's exit-time report of compile times would allocate too and
    print a traceback after the error line; it has nothing to say here (nothing compiled
    ran to its end)."""
    import atexit

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is not None and hasattr(utils, "dump_compile_times"):
        atexit.unregister(utils.dump_compile_times)


def address_space_too_small() -> str | None:
    """The one line for an address-space limit too small to import torch; None when
    there is no such limit."""
    soft = address_limit()
    if soft is None or soft >= MIN_ADDRESS_SPACE:
        return None
    return (
        f"the address-space limit (ulimit -v) is {soft // 2**20} MiB, below the "
        f"{MIN_ADDRESS_SPACE // 2**20} MiB importing torch needs (under it the import "
        "aborts); raise it (ulimit -v unlimited, or the job's memory request)"
    )


def out_of_memory(err: BaseException) -> str | None:
    """The one line for an error that is memory running out anywhere in its chain (a
    MemoryError, errno ENOMEM, torch's allocator failing under ``ulimit -v`` or on a full
    GPU); None for any other error."""
    drop_exit_reports()
    limited = address_limit() is not None
    seen: BaseException | None = err
    while seen is not None:
        text = str(seen)
        detail = " ".join(text.split())[:120]
        what = f"{type(seen).__name__}{': ' + detail if detail else ''}"
        if (
            isinstance(seen, MemoryError)
            or getattr(seen, "errno", None) == errno.ENOMEM
            or any(t in text for t in _NO_MEMORY_TEXT)
        ):
            return (
                f"out of memory ({what}); lower the batch size, max_completion_length or the "
                "model's size, or allow the process more memory (ulimit -v, the job's memory "
                "request)"
            )
        if limited and isinstance(seen, SystemError):
            # CPython's internal error, for a C extension whose allocation failed without
            # saying so ("error return without exception set", "returned NULL without
            # setting an exception"); under an address-space limit that is the limit
            # (measured: importing TRL and transformers under 1.1 and 2 GB).
            return (
                f"out of memory ({what}, under ulimit -v {address_limit() // 2**20} MiB); "
                "allow the process more memory (ulimit -v, the job's memory request)"
            )
        if any(t in text for t in _NO_THREAD_TEXT):
            return (
                f"a thread could not start ({what}): the process's memory limit (ulimit -v) "
                "or thread limit (ulimit -u) is too low; raise it"
            )
        seen = seen.__cause__ or seen.__context__
    return None


def read_only(err: BaseException) -> str | None:
    """The one line for a write refused by a read-only file system (errno EROFS), which a
    root user meets where permissions would let it write; None for any other error."""
    if isinstance(err, OSError) and err.errno == errno.EROFS:
        where = f" ({err.filename})" if err.filename else ""
        return (
            f"the file system is read-only{where}; choose an output folder on a writable "
            "file system"
        )
    return None


def disk_full(err: BaseException) -> str | None:
    """The one line for an error that is a full disk (or a file-size limit) anywhere in
    its chain; None for any other error."""
    seen = err
    while seen is not None:
        text = str(seen)
        if getattr(seen, "errno", None) in _NO_ROOM or any(t in text for t in _NO_ROOM_TEXT):
            where = getattr(seen, "filename", None)
            return (
                f"disk full (no room to write{f' {where}' if where else ''}: "
                f"{' '.join(text.split())[:160]}); free space or choose another output_dir, "
                "then run again (with --resume true a training run goes on from its last "
                "complete checkpoint)"
            )
        seen = seen.__cause__ or seen.__context__
    return None
