"""The project's configuration groups, one dataclass per concern.

:class:`~contrastive_rlvr.trainer.config.RLVRConfig` combines them with TRL's
``GRPOConfig`` into one dataclass (one YAML file, one set of ``--field`` options).
Each group documents its fields (their ``help`` is the ``train --help`` text),
names itself in ``help_group`` (the heading ``train --help`` lists it under) and
validates its own fields in ``validate_<group>()``; checks that combine groups
live in the combined class.
"""

from ...method_options import check, finite
from .bicc import BiCCOptions
from .data import DataOptions
from .diagnostics import DiagnosticsOptions
from .embedded import CUSTOM_ONLY, EmbeddedTaskOptions
from .heldout import HeldoutOptions
from .rcc import RCCOptions
from .recipe import RecipeOptions
from .rewards import RewardOptions
from .run_folder import RunFolderOptions
from .token_methods import TokenMethodOptions

# The order ``train --help`` lists them in (TRL's own fields come after); RLVRConfig
# inherits them in this order.
GROUPS = (
    DataOptions,
    RewardOptions,
    HeldoutOptions,
    RunFolderOptions,
    EmbeddedTaskOptions,
    RecipeOptions,
    BiCCOptions,
    RCCOptions,
    TokenMethodOptions,
    DiagnosticsOptions,
)

__all__ = [
    "CUSTOM_ONLY",
    "GROUPS",
    "BiCCOptions",
    "RCCOptions",
    "RecipeOptions",
    "check",
    "finite",
]
