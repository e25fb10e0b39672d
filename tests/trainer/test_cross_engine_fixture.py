"""The committed cross-engine fixture is what the TRL stages give today.

tests/scale_out/test_verl_parity.py (in .venv-verl) compares the verl hooks with
tests/fixtures/cross_engine_parity.json; this test (in .venv) recomputes that file
with tests/fixtures/make_cross_engine_parity.py, so a change to the TRL path's
BiCC rows, advantages or RCC baselines fails here until the fixture is written
again, and then the parity test says whether verl follows.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))

import make_cross_engine_parity  # noqa: E402


def test_fixture_is_what_the_trl_stages_give_today():
    committed = json.loads((FIXTURES / "cross_engine_parity.json").read_text())
    # through JSON, as the file stores it (floats as Python floats)
    now = json.loads(json.dumps(make_cross_engine_parity.fixture()))
    assert now["inputs"] == committed["inputs"]
    assert now["settings"] == committed["settings"]
    assert now["expected"] == committed["expected"], (
        "the TRL stages changed: run PYTHONPATH=src .venv/bin/python "
        "tests/fixtures/make_cross_engine_parity.py, then "
        "tests/scale_out/test_verl_parity.py in .venv-verl"
    )


def test_fixture_rows_read_as_the_trl_placement_says():
    # Hand-checked reading of two rows: the attempts sit at the end of the user turn
    # (before its end-of-turn token 2), with EOS / end-of-turn stripped from them.
    from parity_batch import ChatCharTokenizer

    committed = json.loads((FIXTURES / "cross_engine_parity.json").read_text())
    ids = committed["expected"]["grpo_rcc_bicc"]["conditioned_prompt_ids"]
    tok = ChatCharTokenizer()
    # row 1 (wrong, group 0) reads the one correct attempt whole: 35 + 12 + 19 + 14 = 80
    # tokens of the budget's 92
    user = (
        "user\nWhat is 2+3?\nCorrect attempts at this problem:\n"
        "Attempt 1: 2+3 is 5. \\boxed{5}\n"
    )
    assert tok.decode(ids[1]) == (
        "system\nAnswer briefly." + user + "Your attempt:\nassistant\n"
    )
    assert ids[1][-len("assistant\n") - 2] == 2  # the user turn is closed after the attempts
    # group 2 is all wrong: its rows keep the plain prompt
    assert ids[8] == committed["inputs"]["rows"][8]["prompt_ids"]


def test_distill_fixture_is_what_the_trl_distill_loss_gives_today():
    # tests/scale_out/test_verl_distill.py compares verl's actor loss with this file.
    import make_distill_parity

    committed = json.loads((FIXTURES / "distill_parity.json").read_text())
    now = json.loads(json.dumps(make_distill_parity.fixture()))
    assert now["inputs"] == committed["inputs"] and now["cases"] == committed["cases"]
    assert now["expected"] == committed["expected"], (
        "the TRL path's DistillLoss changed: run PYTHONPATH=src .venv/bin/python "
        "tests/fixtures/make_distill_parity.py, then tests/scale_out/test_verl_distill.py "
        "in .venv-verl"
    )
    # row 2 (taught, one token, A = -0.5, ratio e^-0.1): 0.7 x GRPO's 0.5 e^-0.1 / 4 plus
    # 0.3 x the distill term's (-1.5 - -1.0) x min(e^-0.1, 2) / 4, by hand
    ratio = math.exp(-0.1)
    grad = committed["expected"]["weight_0.3_is_clip_2"]["grad"][2][0]
    assert grad == pytest.approx(0.7 * 0.5 * ratio / 4 + 0.3 * -0.5 * ratio / 4, rel=1e-12)
