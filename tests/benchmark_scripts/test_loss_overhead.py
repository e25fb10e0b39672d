"""benchmarks/loss_overhead.py: its whole-step arithmetic, its stand-in log-prob head (the GPU
check's), and its BiCC batch."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from contrastive_rlvr.shared_forward.packed_prefix import build_packed_layout

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "loss_overhead.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("loss_overhead", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_whole_step_ratios(bench):
    t = {"plain": 2.0, "bicc_packed": 2.5}
    phases = {"nograd_policy": 0.5, "nograd_ref": 0.7, "optimizer": 0.5}
    step = bench.steps(t, phases)
    assert step["grpo_s"] == 2.5  # loss 2.0 + optimizer 0.5
    assert step["rcc/plain today"] == pytest.approx((2.5 + 0.5 + 0.7) / 2.5)
    assert step["rcc/plain, delta from a pass the step makes"] == pytest.approx(3.2 / 2.5)
    assert step["bicc_packed/plain, paper ratio mode"] == pytest.approx((2.5 + 0.5 + 0.5) / 2.5)
    assert step["bicc_packed/plain, consistent ratio mode"] == pytest.approx(3.0 / 2.5)
    assert bench.steps(t, {"optimizer": 0.5}) == {}
    assert not any(k.endswith("with generation") for k in step)
    # With the generate phase (5 s): every step also with it, the shares worked by hand.
    gen = bench.steps(t, {**phases, "generate": 5.0})
    assert gen["grpo_s with generation"] == 7.5  # 2.0 + 0.5 + 5.0
    assert gen["rcc/plain today with generation"] == pytest.approx(8.7 / 7.5)
    assert gen["rcc/plain, delta from a pass the step makes with generation"] == pytest.approx(
        8.2 / 7.5
    )
    assert gen["bicc_packed/plain, paper ratio mode with generation"] == pytest.approx(8.5 / 7.5)
    assert gen["bicc_packed/plain, consistent ratio mode with generation"] == pytest.approx(
        8.0 / 7.5
    )
    assert gen["rcc/plain today"] == step["rcc/plain today"]  # the no-generation ones stay


def test_token_bounds_by_hand(bench):
    # The plain loss phase 2.0 s on 100 tokens; BiCC packed 150 tokens (x1.5), per row 300.
    t = {"plain": 2.0, "bicc_packed": 4.0, "bicc_rows": 9.0}
    tokens = {"plain": 100, "bicc_packed": 150, "bicc_rows": 300}
    phases = {"nograd_policy": 0.9, "nograd_ref": 0.9, "optimizer": 0.5}
    bound = bench.token_bounds(t, phases, tokens)
    assert bound["loss bicc_packed/plain"] == pytest.approx(1.5)
    assert bound["loss bicc_rows/plain"] == pytest.approx(3.0)
    # BiCC's loss phase at 1.5 x 2.0 = 3.0 s; GRPO's step 2.0 + 0.5 = 2.5 s; a no-grad
    # forward of the plain rows a third of the plain loss phase, 2/3 s.
    assert bound["step grpo_s"] == pytest.approx(2.5)
    assert bound["step bicc_packed/plain, consistent ratio mode"] == pytest.approx(3.5 / 2.5)
    assert bound["step bicc_packed/plain, paper ratio mode"] == pytest.approx((3.5 + 2 / 3) / 2.5)
    assert bound["step rcc/plain today"] == pytest.approx((2.5 + 4 / 3) / 2.5)
    # With generation (5 s, the same in every arm) the step bound moves toward 1.
    gen = bench.token_bounds(t, {**phases, "generate": 5.0}, tokens)
    assert gen["step bicc_packed/plain, consistent ratio mode with generation"] == pytest.approx(
        8.5 / 7.5
    )
    # Under checkpointing a no-grad forward is a quarter of the plain loss phase (0.5 s).
    on = bench.token_bounds(t, phases, tokens, checkpointing=True)
    assert on["step rcc/plain today"] == pytest.approx((2.5 + 1.0) / 2.5)
    assert on["loss bicc_packed/plain"] == pytest.approx(1.5)
    # Every measured ratio has its bound.
    assert {f"step {k}" for k in bench.steps(t, {**phases, "generate": 5.0})} <= set(gen)


def test_arm_tokens_count_as_the_trainer_does(bench):
    # One group of 2 rows: plain prompt 4 tokens; completions of 3 and 2 scored tokens.
    # Row 0 conditioned on 3 context tokens (7), row 1 on 2 (6, left-padded to 7).
    batch = {
        "prompt_ids": torch.tensor([[5, 6, 7, 8], [5, 6, 7, 8]]),
        "prompt_mask": torch.ones(2, 4, dtype=torch.long),
        "bicc_prompt_ids": torch.tensor([[5, 6, 7, 8, 9, 9, 9], [0, 5, 6, 7, 8, 10, 10]]),
        "bicc_prompt_mask": torch.tensor([[1] * 7, [0] + [1] * 6]),
        "completion_mask": torch.tensor([[1, 1, 1], [1, 1, 0]]),
    }
    got = bench.arm_tokens(batch)
    assert got["plain"] == (4 + 3) + (4 + 2)  # 13
    assert got["plain_packed"] == (4 - 1) + 3 + 2  # one prompt: 8
    assert got["bicc_rows"] == (7 + 3) + (6 + 2)  # 18
    assert got["bicc_packed"] == (7 - 1) + (6 - 1) + 3 + 2  # two prompts: 16
    assert got["bicc_cache"] == (6 + 5) + 2 * 1 + 5  # pass 1, then last prompt tokens: 18


def test_compact_head_equals_trl_fused_head(bench):
    shapes = bench.Shapes(hidden=32, layers=1, heads=4, kv_heads=2, intermediate=64, vocab=97)
    trl_model = bench.build_model(shapes, torch.float32, "cpu", seed=0, head="trl")
    own = bench.build_model(shapes, torch.float32, "cpu", seed=0, head="compact")
    ids = torch.randint(3, 97, (3, 10), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :4] = -100
    labels[1, 8:] = -100
    a = trl_model(input_ids=ids, labels=labels, fused_lm_head=True).log_probs
    b = own(input_ids=ids, labels=labels, fused_lm_head=True).log_probs
    torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
    assert (b[1, 7:] == 0).all() and (b[:, :3] == 0).all()  # unlabelled positions


def test_bicc_batch_has_two_prefixes_per_group(bench):
    shapes = bench.Shapes(prompt=8, completion_min=5, completion_max=9, max_seq_len=400, groups=2)
    batch = bench.build_batch(shapes, "cpu", seed=1)
    assert batch["prompt_ids"].shape == (16, 8)
    context = batch["bicc_prompt_mask"].sum(1) - 8
    assert (context > 0).all() and (context <= 160).all()  # budget 0.4 x 400
    layout = build_packed_layout(
        batch["bicc_prompt_ids"],
        batch["bicc_prompt_mask"],
        batch["completion_ids"],
        batch["completion_mask"],
    )
    assert layout.input_ids.size(0) == 4  # correct and wrong partition of each group
