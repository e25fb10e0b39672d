"""The option groups both engines share: each field's name, default, choices (its
``Literal``), help text and checks, defined once.

The TRL path's groups (:mod:`contrastive_rlvr.trainer.config_groups`) and verl's
``CrlvrPolicyLossConfig`` (:mod:`contrastive_rlvr.integrations.verl.config`) both
inherit these dataclasses, so a field is named, defaulted and checked in one place.
This part imports neither TRL nor verl: the verl integration runs without TRL.
"""

from .advantages import AdvantageFields
from .bicc import BiCCFields
from .checks import check, check_choices, check_field_types, finite, literal_fields
from .conspo import ConSPOFields
from .rcc import RCCFields
from .staleness import StalenessFields

#: The shared groups, in the order the TRL path's groups list them.
SHARED_GROUPS = (AdvantageFields, ConSPOFields, BiCCFields, RCCFields)
#: Read by verl's asynchronous modes only (the TRL path has no stale rows yet).
STALENESS_GROUPS = (StalenessFields,)

__all__ = [
    "SHARED_GROUPS",
    "STALENESS_GROUPS",
    "AdvantageFields",
    "BiCCFields",
    "ConSPOFields",
    "RCCFields",
    "StalenessFields",
    "check",
    "check_choices",
    "check_field_types",
    "finite",
    "literal_fields",
]
