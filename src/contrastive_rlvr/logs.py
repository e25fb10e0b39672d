"""The project's log lines on stderr at the run's ``log_level``, as transformers shows its own.

Every module logs to a child of the ``contrastive_rlvr`` logger. A training run (the CLI's
and every :class:`~contrastive_rlvr.trainer.RLVRTrainer`) calls :func:`follow_log_level`
with the level transformers' ``Trainer`` gives its own logger
(``TrainingArguments.get_process_log_level()``: ``log_level`` on the main process,
``log_level_replica`` on the others, ``passive`` keeping transformers' verbosity, warning
by default), so ``--log_level info`` shows the project's INFO lines (which shared forward a
model got, the base configuration, ...) and the default shows warnings only.

Records still propagate to the root logger: an application that configured logging itself
(a handler on the root logger, as ``logging.basicConfig`` adds) gets them there, and the
project's own stderr handler then stays silent, so no line is printed twice.
"""

from __future__ import annotations

import logging
import sys

PACKAGE = "contrastive_rlvr"
FORMAT = "%(levelname)s %(name)s: %(message)s"


class _UnlessRootHandles(logging.Filter):
    """Passes a record only while the root logger has no handler of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not logging.getLogger().handlers


class _ProjectHandler(logging.StreamHandler):
    """The one stderr handler :func:`follow_log_level` adds to the package logger.

    It writes to whatever ``sys.stderr`` is when a record comes, not the stream current
    when it was made: ``compare`` with ``jobs 1`` runs its training runs one after another
    in its own process, stderr redirected to each run's log, so a handler holding the first
    run's log file would write every later run's lines to a closed file (lost, each one a
    "Logging error" traceback instead)."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # StreamHandler's would fix the stream now

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr


def follow_log_level(level: int) -> None:
    """Show the project's records at ``level`` (a :mod:`logging` level) and above."""
    logger = logging.getLogger(PACKAGE)
    logger.setLevel(level)
    if not any(isinstance(h, _ProjectHandler) for h in logger.handlers):
        handler = _ProjectHandler()  # stderr
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(_UnlessRootHandles())
        logger.addHandler(handler)
