"""verl plugin entry point: importing this module registers everything with verl.

verl 0.9 imports every ``verl.plugins`` entry point at the end of ``import
verl`` (``VERL_USE_EXTERNAL_PLUGINS``: ``auto`` loads all, ``none`` none, or a
comma list of entry-point names such as ``contrastive_rlvr``). It swallows a
plugin's import error into a debug log line, so when a ``crlvr_*`` name is
reported unknown, ``import contrastive_rlvr.integrations.verl.plugin`` shows
the real error.

Loading also installs the start checks that run before Ray starts (:mod:`.launch`).
"""

from __future__ import annotations

import logging

from .advantages import register_estimators
from .losses import register_policy_losses

POLICY_LOSS_NAMES = register_policy_losses()
ESTIMATOR_NAMES = register_estimators()

try:
    from .trainer import TRAINER_MODES
except ImportError as err:
    # verl's v1 trainers need TransferQueue, which verl does not require; the losses
    # and estimators work without it (e.g. under verl's legacy trainer).
    logging.getLogger(__name__).warning("the crlvr_* trainers are not registered: %s", err)
    TRAINER_NAMES: list[str] = []
else:
    TRAINER_NAMES = list(TRAINER_MODES)
    from .launch import install

    install()
