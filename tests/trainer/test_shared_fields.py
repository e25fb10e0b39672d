"""The TRL path's config carries the shared option groups as they are defined: every field
of :mod:`contrastive_rlvr.method_options`' groups is a field of ``RLVRConfig`` with the
group's default and ``Literal`` choices, in the ``train --help`` group of the TRL group
that inherits it, and checked by the group's check.

verl's ``CrlvrPolicyLossConfig`` is held against the same groups in
tests/scale_out/test_verl_shared_fields.py (that environment has no TRL): a field both
engines have carries one name, one default and one set of choices.
"""

from __future__ import annotations

import dataclasses

import pytest

from contrastive_rlvr.method_options import (
    SHARED_GROUPS,
    AdvantageFields,
    BiCCFields,
    ConSPOFields,
    RCCFields,
    literal_fields,
)
from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.config_groups import GROUPS, BiCCOptions, RCCOptions, RecipeOptions


def default_of(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_each_shared_group_is_inherited_by_one_trl_group():
    owners = {BiCCFields: BiCCOptions, RCCFields: RCCOptions}
    owners |= {AdvantageFields: RecipeOptions, ConSPOFields: RecipeOptions}
    assert set(owners) == set(SHARED_GROUPS)
    for shared, group in owners.items():
        assert issubclass(group, shared) and group in GROUPS
        assert [g for g in GROUPS if issubclass(g, shared)] == [group]


def test_every_shared_field_is_an_rlvr_field_with_its_default_and_choices():
    rlvr = {f.name: f for f in dataclasses.fields(RLVRConfig)}
    rlvr_choices = literal_fields(RLVRConfig)
    for shared in SHARED_GROUPS:
        for f in dataclasses.fields(shared):
            assert f.name in rlvr, f.name
            assert default_of(rlvr[f.name]) == default_of(f), f.name
            assert rlvr_choices.get(f.name) == literal_fields(shared).get(f.name), f.name
            assert rlvr[f.name].metadata["help"] == f.metadata["help"], f.name
    # the TRL names the verl config takes too
    assert {"conspo_tau", "conspo_max_margin", "conspo_warmup", "reward_threshold"} <= set(rlvr)
    assert rlvr_choices["bicc_ratio_mode"] == (("paper", "consistent", "conditioned_old"), True)


@pytest.mark.parametrize(
    ("group", "check", "name", "value"),
    [
        (BiCCOptions, "validate_bicc", "bicc_pairing", "all"),
        (BiCCOptions, "validate_bicc", "bicc_truncation", "both"),
        (RCCOptions, "validate_rcc", "rcc_delta", "max"),
        (RCCOptions, "validate_rcc", "rcc_bound", "clip"),
    ],
)
def test_a_value_outside_the_literal_is_refused_by_the_trl_group(group, check, name, value):
    options = group(**{name: value})
    choices = ", ".join(literal_fields(group)[name][0])
    with pytest.raises(ValueError, match=f"^{name}='{value}' is invalid: choose one of {choices}$"):
        getattr(options, check)()
