"""The run around the trainer: :func:`train` and what it stands on (the output folder and
what a run may do with it, the embedded or the user's inputs, the held-out avg@n, the
summary). The engine it drives is :mod:`contrastive_rlvr.trainer`."""

from .command import train

__all__ = ["train"]
