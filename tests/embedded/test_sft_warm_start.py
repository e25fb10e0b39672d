"""The SFT warm start: batches by hand, the schedule, the loss going down, determinism."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math

import pytest
import torch

from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.sft import (
    IGNORE_INDEX,
    WarmStartConfig,
    collate,
    completion_loss,
    lr_factor,
    sft_warm_start,
)
from contrastive_rlvr.embedded.task import make_datasets
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer

torch.set_num_threads(1)


def cid(c: str) -> int:
    """Character id of the embedded tokenizer: 4 + ord(c) - 32 (see its tests)."""
    return 4 + ord(c) - 32


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def small_model(tok, seed=0):
    return build_tiny_model(tok, hidden=32, layers=1, heads=2, mlp=64, max_positions=64, seed=seed)


def test_collate_by_hand(tok):
    batch = collate(tok, ["1+2+3=", "9+9+9="], ["3+3=6", "18+9=27"])
    bos, eos, pad = 1, 2, 0
    row0 = [bos, *map(cid, "1+2+3="), *map(cid, "3+3=6"), eos]  # 1 + 6 + 5 + 1 = 13 tokens
    row1 = [bos, *map(cid, "9+9+9="), *map(cid, "18+9=27"), eos]  # 1 + 6 + 7 + 1 = 15 tokens
    assert batch["input_ids"].tolist() == [row0 + [pad, pad], row1]
    # Labels only on the completion and <eos>: the first 7 (<bos> + prompt) are ignored.
    ign = IGNORE_INDEX
    assert batch["labels"].tolist() == [
        [ign] * 7 + row0[7:] + [ign, ign],
        [ign] * 7 + row1[7:],
    ]


def test_lr_schedule_by_hand():
    f = [lr_factor(s, steps=12, warmup_steps=4) for s in range(13)]
    # Warm-up: (s+1)/4 for s = 0..3; then 0.5 * (1 + cos(pi * (s - 4) / 8)).
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == 1.0
    assert f[8] == pytest.approx(0.5)  # progress 4/8: cos(pi/2) = 0
    assert f[6] == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    assert f[12] == pytest.approx(0.0)


def test_completion_loss_is_the_mean_over_completion_tokens(tok):
    model = small_model(tok)
    batch = collate(tok, ["1+2+3=", "9+9+9="], ["3+3=6", "18+9=27"])
    logits = model(input_ids=batch["input_ids"]).logits
    ids = batch["input_ids"]
    # Row 0: tokens 7..12 ("3+3=6" and <eos>) are predicted at positions 6..11;
    # its two pads (13, 14) carry no loss. Row 1: tokens 7..14 at positions 6..13.
    terms = [
        -torch.log_softmax(logits[r, t], -1)[ids[r, t + 1]]
        for r, last in ((0, 11), (1, 13))
        for t in range(6, last + 1)
    ]
    assert len(terms) == 6 + 8
    expected = torch.stack(terms).mean()
    assert completion_loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-5)


def test_sft_reduces_the_loss_and_is_deterministic(tok):
    train, _ = make_datasets()
    cfg = WarmStartConfig(steps=30, batch_size=16, lr=5e-3, warmup_steps=3, error_rate=0.0)
    probe = collate(tok, list(train["prompt"][:32]), list(train["solution"][:32]))
    model = small_model(tok)
    before = completion_loss(model, probe).item()
    seen = []
    sft_warm_start(model, tok, train, cfg, on_step=lambda step, loss: seen.append(step))
    after = completion_loss(model, probe).item()
    assert seen == list(range(1, 31))
    # ln(100) = 4.6 at the start; 30 steps learn at least the format characters.
    assert after < before - 1.5
    again = sft_warm_start(small_model(tok), tok, train, cfg)
    for p, q in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)


def test_warm_start_config_names_bad_fields():
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmStartConfig(steps=10, warmup_steps=10)
    with pytest.raises(ValueError, match="error_rate"):
        WarmStartConfig(error_rate=1.5)
    with pytest.raises(ValueError, match="lr"):
        WarmStartConfig(lr=0.0)
