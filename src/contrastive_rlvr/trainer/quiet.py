"""Warnings no user can act on, silenced by their exact messages (every other warning,
and a user's own call of a deprecated name, still show)."""

from __future__ import annotations

import re
import warnings


def silence_known_warnings() -> None:
    """Install the filters (idempotent: ``warnings`` drops a repeated filter)."""
    from ..models import ALIASES

    # The pinned TRL calls transformers' deprecated gradient-checkpointing methods on every
    # generation (trl/models/utils.py), so every run printed three FutureWarnings no user can act
    # on. Only those exact messages are silenced; a user's own call of a deprecated name, and
    # every other warning, still show.
    warnings.filterwarnings(
        "ignore",
        message=r"`(gradient_checkpointing_enable|gradient_checkpointing_disable|"
        r"is_gradient_checkpointing)` is deprecated",
        category=FutureWarning,
    )
    # An adapter on an alias records the alias's upstream id (models.recorded_model_id); offline,
    # PEFT's save looks that id up to see whether the vocabulary was resized and warns that it
    # cannot. The project never resizes an alias's vocabulary, so for those ids it is noise.
    for _alias in ALIASES.values():
        warnings.filterwarnings(
            "ignore",
            message=f"Could not find a config file in {re.escape(_alias.upstream)} ",
            category=UserWarning,
        )
