"""verl's policy-loss config speaks the TRL path's vocabulary: every field the project adds
to verl's ``PolicyLossConfig`` is a field of a shared group of
:mod:`contrastive_rlvr.method_options` with the same name, default and ``Literal``
choices, and a verl config of 0.1.0 (``tau``, ``threshold``, ``bicc_ratio``, ...) is
refused in one line naming the new name.

The TRL side is held against the same groups in tests/trainer/test_shared_fields.py (this
environment has no TRL, the TRL one no verl): together they say that a field both engines
have carries one name, one default and one set of choices. Needs verl (.venv-verl).
"""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("verl")

from verl.workers.config import PolicyLossConfig
from verl_runs import compose_recipe, with_overrides

from contrastive_rlvr.integrations.verl.config import RENAMED, WHERE, CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.settings import check_settings
from contrastive_rlvr.method_options import SHARED_GROUPS, STALENESS_GROUPS, literal_fields

#: Every group verl's config inherits: the shared ones and the stale-rollout ones (read by
#: verl's asynchronous modes; the TRL path has no stale rows yet).
GROUPS = (*SHARED_GROUPS, *STALENESS_GROUPS)


def default_of(f: dataclasses.Field) -> object:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def project_fields() -> dict[str, dataclasses.Field]:
    """The fields CrlvrPolicyLossConfig adds to verl's PolicyLossConfig."""
    verls = {f.name for f in dataclasses.fields(PolicyLossConfig)}
    return {f.name: f for f in dataclasses.fields(CrlvrPolicyLossConfig) if f.name not in verls}


def shared_fields() -> dict[str, tuple[type, dataclasses.Field]]:
    """Field name -> (its group, the field) over every group of :data:`GROUPS`."""
    out = {}
    for group in GROUPS:
        for f in dataclasses.fields(group):
            assert f.name not in out, f"{f.name} is in two shared groups"
            out[f.name] = (group, f)
    return out


def test_every_project_field_of_verl_is_a_shared_field():
    ours, shared = project_fields(), shared_fields()
    assert sorted(ours) == sorted(shared)
    for group in GROUPS:
        assert issubclass(CrlvrPolicyLossConfig, group)
    # what the brief of this change named: a few of the fields by their TRL names
    assert {"conspo_tau", "reward_threshold", "bicc_ratio_mode", "adv_eps", "rcc_bound"} <= set(
        ours
    )


def test_each_shared_field_has_the_groups_default_and_choices_on_verl():
    verl_choices = literal_fields(CrlvrPolicyLossConfig)
    fields = project_fields()
    for name, (group, f) in shared_fields().items():
        assert default_of(fields[name]) == default_of(f), name
        assert verl_choices.get(name) == literal_fields(group).get(name), name
    # read from the Literal annotations, not from a second list
    assert verl_choices["bicc_ratio_mode"] == (("paper", "consistent", "conditioned_old"), True)
    assert verl_choices["rcc_bound"] == (("none", "reward_range"), False)
    assert verl_choices["bicc_truncation"] == (("middle", "head", "tail"), False)


def test_the_defaults_of_an_unconfigured_verl_config_are_the_shared_ones():
    config = CrlvrPolicyLossConfig(loss_mode="crlvr_grpo")
    for name, (_group, f) in shared_fields().items():
        # resolved: the ratio mode from the recipe, the form to its default
        if name not in ("bicc_ratio_mode", "bicc_form"):
            assert getattr(config, name) == default_of(f), name
    assert config.bicc_ratio_mode == "paper" and config.bicc_form == "distill"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("bicc_truncation", "both"),
        ("bicc_ratio_mode", "always"),
        ("rcc_delta", "max"),
        ("bicc_kl_reference", "none"),
    ],
)
def test_a_value_outside_the_literal_is_refused_naming_the_path(name, value):
    with pytest.raises(ValueError) as caught:
        CrlvrPolicyLossConfig(**{name: value})
    message = str(caught.value)
    assert message.startswith(f"{WHERE}{name}={value!r} is invalid: choose one of ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "value", "fix"),
    [
        ("conspo_tau", 0.0, "must be a finite number > 0"),
        ("conspo_max_margin", -0.1, "must be a finite number >= 0"),
        ("conspo_warmup", float("nan"), "must be a finite number > 0"),
        ("adv_eps", -1e-4, "must be a finite number >= 0"),
        ("reward_threshold", float("inf"), "must be a finite number"),
        ("rcc_coef", float("inf"), "must be finite"),
        ("bicc_context_ratio", 1.0, "must be in (0, 1)"),
        ("bicc_max_seq_len", 0, "must be positive (or unset)"),
    ],
)
def test_the_shared_checks_run_on_verl(name, value, fix):
    with pytest.raises(ValueError) as caught:
        CrlvrPolicyLossConfig(**{name: value})
    assert str(caught.value) == f"{WHERE}{name}={value!r} is invalid: {fix}"


def test_the_old_names_are_no_fields_and_map_to_fields():
    fields = project_fields()
    assert set(RENAMED).isdisjoint(fields)
    assert set(RENAMED.values()) <= set(fields)
    assert RENAMED == {
        "tau": "conspo_tau",
        "max_margin": "conspo_max_margin",
        "margin_warmup": "conspo_warmup",
        "threshold": "reward_threshold",
        "bicc_ratio": "bicc_ratio_mode",
    }


@pytest.mark.parametrize(("old", "new"), sorted(RENAMED.items()))
def test_an_old_name_is_refused_in_one_line_naming_the_new(old, new):
    value = "paper" if old == "bicc_ratio" else 0.5
    with pytest.raises(ValueError) as caught:
        CrlvrPolicyLossConfig(**{old: value})
    message = str(caught.value)
    assert message == f"{WHERE}{old} is 0.1.0's name: use {WHERE}{new} (the TRL path's name)"


@pytest.mark.parametrize(("old", "new"), [("tau", "conspo_tau"), ("threshold", "reward_threshold")])
def test_an_old_name_in_a_verl_recipe_stops_the_trainer_in_one_line(old, new):
    cfg = with_overrides(compose_recipe("conspo_rcc"), **{f"{WHERE}{old}": 0.5})
    with pytest.raises(ValueError) as caught:
        check_settings(cfg)
    assert (
        str(caught.value) == f"{WHERE}{old} is 0.1.0's name: use {WHERE}{new} (the TRL path's name)"
    )
