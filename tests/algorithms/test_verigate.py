"""VeriGate: step splitting, token-to-step mapping, the arithmetic step checker and the
gated token advantages, checked against values worked out by hand."""

from __future__ import annotations

import math
import random
import re

import pytest
import torch

from contrastive_rlvr.algorithms import (
    ArithmeticStepScorer,
    equations_right,
    future_cumulated,
    gated_groups,
    process_advantages,
    score_steps,
    split_steps,
    step_of_tokens,
    token_offsets,
    token_step_index,
    verigate_advantages,
)

torch.set_num_threads(1)


def close(actual: torch.Tensor, expected, **kw) -> None:
    expected = torch.as_tensor(expected, dtype=actual.dtype)
    torch.testing.assert_close(actual, expected, **kw)


# ----------------------------------------------------------------------------- steps


def test_split_steps_lines_skips_blank_lines_and_strips():
    text = "5+9=14\n\n  14+3=17 \n"
    # "5+9=14" is chars 0..5; "14+3=17" starts after "\n\n  " at 10 and ends at 17.
    assert split_steps(text) == [(0, 6), (10, 17)]


def test_split_steps_chain_and_regex():
    assert split_steps("14+3=17,17+2=19", "chain") == [(0, 7), (8, 15)]
    assert split_steps("A. B.", "regex", pattern=r"[^.]+\.") == [(0, 2), (2, 5)]
    with pytest.raises(ValueError, match="needs a pattern"):
        split_steps("x", "regex")
    with pytest.raises(ValueError, match="unknown step rule"):
        split_steps("x", "words")


def test_step_of_tokens_characters_gap_and_zero_width_eos():
    text = "14+3=17,17+2=19"
    offsets = token_offsets(list(text)) + [(0, 0)]  # character tokens, then EOS (0, 0)
    steps = step_of_tokens(split_steps(text, "chain"), offsets)
    # chars 0..6 in step 0; the comma (7) lies between steps -> the earlier one;
    # chars 8..14 in step 1; the zero-width EOS takes the previous token's step.
    assert steps == [0] * 8 + [1] * 7 + [1]


def test_step_of_tokens_multi_char_tokens_use_their_last_character():
    text = " 5\n6"
    spans = split_steps(text)  # [(1, 2), (3, 4)]
    # " " ends before the first step -> step 0; "\n" (char 2) is between -> step 0.
    assert step_of_tokens(spans, token_offsets([" ", "5", "\n", "6"])) == [0, 0, 0, 1]
    pieces = ["14", "+3", "=17,", "17", "+2=19"]
    # last characters at 1, 3, 7 (the comma), 9, 14
    assert step_of_tokens(split_steps("".join(pieces), "chain"), token_offsets(pieces)) == [
        0,
        0,
        0,
        1,
        1,
    ]
    assert step_of_tokens([], token_offsets(["a", "b"])) == [-1, -1]


def test_token_step_index_fills_mask_cells_in_order_with_left_padding():
    mask = torch.tensor([[0, 1, 1], [1, 1, 0]])
    spans = [[(0, 1), (1, 2)], [(0, 2)]]
    offsets = [[(0, 1), (1, 2)], [(0, 1), (1, 2)]]
    close(token_step_index(spans, offsets, mask), [[-1, 0, 1], [0, 0, -1]])
    with pytest.raises(ValueError, match="row 1 has 2 completion tokens"):
        token_step_index(spans, [[(0, 1), (1, 2)], [(0, 1)]], mask)


# ----------------------------------------------------------------------------- checker


def test_equations_right_generic_rule():
    assert equations_right("so 5+9=14, then 14+3=17") == [True, True]
    assert equations_right("14+3=17+2=19") == [True, True]  # running-total notation
    assert equations_right("14+3=18") == [False]
    assert equations_right("1. 2*(3+4)=14") == [True]
    assert equations_right("2×3=6 and 8÷4=2 and 3x3=9") == [True, True, True]
    assert equations_right("6/0=1") == [False]
    assert equations_right("x = y") == []


def test_arithmetic_scorer_follows_a_chain_prompt():
    s = ArithmeticStepScorer()
    prompt = "5+9+3+2="  # 5+9 = 14, then +3 -> 17, then +2 -> 19
    assert s(prompt, ["14+3=17", "17+2=19"]) == [1.0, 1.0]
    # a slip is charged to the step that makes it; carrying it on correctly is right
    assert s(prompt, ["14+3=18", "18+2=20"]) == [0.0, 1.0]
    assert s(prompt, ["13+3=16", "16+2=18"]) == [0.0, 1.0]  # 5+9 is not 13
    assert s(prompt, ["14+3=17", "17+3=20"]) == [1.0, 0.0]  # +3 is not the next term
    assert s(prompt, ["14+3=17+2=19"]) == [1.0]  # running chain inside one step
    assert s(prompt, ["14+3=17", "17+2=19", "19+1=20"]) == [1.0, 1.0, 0.0]  # one step too many
    assert s(prompt, ["14 + 3 = 17", "seventeen"]) == [1.0, 0.0]
    assert s("9-4+2=", ["5+2=7"]) == [1.0]


def test_arithmetic_scorer_generic_steps_without_chain_prompt():
    steps = ["5+9=14", "so 14+3=17.", "14+3=18", "We are done", "2*(3+4)=14", "14+3=17+2=19"]
    assert ArithmeticStepScorer()("Add the numbers.", steps) == [1, 1, 0, 0, 1, 1]
    assert ArithmeticStepScorer(no_equation_score=0.5)("Q", ["We are done"]) == [0.5]
    # follow_prompt=False ignores the chain prompt: "13+3=16" is right arithmetic
    assert ArithmeticStepScorer(follow_prompt=False)("5+9+3=", ["13+3=16"]) == [1.0]


def _reference_chain_verdicts(prompt: str, completion: str) -> list[bool]:
    """Slow reference of the chain rule: split on commas, each piece `a op b = c` with
    a op b == c, op b the next prompt term, a the previous piece's c (first: t0 op t1)."""
    terms = re.findall(r"(^|[-+])(\d+)", prompt[:-1])
    values = [int(terms[0][1])]
    for op, x in terms[1:]:
        values.append(values[-1] + int(x) if op == "+" else values[-1] - int(x))
    todo = [(op, int(x)) for op, x in terms[2:]]
    expected_a, verdicts = values[1], []
    for k, piece in enumerate(p for p in completion.split(",") if p.strip()):
        m = re.fullmatch(r"\s*(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*(-?\d+)\s*", piece)
        if m is None:
            verdicts.append(False)
            expected_a = None
            continue
        a, op, b, c = int(m[1]), m[2], int(m[3]), int(m[4])
        value = a + b if op == "+" else a - b if op == "-" else a * b
        verdicts.append(k < len(todo) and todo[k] == (op, b) and a == expected_a and value == c)
        expected_a = c
    return verdicts


def test_arithmetic_scorer_agrees_with_a_slow_reference_on_random_chains():
    from contrastive_rlvr.embedded.task import Problem

    rng = random.Random(0)
    scorer = ArithmeticStepScorer()
    for _ in range(400):
        n = rng.choice([3, 4, 5])
        operands = tuple(rng.randint(0, 9) for _ in range(n))
        problem = Problem(operands, tuple(rng.choice("+-") for _ in range(n - 1)))
        if rng.random() < 0.5:
            completion = problem.chain(error_step=rng.randrange(n - 2), delta=rng.choice([-1, 10]))
        else:
            completion = problem.chain().replace(str(rng.randint(0, 9)), str(rng.randint(0, 9)), 1)
        spans = split_steps(completion, "chain")
        ours = scorer(problem.prompt, [completion[a:b] for a, b in spans])
        expected = [float(v) for v in _reference_chain_verdicts(problem.prompt, completion)]
        assert ours == expected, (problem.prompt, completion)


def test_score_steps_and_scorer_length_check():
    spans, scores = score_steps(ArithmeticStepScorer(), "5+9+3+2=", "14+3=17,17+2=20", "chain")
    assert spans == [(0, 7), (8, 15)] and scores == [1.0, 0.0]
    with pytest.raises(ValueError, match="returned 1 scores for 2 steps"):
        score_steps(lambda prompt, steps: [1.0], "q", "a\nb")


# ----------------------------------------------------------------------------- advantages


def test_future_cumulated():
    close(future_cumulated([1.0, 0.0, 1.0]), [2.0, 1.0, 1.0])
    # trailing zero padding adds nothing to earlier steps
    close(
        future_cumulated(torch.tensor([[1.0, 1.0, 0.0], [0.5, 0.0, 0.0]])), [[2, 1, 0], [0.5, 0, 0]]
    )


def _batch():
    """Two groups of G=2. Group 0 mixed rewards (outcome path), group 1 all 0 (gated)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    index = torch.tensor([[0, 0, 0, -1, -1], [0, 0, -1, -1, -1], [0, 0, 1, 1, -1], [0, 1, 1, 2, 2]])
    scores = [None, None, [1.0, 0.0], [1.0, 1.0, 0.0]]
    return rewards, mask, index, scores


def test_verigate_outcome_and_process_paths_by_hand():
    rewards, mask, index, scores = _batch()
    adv, metrics = verigate_advantages(
        rewards, 2, scores, index, mask, eps=0.0, process_norm="cumulated"
    )
    # Group 0: rewards (1, 0), mean 0.5, Bessel std sqrt(0.5) -> A = +-0.5/sqrt(0.5) = +-0.70711.
    a = 0.5 / math.sqrt(0.5)
    # Group 1: C row 2 = (1+0, 0) = (1, 0); row 3 = (1+1+0, 1+0, 0) = (2, 1, 0).
    # All five C: 1, 0, 2, 1, 0; mean 0.8; squared deviations .04 .64 1.44 .04 .64 = 2.8;
    # Bessel var 2.8/4 = 0.7 -> std sqrt(0.7).
    s = math.sqrt(0.7)
    hi, mid, lo = 1.2 / s, 0.2 / s, -0.8 / s
    expected = [
        [a, a, a, 0, 0],
        [-a, -a, 0, 0, 0],
        [mid, mid, lo, lo, 0],
        [hi, mid, mid, lo, lo],
    ]
    close(adv, expected)
    close(metrics["verigate/gated_frac"], 0.5)
    close(metrics["verigate/collapse_rate_outcome"], 0.5)  # group 1 has A = 0 without the gate
    close(metrics["verigate/collapse_rate"], 0.0)


def test_verigate_normalise_steps_then_cumulate_is_the_default():
    rewards, mask, index, scores = _batch()
    adv, _ = verigate_advantages(rewards, 2, scores, index, mask, eps=0.0)
    # p of group 1: 1, 0 | 1, 1, 0; mean 0.6; squared deviations .16 .36 .16 .16 .36 = 1.2;
    # var 0.3. Normalised p: row 2 (0.4, -0.6)/s, row 3 (0.4, 0.4, -0.6)/s; cumulated
    # row 2: (-0.2, -0.6)/s; row 3: (0.2, -0.2, -0.6)/s.
    s = math.sqrt(0.3)
    close(adv[2], [-0.2 / s, -0.2 / s, -0.6 / s, -0.6 / s, 0])
    close(adv[3], [0.2 / s, -0.2 / s, -0.2 / s, -0.6 / s, -0.6 / s])


def test_verigate_without_std_and_with_given_outcome_advantages():
    rewards, mask, index, scores = _batch()
    outcome = torch.tensor([3.0, -3.0, 99.0, 99.0])  # e.g. RCC advantages; gated rows ignore it
    adv, _ = verigate_advantages(
        rewards,
        2,
        scores,
        index,
        mask,
        outcome=outcome,
        scale_by_std=False,
        process_norm="cumulated",
    )
    close(adv[0], [3, 3, 3, 0, 0])
    # centred C (mean 0.8): row 2 (0.2, -0.8), row 3 (1.2, 0.2, -0.8)
    close(adv[2], [0.2, 0.2, -0.8, -0.8, 0])
    close(adv[3], [1.2, 0.2, 0.2, -0.8, -0.8])
    # default (steps): centred p (mean 0.6): row 2 (0.4, -0.6), row 3 (0.4, 0.4, -0.6);
    # cumulated: row 2 (-0.2, -0.6), row 3 (0.2, -0.2, -0.6)
    adv, _ = verigate_advantages(
        rewards, 2, scores, index, mask, outcome=outcome, scale_by_std=False
    )
    close(adv[2], [-0.2, -0.2, -0.6, -0.6, 0])
    close(adv[3], [0.2, -0.2, -0.2, -0.6, -0.6])


def test_verigate_equal_step_scores_collapse_and_tokens_without_step_get_zero():
    rewards = torch.tensor([1.0, 1.0])
    mask = torch.ones(2, 3)
    index = torch.tensor([[0, 0, 0], [-1, 0, 0]])
    adv, metrics = verigate_advantages(rewards, 2, [[0.7], [0.7]], index, mask)
    close(adv, torch.zeros(2, 3))  # all C equal -> exactly 0, no NaN
    close(metrics["verigate/collapse_rate"], 1.0)
    adv, _ = verigate_advantages(rewards, 2, [[1.0], [0.0]], index, mask, eps=0.0)
    # C = (1, 0): mean 0.5, std sqrt(0.5); the token with no step (-1) gets 0
    a = 0.5 / math.sqrt(0.5)
    close(adv, [[a, a, a], [0, -a, -a]])


def test_verigate_errors_name_the_row():
    rewards, mask, index, scores = _batch()
    with pytest.raises(ValueError, match="row 2 .* needs step scores"):
        verigate_advantages(rewards, 2, [None, None, None, [1.0]], index, mask)
    with pytest.raises(ValueError, match="row 3 has tokens of step 2 but only 2 step scores"):
        verigate_advantages(rewards, 2, [None, None, [1.0, 0.0], [1.0, 0.0]], index, mask)


def test_gated_groups():
    close(gated_groups(torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0]), 2), [True, False, True])


def test_verigate_end_to_end_on_character_tokens():
    prompt = "5+9+3+2="
    completions = ["14+3=17,17+2=19", "14+3=18,18+2=20", "13+3=16,16+2=18", "15+3=18,18+2=21"]
    rewards = torch.zeros(4)  # none gives 19 except the first; make the group all-equal:
    rewards[0] = 0.0  # (pretend the verifier rejected it, e.g. a format check)
    width = max(len(c) for c in completions) + 1
    mask = torch.zeros(4, width)
    spans, scores, offsets = [], [], []
    for i, c in enumerate(completions):
        sp, sc = score_steps(ArithmeticStepScorer(), prompt, c, "chain")
        spans.append(sp)
        scores.append(sc)
        offsets.append(token_offsets(list(c)) + [(0, 0)])  # + EOS
        mask[i, : len(c) + 1] = 1
    # step scores: (1, 1), (0, 1), (0, 1), (0, 0) -> C: (2, 1), (1, 1), (1, 1), (0, 0)
    assert scores == [[1, 1], [0, 1], [0, 1], [0, 0]]
    index = token_step_index(spans, offsets, mask)
    adv, _ = verigate_advantages(rewards, 4, scores, index, mask, eps=0.0)
    # Default (steps): p values 1,1,0,1,0,1,0,0: mean 1/2, deviations +-1/2, sum of
    # squares 2, Bessel var 2/7. Completion 0: step 0 (1/2 + 1/2)/s, step 1 (1/2)/s;
    # completion 3: -1/s, -(1/2)/s.
    s = math.sqrt(2 / 7)
    close(adv[0, :8], torch.full((8,), 1 / s))
    close(adv[0, 8:16], torch.full((8,), 0.5 / s))
    close(adv[3, :8], torch.full((8,), -1 / s))
    close(adv[3, 8:16], torch.full((8,), -0.5 / s))
    adv, _ = verigate_advantages(rewards, 4, scores, index, mask, eps=0.0, process_norm="cumulated")
    # C values 2,1,1,1,1,1,0,0: mean 7/8; deviations 9/8, 1/8 x5, -7/8 x2;
    # sum of squares (81 + 5 + 98)/64 = 184/64; Bessel var 184/(64*7).
    s = math.sqrt(184 / 448)
    # completion 0, step 0 = chars 0..7 (incl. the comma), step 1 = chars 8..14 and EOS
    close(adv[0, :8], torch.full((8,), (9 / 8) / s))
    close(adv[0, 8:16], torch.full((8,), (1 / 8) / s))
    close(adv[3, :16], torch.full((16,), (-7 / 8) / s))


def _all_right_group(lengths):
    """One gated group (rewards all 1), every step right; one token per step."""
    width = max(lengths)
    mask = torch.zeros(len(lengths), width)
    index = torch.full((len(lengths), width), -1)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        index[i, :n] = torch.arange(n)
    scores = [[1.0] * n for n in lengths]
    return torch.ones(len(lengths)), mask, index, scores


def test_verigate_all_right_group_gets_zero_by_default_and_not_when_cumulated():
    # The example: G = 8, seven 3-step completions and one 4-step one, every
    # step right. Default: the step scores are all equal -> exactly 0 everywhere.
    rewards, mask, index, scores = _all_right_group([3] * 7 + [4])
    adv, metrics = verigate_advantages(rewards, 8, scores, index, mask)
    assert torch.equal(adv, torch.zeros_like(adv))
    close(metrics["verigate/collapse_rate"], 1.0)
    # cumulated, no std: C = (3, 2, 1) x 7 and (4, 3, 2, 1); mean (7 * 6 + 10) / 25 = 2.08
    adv, _ = verigate_advantages(
        rewards, 8, scores, index, mask, scale_by_std=False, process_norm="cumulated"
    )
    close(adv[0, :3], [3 - 2.08, 2 - 2.08, 1 - 2.08])  # (.92, -.08, -1.08)
    close(adv[7], [4 - 2.08, 3 - 2.08, 2 - 2.08, 1 - 2.08])  # (1.92, .92, -.08, -1.08)


def test_process_advantages_one_wrong_step_by_hand():
    # G = 2: row 0 steps (1, 1, 1), row 1 steps (1, 0, 1). Six scores, mean 5/6;
    # deviations 1/6 (x5) and -5/6; sum of squares 5/36 + 25/36 = 30/36; Bessel
    # var (30/36) / 5 = 1/6. Normalised: right a = (1/6)/s, wrong b = (-5/6)/s.
    # Row 0: (3a, 2a, a); row 1: (a + b + a, b + a, a).
    s = math.sqrt(1 / 6)
    a, b = (1 / 6) / s, (-5 / 6) / s
    scores = torch.tensor([[1.0, 1.0, 1.0, 9.0], [1.0, 0.0, 1.0, 9.0]])  # 9: padding
    smask = torch.tensor([[True, True, True, False], [True, True, True, False]])
    adv = process_advantages(scores, smask, 2, eps=0.0)
    close(adv, [[3 * a, 2 * a, a, 0], [2 * a + b, a + b, a, 0]])
    with pytest.raises(ValueError, match="unknown process_norm 'sum'"):
        process_advantages(scores, smask, 2, process_norm="sum")
