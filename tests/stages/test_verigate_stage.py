"""VeriGate's process-advantage stage on a hand-made batch."""

from __future__ import annotations

import math

import pytest
import torch
from stage_utils import context, make_batch

from contrastive_rlvr.trainer.stages import ProcessAdvantages


def digit_scorer(prompt: str, steps: list[str]) -> list[float]:
    return [1.0 if s.isdigit() else 0.0 for s in steps]


def test_gated_group_gets_step_advantages_the_other_keeps_its_outcome():
    # G = 2. Group 1 (rows 0, 1) all right: gated. Its completions "1a" and "22" (one
    # step per character). Group 2 (rows 2, 3) mixed: outcome advantages +-0.5.
    c = [ord(ch) for ch in "1a"], [ord(ch) for ch in "22"], [ord("x")], [ord("y")]
    batch = make_batch([[ord("q")]] * 4, list(c), [1, 1, 1, 0])
    batch.shared["outcome_advantages"] = torch.tensor([0.0, 0.0, 0.5, -0.5])
    ctx, logged = context(2)
    stage = ProcessAdvantages(
        digit_scorer,
        step_rule="regex",
        step_pattern=r"[\s\S]",
        scale_by_std=True,
        eps=0.0,
        process_norm="cumulated",
    )
    stage(batch, ctx)
    adv = batch.data["advantages"]
    assert adv.shape == (4, 2)
    # Step scores: "1a" -> [1, 0], "22" -> [1, 1]; future-cumulated: [1, 0] and [2, 1].
    # Over the group's four steps: mean 1, Bessel std sqrt(2/3).
    s = math.sqrt(2 / 3)
    assert adv[0].tolist() == pytest.approx([0.0, -1 / s])
    assert adv[1].tolist() == pytest.approx([1 / s, 0.0])
    # Mixed group: its outcome advantage on its real token, 0 on padding.
    assert adv[2].tolist() == pytest.approx([0.5, 0.0])
    assert adv[3].tolist() == pytest.approx([-0.5, 0.0])
    assert logged["verigate/gated_frac"] == [0.5]


def test_steps_normalisation_by_hand_and_an_all_right_group_gets_zero():
    # The same gated group with process_norm "steps" (the config's default): step scores
    # "1a" -> [1, 0], "22" -> [1, 1]; over the group's four steps mean 0.75, Bessel std
    # sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5, normalised [0.5, -1.5] and [0.5, 0.5]; each
    # step gets its own plus the later steps' values: [-1, -1.5] and [1, 0.5].
    # Group 2 ("33", "44") is all right too and every step is right: exactly 0.
    c = [[ord(ch) for ch in w] for w in ("1a", "22", "33", "44")]
    batch = make_batch([[ord("q")]] * 4, c, [1, 1, 1, 1])
    batch.shared["outcome_advantages"] = torch.zeros(4)
    ctx, logged = context(2)
    stage = ProcessAdvantages(
        digit_scorer,
        step_rule="regex",
        step_pattern=r"[\s\S]",
        scale_by_std=True,
        eps=0.0,
        process_norm="steps",
    )
    stage(batch, ctx)
    adv = batch.data["advantages"]
    assert adv[0].tolist() == pytest.approx([-1.0, -1.5])
    assert adv[1].tolist() == pytest.approx([1.0, 0.5])
    assert adv[2:].tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert logged["verigate/gated_frac"] == [1.0]
