"""``compare``'s process launcher: a worker command (a warm start or a training run) run in
this process or in a child process that leads its own process group and ends with this
one, the running children (stopped together on Ctrl-C), failure notes, and the child's
entry point (``python -m contrastive_rlvr.compare COMMAND ...``)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from ..child_processes import child_env, die_with_parent

LOG_TAIL_CHARS = 4000
#: Seconds a child process has to stop after SIGINT before it is killed.
STOP_GRACE_S = 30


def _subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    # One thread per run: the runs share the machine's cores.
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


class _Children:
    """The running child processes, so that Ctrl-C can stop them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = threading.Event()

    def stop(self) -> None:
        """SIGINT to every child's process group (as a terminal's Ctrl-C would reach a
        foreground job: the child and whatever it started), SIGKILL after the grace."""
        self.stopping.set()
        with self.lock:
            procs = list(self.procs)
        for proc in procs:
            _signal_group(proc, signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """``sig`` to the process group ``proc`` leads (each child is started as the leader
    of its own group), or to ``proc`` alone once it has ended."""
    if proc.poll() is not None:
        return  # reaped: its group id may belong to someone else by now
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)


def _child_command(argv: list[str]) -> list[str]:
    """The command line of a child process running the worker command ``argv``."""
    return [sys.executable, "-m", "contrastive_rlvr.compare", *argv]


_CHILDREN = _Children()


def _launch(argv: list[str], log: Path, in_process: bool) -> int:
    """Run the worker command ``argv`` (see :func:`_worker`) with its output in ``log``:
    in this process (exceptions caught, Ctrl-C passed on) or in a child process.
    Returns the exit code (a child stopped by Ctrl-C: negative)."""
    from ..run_files import open_log

    with open_log(log.parent, log.name) as f:
        if not in_process:
            cmd = _child_command(argv)
            with _CHILDREN.lock:
                if _CHILDREN.stopping.is_set():
                    raise KeyboardInterrupt
                # Its own process group (stopped as a whole, never by a terminal's signal
                # to this one's group), and told this pid, so that it ends when this process
                # does, however this process ends (child_main: the parent-death signal).
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=f,
                    stderr=subprocess.STDOUT,
                    env=child_env(_subprocess_env()),
                    process_group=0,
                )
                _CHILDREN.procs.add(proc)
            try:
                code = proc.wait()
            finally:
                with _CHILDREN.lock:
                    _CHILDREN.procs.discard(proc)
            if _CHILDREN.stopping.is_set() and code != 0:
                raise KeyboardInterrupt
            return code
        with _output_to(f):
            try:
                _worker(argv)
            except KeyboardInterrupt:
                raise
            except BaseException:
                traceback.print_exc(file=f)
                return 1
    return 0


@contextlib.contextmanager
def _output_to(f):
    """Send a run's output to ``f`` while it runs in this process, as a child process's
    goes: ``sys.stdout``, ``sys.stderr``, and every log handler that writes to the console.
    A library's handler (transformers', datasets') keeps the stream that was ``sys.stderr``
    when it was made, so redirecting ``sys.stderr`` alone would leave its lines (``Running
    training``, warnings) on ``compare``'s console instead of in the run's log; and one made
    during the run keeps ``f``, closed once the run ends: it goes back to the console."""
    console = sys.stderr
    consoles = [sys.stdout, console, sys.__stdout__, sys.__stderr__]
    moved = {h: h.setStream(f) for h in _stream_handlers(consoles)}
    with contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            yield
        finally:
            for h in _stream_handlers([f]):
                h.setStream(moved.get(h, console))


def _stream_handlers(streams: list) -> list[logging.StreamHandler]:
    """Every log handler that holds one of ``streams``. A handler whose stream is a
    property follows ``sys.stderr`` by itself (the project's, logs.py) and is left out."""
    loggers = [logging.root, *logging.root.manager.loggerDict.values()]
    handlers = {h for x in loggers if isinstance(x, logging.Logger) for h in x.handlers}
    return [
        h
        for h in handlers
        if isinstance(h, logging.StreamHandler)
        and not isinstance(getattr(type(h), "stream", None), property)
        and any(h.stream is s for s in streams if s is not None)
    ]


def _record_failure(directory: Path, what: str, code: int, log: Path) -> str:
    from ..run_files import read_tail

    try:
        tail = read_tail(log, LOG_TAIL_CHARS) if log.exists() else ""
    except (OSError, ValueError) as err:  # a log that is not a regular file: say so
        tail = f"({err})"
    message = f"{what} failed with exit code {code}; end of {log}:\n{tail}"
    _write_note(directory / "error.txt", message)
    return message


def _write_note(path: Path, text: str) -> None:
    """Best effort: the folder may be what could not be made."""
    from ..run_files import write_file

    with contextlib.suppress(OSError, ValueError):  # ValueError: a link or a user's file
        write_file(path.parent, path.name, text)


# ---------------------------------------------------------------------- SFT warm-start cache


def _worker(argv: list[str]) -> None:
    """The two worker commands, run in this process or as
    ``python -m contrastive_rlvr.compare COMMAND ...``:

    - ``warm-start DIR [--config F] [--field value ...]``: builds DIR/sft-model exactly
      as ``train`` would in an output folder DIR;
    - ``train [--config F] [--field value ...]``: one training run, no progress bar.
    """
    from ..run.command import load_run_inputs, train
    from ..trainer.parse import parse_config

    command, rest = argv[0], argv[1:]
    directory = None
    if command == "warm-start":
        directory, rest = Path(rest[0]), rest[1:]
    elif command != "train":
        raise ValueError(f"unknown worker command {command!r}: use warm-start or train")
    config_file = None
    if rest[:1] == ["--config"]:
        config_file, rest = rest[1], rest[2:]
    if directory is not None:
        rest = [*rest, "--output_dir", str(directory)]
    cfg = parse_config(config_file, rest)
    if directory is None:
        train(cfg, progress=False)
        return
    import torch

    from ..run.folder_lock import OutputDirLock

    torch.set_num_threads(cfg.torch_threads)
    with OutputDirLock(directory):  # a later compare sees a live build and leaves it alone
        load_run_inputs(cfg, directory)


def child_main(argv: list[str], worker=None) -> None:
    """A child process of ``compare``: ends with its parent (Linux: the parent-death
    signal, :mod:`.child_processes`), then runs the worker command ``argv``
    (``worker``: :func:`_worker` unless given)."""
    die_with_parent()
    (worker or _worker)(argv)
