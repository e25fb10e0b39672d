"""Update guarding: :class:`NonFiniteUpdateGuard` checks every trainable parameter after
each optimizer step. A finite gradient can still give non-finite weights (a huge
learning rate), and the next generation would then crash in sampling. When a
copy is cheap (parameters plus optimizer state within ``max_snapshot_bytes``) it
keeps a CPU copy of both before the step and rolls the update back, counted in
``rolled_back``; otherwise it stops the run with an error naming the step, since
an update that cannot be undone must not be trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import TrainerCallback

from ..errors import NonFiniteParametersError

#: Default budget of the pre-step copy (parameters + optimizer state), bytes.
DEFAULT_SNAPSHOT_BYTES = 2 * 1024**3


class _Saved:
    """A CPU copy of a tensor and the device it goes back to."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.copy, self.device = tensor.detach().to("cpu", copy=True), tensor.device

    def restore(self) -> torch.Tensor:
        return self.copy.to(self.device)


def _inner_optimizer(optimizer: Any) -> Any:
    # accelerate wraps the torch optimizer; its state lives on the inner one.
    return getattr(optimizer, "optimizer", optimizer)


class NonFiniteUpdateGuard(TrainerCallback):
    """Rolls back an optimizer step that leaves a trainable parameter non-finite.

    Before each step (``on_pre_optimizer_step``) a CPU copy of the trainable
    parameters and of their optimizer state is taken when it fits in
    ``max_snapshot_bytes``; after the step (``on_optimizer_step``, before the
    gradients are zeroed) every trainable parameter is checked. Non-finite: the
    copy is written back and ``rolled_back`` counted; with no copy, the run stops
    with :class:`NonFiniteParametersError`. ``reduce`` (e.g. the accelerator's)
    makes all processes agree.
    """

    def __init__(
        self,
        *,
        max_snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES,
        reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.max_snapshot_bytes = max_snapshot_bytes
        self.reduce = reduce
        self.rolled_back = 0
        self._params: list[torch.Tensor] = []
        self._snapshot: list[tuple[torch.Tensor, dict[str, Any] | None]] | None = None

    @staticmethod
    def _state_bytes(optimizer: Any, params: list[torch.Tensor]) -> int:
        total = sum(p.numel() * p.element_size() for p in params)
        state = _inner_optimizer(optimizer).state
        for p in params:
            entry = state.get(p)
            if entry:
                total += sum(
                    v.numel() * v.element_size() for v in entry.values() if torch.is_tensor(v)
                )
            else:  # not initialised yet: Adam-like optimizers add two moments
                total += 2 * p.numel() * p.element_size()
        return total

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._snapshot = None
        if (
            optimizer is None
            or self._state_bytes(optimizer, self._params) > self.max_snapshot_bytes
        ):
            return control
        opt_state = _inner_optimizer(optimizer).state
        snapshot = []
        for p in self._params:
            entry = opt_state.get(p)
            copied = None
            if entry:
                # (copy, device): a state tensor goes back where it was (Adam's "step"
                # stays on the CPU unless the optimizer is capturable).
                copied = {k: _Saved(v) if torch.is_tensor(v) else v for k, v in entry.items()}
            snapshot.append((p.detach().to("cpu", copy=True), copied))
        self._snapshot = snapshot
        return control

    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        bad = any(not torch.isfinite(p).all() for p in self._params)
        if self.reduce is not None:
            flag = torch.tensor(
                float(bad), device=self._params[0].device if self._params else "cpu"
            )
            bad = bool(self.reduce(flag).item() > 0)
        if not bad:
            self._snapshot = None
            return control
        step = state.global_step + 1 if state is not None else "?"
        if self._snapshot is None:
            raise NonFiniteParametersError(
                f"optimizer step {step} made the parameters non-finite and the model is too "
                f"large for the rollback copy (max_snapshot_bytes={self.max_snapshot_bytes}); "
                "resume from the last checkpoint with a lower learning_rate"
            )
        opt_state = _inner_optimizer(optimizer).state if optimizer is not None else {}
        with torch.no_grad():
            for p, (saved, entry) in zip(self._params, self._snapshot, strict=True):
                p.copy_(saved.to(p.device))
                if entry is None:
                    opt_state.pop(p, None)
                else:
                    opt_state[p] = {
                        k: v.restore() if isinstance(v, _Saved) else v for k, v in entry.items()
                    }
        self._snapshot = None
        self.rolled_back += 1
        return control


class SkipNonFiniteUpdates(TrainerCallback):
    """Drops the optimizer step of a window whose loss or gradient was not finite.

    Called right before ``optimizer.step()``: setting every ``grad`` to None makes
    torch's optimizers skip the parameters entirely (no moment update, no weight
    decay). All processes agree (the flag is summed across them).
    """

    def __init__(self, trainer: Any) -> None:  # an RLVRTrainer
        self.trainer = trainer

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        trainer = self.trainer
        model = trainer.model
        bad = trainer._nonfinite_pending or any(
            p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters()
        )
        flag = torch.tensor(float(bad), device=trainer.accelerator.device)
        if trainer.accelerator.reduce(flag, reduction="sum").item() > 0:
            for p in model.parameters():
                p.grad = None
            trainer.skipped_updates += 1
        trainer._nonfinite_pending = False
        return control
