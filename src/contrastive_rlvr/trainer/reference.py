"""The frozen reference policy pi_ref of KL, RCC's delta and the delta diagnostics.

A full model trains against a frozen copy of its initial weights. A PEFT adapter trains
against the base model with the adapter disabled (or TRL's ``"ref"`` adapter when it
loaded one), as TRL does: no copy is made, the reference forward is the policy's forward
inside :func:`trl.trainer.utils.use_adapter`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from trl.trainer.utils import (
    add_fused_lm_head,
    create_model_from_path,
    get_config_model_id,
    use_adapter,
)


def is_adapter(model: torch.nn.Module) -> bool:
    """True for a PEFT model (its reference is the adapter-disabled base model)."""
    return hasattr(model, "peft_config")


def frozen_copy(trainer: Any) -> torch.nn.Module:
    """A frozen copy of the initial policy (this runs before any update, and before a
    checkpoint's weights are loaded on resume)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    if trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled:
        # Sharded weights cannot be copied in place: rebuild from the path, as TRL does.
        from trl.models import prepare_deepspeed, prepare_fsdp

        ref = create_model_from_path(get_config_model_id(model.config), dtype=model.dtype)
        ref.eval().requires_grad_(False)
        add_fused_lm_head(ref, temperature=trainer.temperature)
        prepare = prepare_deepspeed if trainer.is_deepspeed_enabled else prepare_fsdp
        return prepare(ref, trainer.accelerator)
    ref = copy.deepcopy(model)
    # The copy carries the policy's patched forward, which closes over the policy itself:
    # drop it and patch the copy's own.
    ref.__dict__.pop("forward", None)
    ref.eval().requires_grad_(False)
    add_fused_lm_head(ref, temperature=trainer.temperature)
    return trainer.accelerator.prepare_model(ref, evaluation_mode=True)


def adapter_reference(
    unwrapped: torch.nn.Module, policy_logps: Callable[..., torch.Tensor]
) -> Callable[..., torch.Tensor]:
    """The reference forward of a PEFT policy: ``policy_logps`` with the adapter off (or
    TRL's ``"ref"`` adapter on, when the run re-trains a loaded adapter)."""

    def logps(*tensors: torch.Tensor, share_prefix: bool = False) -> torch.Tensor:
        name = "ref" if "ref" in unwrapped.peft_config else None
        with use_adapter(unwrapped, adapter_name=name):
            return policy_logps(*tensors, share_prefix=share_prefix)

    return logps
