"""verl's ``policy_loss.bicc_item_prefix`` is checked when the config is built, as the
TRL field is: a field other than ``{index}`` is refused there, not when the first
context is built mid-run. Needs verl (the Makefile's .venv-verl); skipped without it."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig


def test_the_default_framing_text_builds():
    assert CrlvrPolicyLossConfig().bicc_template.item_prefix == "Attempt {index}: "


@pytest.mark.parametrize("prefix", ["Try {n}: ", "Try {index: "])
def test_an_item_prefix_with_another_field_is_refused(prefix):
    with pytest.raises(ValueError, match=r"bicc_item_prefix=.* is invalid .* may use \{index\}"):
        CrlvrPolicyLossConfig(bicc_item_prefix=prefix)
