"""The premise measurement (``contrastive_rlvr.premise``) on hand-built models whose
log-probs are known in closed form: one that reads BiCC's context as BiCC assumes, one
that reads it the wrong way round, one that ignores it. Every expected number below is
worked out from the model's definition (the docstrings of the tests), not from the code.

The toy vocabulary: 0 pad, 1 EOS, 2 "W" (header of wrong attempts), 3 "R" (header of
correct attempts), 4 "F" (footer), 5-7 the questions q1-q3, 8-16 answer tokens a..i.
Each question allows four tokens (its three answers and EOS, logit 0); every other token
gets a logit of -1e4 (probability 0 in float32). A completion is one answer token and EOS.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from contrastive_rlvr.algorithms import BiCCTemplate
from contrastive_rlvr.algorithms.bicc_rows import BiCCRowBuilder
from contrastive_rlvr.premise import (
    NOT_SHOWN,
    REVERSED,
    SHOWN,
    UNDETERMINED,
    Conditioning,
    Group,
    format_table,
    measure,
    measure_group,
    total_rewards,
    verdict,
)

PAD, EOS, W, R, F = 0, 1, 2, 3, 4
Q1, Q2, Q3 = 5, 6, 7
a, b, c, d, e, f, g, h, i = range(8, 17)
VOCAB = 17
ALLOWED = {Q1: (a, b, c, EOS), Q2: (d, e, f, EOS), Q3: (g, h, i, EOS)}
B = math.log(3.0)  # the boost: e^B = 3
T_975_2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom (tables)


class ContextModel(torch.nn.Module):
    """Logits at position t from the prefix ``ids[:t+1]``: the question's four tokens at
    0 (others -1e4), plus ``sign * B`` on every token quoted under a header, where
    ``sign`` is ``wrong`` under "W" and ``correct`` under "R" (the footer ends the quote).
    reader: wrong=-1, correct=+1; anti-reader: +1 / -1; ignoring: 0 / 0."""

    def __init__(self, wrong: int, correct: int) -> None:
        super().__init__()
        self.sign = {W: wrong, R: correct}
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # a device for completion_logps

    def forward(self, input_ids, attention_mask=None):
        n, length = input_ids.shape
        logits = torch.full((n, length, VOCAB), -1e4)
        for row in range(n):
            ids = input_ids[row].tolist()
            base = torch.full((VOCAB,), -1e4)
            base[list(ALLOWED[ids[0]])] = 0.0
            boost = torch.zeros(VOCAB)
            mode = 0
            for t, tok in enumerate(ids):
                if tok in self.sign:
                    mode = self.sign[tok]
                elif tok == F:
                    mode = 0
                elif mode:
                    boost[tok] = mode * B
                logits[row, t] = base + boost
        return SimpleNamespace(logits=logits)


def _encode(text: str) -> list[int]:
    return [{"W": W, "R": R, "F": F}[ch] for ch in text]


def conditioning() -> Conditioning:
    template = BiCCTemplate(
        header_correct="R", header_wrong="W", item_prefix="", item_suffix="", footer="F"
    ).encode(_encode, max_items=4)
    rows = BiCCRowBuilder(
        template=template, context_ratio=0.4, max_seq_len=None, max_completion_length=2,
        truncation="middle", placement="after_prompt", threshold=0.5,
        strip_token_ids=frozenset({EOS, PAD}),
    )  # fmt: skip
    return Conditioning(rows, pad_token_id=PAD)


def group(question: int, answers: list[int], correct: list[bool]) -> Group:
    return Group([question], [[t, EOS] for t in answers], correct)


def groups() -> list[Group]:
    """q1: a a b c (a right); q2: d e e f (d right); q3: g h h h (g right)."""
    return [
        group(Q1, [a, a, b, c], [True, True, False, False]),
        group(Q2, [d, e, e, f], [True, False, False, False]),
        group(Q3, [g, h, h, h], [True, False, False, False]),
    ]


def run(model: ContextModel, control: str = "other_problem"):
    return measure(model, groups(), conditioning(), budget=lambda _: 100, control=control)


def t_interval(values: list[float]) -> tuple[float, float, float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
    half = T_975_2 * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_a_model_that_reads_the_context_as_bicc_assumes_shows_the_premise():
    """Reader. q1's correct rows read "W b c F": b, c at -B, so Z = 2 + 2/3 = 8/3 and
    each of a, EOS has log p = -log(8/3) (plain: -log 4); its wrong rows read "R a a F":
    a at +B, Z = 3 + 3 = 6. Per token: d(o+) = log 4 - log(8/3), d(o-) = log 4 - log 6,
    contrast log(6 / (8/3)) = log 2.25. q2 is the same shape. q3: o+ reads "W h h h F",
    Z = 3 + 1/3 = 10/3; o- reads "R g F", Z = 6: contrast log 1.8. The control (the next
    problem's attempts) quotes tokens the question does not allow (probability 0 either
    way), so every control shift is 0 and net = contrast."""
    result = run(ContextModel(wrong=-1, correct=+1))
    expected = [math.log(2.25), math.log(2.25), math.log(1.8)]
    for p, want in zip(result.per_problem, expected, strict=True):
        assert p["token"]["opp_pos"] == pytest.approx(
            math.log(4) - math.log(8 / 3 if p["problem"] < 2 else 10 / 3), abs=1e-5
        )
        assert p["token"]["opp_neg"] == pytest.approx(math.log(4) - math.log(6), abs=1e-5)
        assert p["token"]["control"] == pytest.approx(0.0, abs=1e-5)
        assert p["token"]["net"] == pytest.approx(want, abs=1e-5)
        assert p["sequence"]["net"] == pytest.approx(2 * want, abs=1e-5)  # two tokens each
    assert [p["control_from"] for p in result.per_problem] == [1, 2, 0]
    mean, low, high = t_interval(expected)
    net = result.per_token["net"]
    assert (net["mean"], net["low"], net["high"]) == pytest.approx((mean, low, high), abs=1e-5)
    assert net["n"] == 3 and low > 0
    assert result.verdict == SHOWN
    assert result.two_sided == 3 and result.accuracy == pytest.approx((2 / 4 + 1 / 4 + 1 / 4) / 3)
    # The context each conditioned row reads: q1's "W b c F" and "R a a F" (4 tokens),
    # q2's "W e e f F" (5) and "R d F" (3), q3's "W h h h F" (5) and "R g F" (3).
    assert result.mean_context_tokens == pytest.approx(
        (2 * 4 + 2 * 4 + 1 * 5 + 3 * 3 + 1 * 5 + 3 * 3) / 12
    )
    assert "PREMISE SHOWN" in format_table(result)
    # The verdict answers which form to run: the distill form where the premise holds.
    assert "--bicc true (the distill form, the default)" in format_table(result)


def test_a_model_that_reads_the_context_backwards_is_reversed():
    """Anti-reader (quotes under "W" at +B, under "R" at -B). q1: o+ reads b, c at +B,
    Z = 2 + 6 = 8; o- reads a at -B, Z = 3 + 1/3 = 10/3: contrast log((10/3) / 8).
    q2 the same; q3: o+ h at +B, Z = 6; o- g at -B, Z = 10/3: contrast log((10/3) / 6)."""
    result = run(ContextModel(wrong=+1, correct=-1))
    expected = [math.log(10 / 24), math.log(10 / 24), math.log(10 / 18)]
    got = [p["token"]["net"] for p in result.per_problem]
    assert got == pytest.approx(expected, abs=1e-5)
    mean, low, high = t_interval(expected)
    net = result.per_token["net"]
    assert (net["mean"], net["low"], net["high"]) == pytest.approx((mean, low, high), abs=1e-5)
    assert high < 0
    assert result.verdict == REVERSED


def test_a_model_that_ignores_the_context_shows_nothing():
    """No boost at all: every conditioned log-prob equals the plain one, every shift 0,
    the interval [0, 0] holds 0: not shown."""
    result = run(ContextModel(wrong=0, correct=0))
    for q in ("opp_pos", "opp_neg", "ctrl_pos", "ctrl_neg", "contrast", "control", "net"):
        cell = result.per_token[q]
        assert (cell["mean"], cell["low"], cell["high"]) == pytest.approx((0, 0, 0), abs=1e-5)
    assert result.verdict == NOT_SHOWN
    assert "run: plain GRPO (--bicc false)" in format_table(result)


def test_same_sign_control_subtracts_what_the_own_side_does():
    """Reader, same-sign control, q1 (a a b c). Row 0 (a, correct) reads its mate under
    BiCC's header for its side: "W a F", a at -B, Z = 3 + 1/3 = 10/3, so its shift is
    (-B - log(10/3) + log 4) + (log 4 - log(10/3)) nats, (... )/2 per token. Row 2 (b)
    reads "R c F": c at +B, Z = 6, shift 2 (log 4 - log 6); row 3 likewise with b.
    control = [log 4 - log(10/3) - B/2] - [log 4 - log 6] = log 1.8 - B/2; net = log 2.25
    - control. q2 and q3 have one correct row (no mate): no control, no net."""
    model = ContextModel(wrong=-1, correct=+1)
    result = run(model, control="same_sign")
    q1 = result.per_problem[0]["token"]
    control = math.log(1.8) - B / 2
    assert q1["ctrl_pos"] == pytest.approx(math.log(4) - math.log(10 / 3) - B / 2, abs=1e-5)
    assert q1["ctrl_neg"] == pytest.approx(math.log(4) - math.log(6), abs=1e-5)
    assert q1["control"] == pytest.approx(control, abs=1e-5)
    assert q1["net"] == pytest.approx(math.log(2.25) - control, abs=1e-5)
    assert [p["token"]["net"] for p in result.per_problem[1:]] == [None, None]
    # One problem with a net: no interval, no verdict either way.
    assert result.per_token["net"]["n"] == 1 and result.per_token["net"]["low"] is None
    assert result.verdict == UNDETERMINED
    single = measure_group(model, groups()[0], conditioning(), budget=100, control="same_sign")
    assert set(single["ctrl"]) == {0, 1, 2, 3}


def test_verdict_reads_the_interval():
    cell = {"mean": 0.1, "low": 0.01, "high": 0.2, "n": 5, "level": 0.95}
    assert verdict(cell) == SHOWN
    assert verdict({**cell, "low": -0.01}) == NOT_SHOWN
    assert verdict({**cell, "mean": -0.1, "low": -0.2, "high": -0.01}) == REVERSED
    assert verdict({**cell, "low": None, "high": None, "n": 1}) == UNDETERMINED
    assert verdict(None) == UNDETERMINED


def test_other_problem_control_needs_two_usable_groups():
    """One two-sided group (the others one-sided) has no other problem to borrow from."""
    one = [groups()[0], group(Q2, [d, d, d, d], [True] * 4)]
    result = measure(ContextModel(-1, 1), one, conditioning(), budget=lambda _: 100)
    assert result.two_sided == 1 and result.per_problem == []
    assert result.verdict == UNDETERMINED


def test_total_rewards_weights_and_unscored():
    """Weighted sum as TRL sums reward functions; None is no score; a completion no
    function scored is NaN (never correct); chat prompts get assistant messages."""
    seen = {}

    def first(prompts, completions, answer):
        seen["completions"], seen["answer"] = completions, answer
        return [1.0, None, None]

    def second(prompts, completions, **kw):
        return [0.5, 0.25, None]

    prompt = [{"role": "user", "content": "1+1?"}]
    got = total_rewards([first, second], [2.0, 4.0], prompt, ["2", "3", "x"], {"answer": "2"})
    assert got[:2] == [2.0 + 2.0, 1.0] and math.isnan(got[2])
    assert seen["completions"][0] == [{"role": "assistant", "content": "2"}]
    assert seen["answer"] == ["2", "2", "2"]
