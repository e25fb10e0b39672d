"""The folder lock of a run, as the trainer and compare have always imported it; it lives
in :mod:`contrastive_rlvr.folder_lock`, below ``run_files``, which every writer uses."""

from __future__ import annotations

from ..folder_lock import OutputDirLock, held_by_a_live_process, held_by_this_process

__all__ = ["OutputDirLock", "held_by_a_live_process", "held_by_this_process"]
