"""The arithmetic chain task: problems by hand, split, reward, step checker, noisy SFT data."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import random

import pytest

from contrastive_rlvr.embedded.task import (
    ERROR_DELTAS,
    Problem,
    TaskConfig,
    arithmetic_reward,
    check_steps,
    make_datasets,
    noisy_solution,
    parse_prompt,
    split_problems,
)


def test_problem_text_by_hand():
    p = Problem((5, 9, 3), ("+", "+"))
    # 5+9 = 14 (first left operand), 14+3 = 17.
    assert (p.prompt, p.solution, p.answer) == ("5+9+3=", "14+3=17", 17)
    q = Problem((5, 9, 3, 2), ("+", "+", "+"))
    assert (q.prompt, q.solution, q.answer) == ("5+9+3+2=", "14+3=17,17+2=19", 19)
    r = Problem((3, 9, 2), ("-", "+"))
    # 3-9 = -6, -6+2 = -4.
    assert (r.prompt, r.solution, r.answer) == ("3-9+2=", "-6+2=-4", -4)
    assert parse_prompt("3-9+2=") == r
    # One slip at step 0 (+10) is carried on correctly by step 1: 14+3=27, 27+2=29.
    assert q.chain(error_step=0, delta=10) == "14+3=27,27+2=29"


def test_default_split_sizes_disjoint_and_deterministic():
    train, heldout = make_datasets()
    assert (len(train), len(heldout)) == (800, 200)  # 10**3 problems, 200 held out
    assert train.column_names == ["prompt", "answer", "solution"]
    train_prompts, heldout_prompts = set(train["prompt"]), set(heldout["prompt"])
    assert len(train_prompts) == 800 and len(heldout_prompts) == 200
    assert not train_prompts & heldout_prompts
    again_train, again_heldout = make_datasets()
    assert list(again_train["prompt"]) == list(train["prompt"])
    assert list(again_heldout["prompt"]) == list(heldout["prompt"])
    _, other = make_datasets(TaskConfig(seed=1))
    assert set(other["prompt"]) != heldout_prompts
    row = heldout[0]
    problem = parse_prompt(row["prompt"])
    assert row["answer"] == str(sum(problem.operands))
    assert row["solution"] == problem.solution


def test_sampled_space_is_disjoint_and_sized():
    # 10**5 * 2**4 = 1.6M problems: above the enumeration limit, so sampled.
    cfg = TaskConfig(terms=5, ops="+-", heldout_size=50, train_size=300, seed=3)
    train, heldout = split_problems(cfg)
    assert (len(train), len(heldout)) == (300, 50)
    assert len(set(train) | set(heldout)) == 350
    assert split_problems(cfg) == (train, heldout)
    assert all(len(p.operands) == 5 and len(p.solution.split(",")) == 3 for p in train)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"terms": 2}, "terms"),
        ({"ops": "*"}, "ops"),
        ({"ops": "++"}, "ops"),
        ({"heldout_size": 1000}, "heldout_size"),
        ({"terms": 6, "ops": "+-"}, "train_size"),
        ({"max_operand": 0}, "max_operand"),
    ],
)
def test_bad_task_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TaskConfig(**kwargs)


def test_reward_on_hand_written_completions():
    completions = [
        "14+3=17",  # right
        " 14 + 3 = 17 ",  # right, spaces allowed
        "14+3=18",  # wrong final number
        "17",  # no step: malformed
        "14+3=17abc",  # trailing junk: malformed
        "",  # empty
        "13+4=17",  # wrong steps, right final number: the outcome reward says 1
        [{"role": "assistant", "content": "14+3=17"}],  # chat-style completion
    ]
    rewards = arithmetic_reward(["5+9+3="] * 8, completions, answer=["17"] * 8)
    assert rewards == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    two_steps = ["14+3=17,17+2=19", "14+3=17,17+2=18", "14+3=17 17+2=19", "14+3=17,"]
    assert arithmetic_reward(["5+9+3+2="] * 4, two_steps, ["19"] * 4) == [1.0, 0.0, 0.0, 0.0]
    assert arithmetic_reward(["3-9+2="], ["-6+2=-4"], ["-4"]) == [1.0]
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        arithmetic_reward(["5+9+3="] * 2, ["14+3=17"] * 2, ["17"])


def test_check_steps_right_and_wrong_chains():
    prompt = "5+9+3+2="
    assert check_steps("14+3=17,17+2=19", prompt) == [True, True]
    # Slip in step 1 (14+3 is not 18); step 2 carries 18 on correctly.
    assert check_steps("14+3=18,18+2=20", prompt) == [False, True]
    # Step 1 starts from a wrong value of 5+9 (13): charged to step 1 only.
    assert check_steps("13+3=16,16+2=18", prompt) == [False, True]
    # Step 2 adds the wrong term (3 instead of 2).
    assert check_steps("14+3=17,17+3=20", prompt) == [True, False]
    # A step too many, a malformed step.
    assert check_steps("14+3=17,17+2=19,19+1=20", prompt) == [True, True, False]
    assert check_steps("14+3=17,x", prompt) == [True, False]
    # Without a prompt only the arithmetic counts: 13+3=16 holds.
    assert check_steps("13+3=16,16+2=19") == [True, False]
    assert check_steps("") == []
    with pytest.raises(ValueError, match="not an arithmetic-chain prompt"):
        check_steps("14+3=17", "What is 5+9+3?")


def test_noisy_solution_rate_and_errors():
    p = Problem((5, 9, 3), ("+", "+"))
    rng = random.Random(0)
    assert all(noisy_solution(p, rng, 0.0) == "14+3=17" for _ in range(50))
    assert all(noisy_solution(p, rng, 1.0) != "14+3=17" for _ in range(50))
    draws = [noisy_solution(p, rng, 0.4) for _ in range(4000)]
    wrong = [d for d in draws if d != "14+3=17"]
    # Binomial(4000, 0.4): sd = sqrt(0.24 / 4000) = 0.0077; 0.04 is about 5 sd.
    assert abs(len(wrong) / 4000 - 0.4) < 0.04
    # Only the result of the one step is off, by one of the deltas.
    assert {int(d.split("=")[1]) - 17 for d in wrong} == set(ERROR_DELTAS)
    assert all(d.startswith("14+3=") for d in wrong)


def test_noisy_solution_never_negative_without_minus():
    p = Problem((0, 0, 0), ("+", "+"))
    rng = random.Random(1)
    wrong = {noisy_solution(p, rng, 1.0) for _ in range(200)}
    assert wrong == {"0+0=1", "0+0=10"}  # -1 and -10 would be negative
