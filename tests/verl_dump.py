"""Each step's advantage inputs and outputs of a real verl run, saved for a comparison.

Loaded in every process of a run through verl's ``VERL_USE_EXTERNAL_MODULES`` hook
(``verl_cpu,verl_dump``, with ``tests/`` on ``PYTHONPATH``) when ``CRLVR_DUMP_DIR`` is
set. It wraps :meth:`CrlvrTrainer._compute_advantage` (the driver's advantage step):
after the project's estimator has written the batch's advantages, the fields below are
read back from verl's transfer queue, exactly as verl's workers will read them, and
saved as ``step_<n>.pt`` (one dict of per-row lists), with the batch's group ids and
the step's training progress. benchmarks/two_engines.py feeds them to the TRL path's
stages. Nothing of verl or of the project is edited.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import torch

FIELDS = (
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "old_log_probs",
    "ref_log_prob",
    "advantages",
)


def _rows(value: Any) -> list[torch.Tensor]:
    """A (possibly nested, jagged) batch field -> one CPU tensor per row."""
    if isinstance(value, torch.Tensor) and value.is_nested:
        return [t.detach().cpu().clone() for t in value.unbind()]
    return [t.detach().cpu().clone() for t in value]


TRAINER = "contrastive_rlvr.integrations.verl.trainer"


def _patch(verl_trainer: Any, out: Path) -> None:
    import transfer_queue as tq

    from contrastive_rlvr.integrations.verl.transfer import group_id

    cls = verl_trainer.CrlvrTrainer
    if getattr(cls._compute_advantage, "_dumps", False):
        return
    original = cls._compute_advantage

    def _compute_advantage(self, batch, metrics):
        meta = original(self, batch, metrics)
        got = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=FIELDS)
        record = {name: _rows(got[name]) for name in FIELDS}
        record["index"] = [group_id(k) for k in meta.keys]
        record["step"] = int(self.global_steps)
        record["progress"] = float(self._progress())
        out.mkdir(parents=True, exist_ok=True)
        partial = out / f"step_{self.global_steps}.pt.partial"
        torch.save(record, partial)
        os.replace(partial, out / f"step_{self.global_steps}.pt")
        return meta

    _compute_advantage._dumps = True
    cls._compute_advantage = _compute_advantage


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Patches the trainer module right after its first import. It cannot be imported
    here: verl loads this module at the end of ``import verl``, before the CPU platform
    of :mod:`verl_cpu` is registered, and the trainer's imports ask for the platform."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != TRAINER:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader, out = spec.loader, self.out

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: Any) -> None:
                loader.exec_module(module)
                _patch(module, out)

        spec.loader = _Loader()
        return spec


if os.environ.get("CRLVR_DUMP_DIR"):
    _out = Path(os.environ["CRLVR_DUMP_DIR"])
    if TRAINER in sys.modules:
        _patch(sys.modules[TRAINER], _out)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport(_out))
