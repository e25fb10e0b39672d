"""The actor worker of a ``crlvr_sync`` run with BiCC: verl's ``ActorRolloutRefWorker`` with
the actor loss of :class:`~.distill.CrlvrActorLoss` and the transfer probe.

The ``crlvr_sync`` trainer puts this class where verl's trainer puts its own
(``role_worker_mapping``, :meth:`~.trainer.CrlvrTrainer._init_resource_pool_mgr`); nothing
of verl is edited. Two additions:

- ``init_model``: verl's, then the actor's loss ``partial(ppo_loss, config)`` becomes
  :class:`~.distill.CrlvrActorLoss` on the same config (verl's loss, plus the distill term
  with ``bicc_form: distill``), as verl's trainer sets the critic's loss with
  ``set_loss_fn``.
- ``crlvr_transfer_probe``: the gradient of one loss on the first micro-batch of this
  rank's rows, through verl's own engine (forward, backward, FSDP's gradient reduction),
  then the optimizer's gradients are zeroed again: nothing is stepped. Phase ``"plain"``
  keeps plain GRPO's surrogate gradient (:func:`~.distill.plain_surrogate_loss`) on the
  plain rows; phase ``"applied"`` takes the actor loss's gradient on the rows the update
  trains on and returns the cosine of the two (summed over the ranks' shards), as
  ``bicc/transfer_cos``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from tensordict import TensorDict
from verl.experimental.separation.engine_workers import DetachActorWorker
from verl.single_controller.base.decorator import (
    Dispatch,
    make_nd_compute_dataproto_dispatch_fn,
    register,
)
from verl.utils import tensordict_utils as tu
from verl.workers.engine_workers import ActorRolloutRefWorker
from verl.workers.utils.losses import ppo_loss

from ...algorithms.bicc_transfer import cosine_of_dots, gradient_dots
from .distill import CrlvrActorLoss, plain_surrogate_loss

#: The batch's ``extra_info`` key naming the probe's phase (``"plain"`` or ``"applied"``).
PROBE_PHASE = "crlvr_probe_phase"
#: The probe's metric.
TRANSFER_KEY = "bicc/transfer_cos"


def _local(grad: torch.Tensor | None) -> torch.Tensor | None:
    """This rank's part of a gradient (FSDP2 keeps DTensor shards), copied."""
    if grad is None:
        return None
    local = grad.to_local() if hasattr(grad, "to_local") else grad
    return local.detach().clone()


def probe_gradient(training: Any, data: TensorDict, loss_fn: Any) -> list[torch.Tensor | None]:
    """The gradient of ``loss_fn`` on the first micro-batch of ``data`` (this rank's rows),
    per parameter (this rank's shard; None where no gradient reached it), taken by verl's
    engine as the update takes it; the engine's gradients are zeroed before and after.

    Args:
        training: the actor's ``TrainingWorker`` (``.engine``, ``.engine_config``,
            ``.model_config``).
        data: this rank's rows with the update's fields and settings (``extra_info``).
        loss_fn: a verl loss function ``(model_output, data, dp_group) -> (loss, metrics)``.
    """
    engine, engine_config = training.engine, training.engine_config
    rows = int(data.batch_size[0])
    micro = engine_config.micro_batch_size_per_gpu
    size = rows if engine_config.use_dynamic_bsz or not micro else min(rows, int(micro))
    first = tu.index_select_tensor_dict(data, list(range(size)))
    # what TrainingWorker.train_batch injects before the engine's train step
    defaults = {
        "use_remove_padding": training.model_config.get("use_remove_padding", False),
        "use_dynamic_bsz": engine_config.use_dynamic_bsz,
        "max_token_len_per_gpu": engine_config.max_token_len_per_gpu,
        "micro_batch_size_per_gpu": engine_config.micro_batch_size_per_gpu,
        "use_fused_kernels": engine_config.use_fused_kernels,
    }
    for key, value in defaults.items():
        if key not in first.keys():
            tu.assign_non_tensor(first, **{key: value})
    with engine.train_mode():
        engine.optimizer_zero_grad()
        engine.forward_backward_batch(first, loss_function=loss_fn, forward_only=False)
        grads = [_local(p.grad) for p in engine.module.parameters()]
        engine.optimizer_zero_grad()
    return grads


class CrlvrActorRolloutRefWorker(ActorRolloutRefWorker):
    """verl's actor / rollout / reference worker with the crlvr actor loss and the transfer
    probe (module docstring)."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self) -> None:
        super().init_model()
        loss_fn = getattr(self, "loss_fn", None)
        if isinstance(loss_fn, partial) and loss_fn.func is ppo_loss:
            self.loss_fn = CrlvrActorLoss(loss_fn.keywords["config"])
            self.actor.set_loss_fn(self.loss_fn)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="actor"))
    def crlvr_transfer_probe(self, data: TensorDict) -> TensorDict:
        """One phase of the transfer probe on this rank's rows (module docstring); returns
        ``{"metrics": {}}``, or ``{"metrics": {"bicc/transfer_cos": cos}}`` after the
        ``"applied"`` phase."""
        phase = tu.pop(data, key=PROBE_PHASE, default=None)
        if phase not in ("plain", "applied"):
            raise ValueError(f"{PROBE_PHASE} must be 'plain' or 'applied', got {phase!r}")
        loss_fn = plain_surrogate_loss if phase == "plain" else self.loss_fn
        grads = probe_gradient(self.actor, data, loss_fn)
        metrics: dict[str, float] = {}
        if phase == "plain":
            self._crlvr_plain_grads = grads
        else:
            plain = getattr(self, "_crlvr_plain_grads", None)
            if plain is None:
                raise RuntimeError("the transfer probe's 'applied' phase came before 'plain'")
            dots = gradient_dots(grads, plain)
            if torch.distributed.is_initialized():
                # FSDP shards every parameter over the actor's ranks: the sums add up.
                device = next(self.actor.engine.module.parameters()).device
                summed = dots.to(device)
                torch.distributed.all_reduce(summed)
                dots = summed.cpu()
            metrics[TRANSFER_KEY] = cosine_of_dots(dots)
            self._crlvr_plain_grads = None
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})


class CrlvrDetachActorWorker(CrlvrActorRolloutRefWorker, DetachActorWorker):
    """:class:`CrlvrActorRolloutRefWorker` with verl's ``DetachActorWorker`` weight save /
    restore to CPU, which ``separate_async`` calls to compute the old log-probs with the
    weights of the start of its ``parameter_sync_step`` cycle (BiCC's conditioned pass
    included)."""
