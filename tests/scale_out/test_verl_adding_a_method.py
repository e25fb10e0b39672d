"""docs/architecture.md's "Adding a method" on verl: the throwaway option of
tests/method_walkthrough.py, one field of a ``method_options`` group, is a field of verl's
policy-loss config with its default, with no verl-side edit. Needs verl (.venv-verl)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from method_walkthrough import DEFAULT, OPTION, package_with_the_option

verl = pytest.importorskip("verl")

READ_THE_FIELD = f"""
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
field = CrlvrPolicyLossConfig.__dataclass_fields__["{OPTION}"]
print(field.type, field.default)
"""


def test_the_option_is_in_verls_policy_loss_config(tmp_path):
    src = package_with_the_option(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", READ_THE_FIELD],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["float", str(DEFAULT)]
