"""The hidden-operator variant of the embedded task (TaskConfig.hidden_ops): the rule, the
prompt, the answers and the rule-ignorant demonstrator, worked by hand."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from contrastive_rlvr.embedded.task import (
    Problem,
    TaskConfig,
    arithmetic_reward,
    make_datasets,
    noisy_solution,
    parse_prompt,
    rule_op,
    split_problems,
)


def test_the_rule_and_the_prompt():
    # 5?4?3=: 4 is even ('+'), 3 is odd ('-'): 5+4-3 = 6, worked as 9-3=6.
    p = parse_prompt("5?4?3=")
    assert (p.ops, p.hidden, p.answer, p.solution) == (("+", "-"), True, 6, "9-3=6")
    assert p.prompt == "5?4?3=" and [rule_op(x) for x in (0, 7)] == ["+", "-"]
    assert parse_prompt("5+4-3=").hidden is False
    with pytest.raises(ValueError, match="all of its operators or none"):
        parse_prompt("5?4+3=")
    with pytest.raises(ValueError, match="follow rule_op"):
        Problem((5, 4, 3), ("-", "-"), hidden=True)


def test_the_datasets_hold_every_operand_triple_once_with_the_rules_answer():
    cfg = TaskConfig(hidden_ops=True)
    assert cfg.space_size == 1000  # the operators follow from the operands
    train, heldout = split_problems(cfg)
    assert len(train) + len(heldout) == 1000 and not set(train) & set(heldout)
    rows, _ = make_datasets(cfg)
    for prompt, answer in zip(rows["prompt"][:50], rows["answer"][:50], strict=True):
        a, b, c = (int(ch) for ch in prompt[0:5:2])
        want = a + (b if b % 2 == 0 else -b)
        want = want + (c if c % 2 == 0 else -c)
        assert "?" in prompt and answer == str(want)


def test_the_demonstrator_does_not_know_the_rule():
    # With no slips (error_rate 0) each operator is a coin flip: the demonstration is the
    # reference chain about 1 time in 4 (both operators right) for 5?3?7= ('-', '-').
    problem = parse_prompt("5?3?7=")
    rng = random.Random(0)
    chains = Counter(noisy_solution(problem, rng, 0.0) for _ in range(4000))
    assert set(chains) == {"8+7=15", "8-7=1", "2+7=9", "2-7=-5"}
    assert chains[problem.solution] / 4000 == pytest.approx(0.25, abs=0.03)
    assert arithmetic_reward(["5?3?7="], ["2-7=-5"], ["-5"]) == [1.0]
