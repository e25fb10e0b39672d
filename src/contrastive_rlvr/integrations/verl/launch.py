"""The start checks before Ray starts: every verl PPO entry point refuses, in one line, a
setting of this package that its trainer cannot honour.

verl's PPO entry points (``verl.trainer.main_ppo`` and the experimental
``verl.experimental.one_step_off_policy.main_ppo`` and
``verl.experimental.fully_async_policy.fully_async_main``) all call
``verl.utils.device.auto_set_device(config)`` on the driver with the composed config,
before ``ray.init``. :func:`install` (run when the plugin loads, during ``import verl``,
before any entry point's own imports bind the name) wraps it: verl's function runs
unchanged, then :func:`check_launch`. Nothing else of verl is touched.

What is refused:

- BiCC, RCC or ConSPO's estimators outside the ``crlvr_*`` trainers: verl's experimental
  trainers (another batch type and worker class: BiCC would never be applied, RCC and
  ConSPO's margin get no inputs), verl's legacy trainer (``trainer.use_v1=False``) and
  verl's own v1 modes (``sync``, ``colocate_async``, ``separate_async``); the message
  names the supported modes.
- In a ``crlvr_*`` mode, everything :func:`.settings.check_settings` refuses (the
  same checks run again in the trainer, before any worker starts).
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from .advantages import ESTIMATORS
from .modes import TRAINER_MODES
from .settings import check_settings, crlvr_options

#: Where the BiCC / RCC / ConSPO hooks run.
SUPPORTED = (
    "trainer.v1.trainer_mode=" + " / ".join(TRAINER_MODES) + " with python -m verl.trainer.main_ppo"
)
#: verl's experimental entry points, by module -> the trainer's name in messages.
EXPERIMENTAL = {
    "verl.experimental.one_step_off_policy.main_ppo": "one_step_off_policy",
    "verl.experimental.fully_async_policy.fully_async_main": "fully_async_policy",
}


def entry_point() -> str:
    """The module the process was started as (``python -m <module>``), or ``""``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "") or ""


def needs_crlvr_trainer(config: Any) -> str | None:
    """The setting of this package that only a ``crlvr_*`` trainer runs (BiCC, an RCC or
    ConSPO estimator), as ``key=value``; ``None`` when there is none."""
    estimator = ESTIMATORS.get(str(config.algorithm.get("adv_estimator", "")))
    if estimator is not None and (estimator.needs_ref or estimator.contrastive):
        return f"algorithm.adv_estimator={estimator.name}"
    if crlvr_options(config).bicc:
        return "actor_rollout_ref.actor.policy_loss.bicc=true"
    return None


def check_launch(config: Any, entry: str | None = None) -> None:
    """Refuse, in one line, what the run's trainer cannot honour (module docstring).

    Args:
        config: the composed verl PPO config (a ``DictConfig``).
        entry: the entry-point module (default: the running ``__main__``'s).
    """
    if "actor_rollout_ref" not in config or "algorithm" not in config:
        return  # not a PPO run (verl's SFT trainers call the same function)
    entry = entry_point() if entry is None else entry
    mode = str(config.trainer.get("v1", {}).get("trainer_mode", "sync"))
    if entry in EXPERIMENTAL:
        where = f"verl's experimental {EXPERIMENTAL[entry]} trainer"
    elif not bool(config.trainer.get("use_v1", True)):
        where = "verl's legacy trainer (trainer.use_v1=False)"
    elif mode not in TRAINER_MODES:
        where = f"trainer.v1.trainer_mode={mode}"
    else:
        check_settings(config)
        return
    need = needs_crlvr_trainer(config)
    if need is not None:
        raise ValueError(f"{need} does not run in {where}; supported: {SUPPORTED}")


def install() -> None:
    """Wrap ``verl.utils.device.auto_set_device`` so that :func:`check_launch` runs right
    after it, on the driver, before Ray starts (once; idempotent)."""
    import verl.utils.device as device

    original = device.auto_set_device
    if getattr(original, "_crlvr_launch_check", False):
        return

    @functools.wraps(original)
    def auto_set_device(config: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(config, *args, **kwargs)
        check_launch(config)
        return result

    auto_set_device._crlvr_launch_check = True  # type: ignore[attr-defined]
    device.auto_set_device = auto_set_device
