"""reasoning-gym tasks (disjoint splits, 0/1 scoring), the format reward, reward loading."""

import pytest

from contrastive_rlvr.rewards import (
    FormatReward,
    GymReward,
    MathVerifyReward,
    load_gym_task,
    load_reward_function,
    resolve_reward,
)
from contrastive_rlvr.rewards.gym import _dataset

# One-digit a +/- b: about 200 distinct questions, so duplicates do occur.
SMALL_SUMS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


@pytest.fixture(scope="module")
def splits():
    return load_gym_task("chain_sum", config=SMALL_SUMS, train_size=60, eval_size=30, seed=3)


def test_gym_splits_are_disjoint_deduplicated_and_seeded(splits):
    train, evaluation = splits
    assert len(train) == 60 and len(evaluation) == 30
    train_q, eval_q = set(train["prompt"]), set(evaluation["prompt"])
    assert len(train_q) == 60 and len(eval_q) == 30  # no duplicates within a split
    assert train_q.isdisjoint(eval_q)
    again, _ = load_gym_task("chain_sum", config=SMALL_SUMS, train_size=60, eval_size=30, seed=3)
    assert again["prompt"] == train["prompt"]  # same seed, same items
    other, _ = load_gym_task("chain_sum", config=SMALL_SUMS, train_size=60, eval_size=1, seed=4)
    assert other["prompt"] != train["prompt"]
    assert set(train.column_names) >= {"prompt", "answer", "gym_task", "gym_index"}


def test_gym_reward_is_binary_where_the_scorer_gives_partial_credit(splits):
    train, _ = splits
    row = train[0]
    columns = {k: [row[k]] * 4 for k in train.column_names if k.startswith("gym_")}
    gold = row["answer"]
    near_miss = gold + "0"  # e.g. -4 -> -40
    # reasoning-gym's own scorer gives this near miss partial credit ...
    ds = _dataset(row["gym_task"], row["gym_config"], row["gym_seed"], row["gym_size"])
    assert 0.0 < ds.score_answer(near_miss, ds[row["gym_index"]]) < 1.0
    completions = [
        f"<answer>{gold}</answer>",
        f"<answer>{near_miss}</answer>",  # ... the reward does not
        f"so \\boxed{{{gold}}}",
        "no tags",
    ]
    assert GymReward()(None, completions, **columns) == [1.0, 0.0, 1.0, 0.0]


def test_gym_errors():
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'no_such_task'"):
        load_gym_task("no_such_task", train_size=2, eval_size=1)
    with pytest.raises(ValueError, match="bad config"):
        load_gym_task("chain_sum", config={"bogus": 1}, train_size=2, eval_size=1)
    with pytest.raises(ValueError, match="must not set 'seed'"):
        load_gym_task("chain_sum", config={"seed": 1}, train_size=2, eval_size=1)
    with pytest.raises(ValueError, match="gym_task"):
        GymReward()(None, ["<answer>1</answer>"], answer=["1"])


def test_format_reward():
    r = FormatReward("think_answer")
    assert r.__name__ == "format_think_answer"
    completions = ["<think>x</think><answer>1</answer>", [{"role": "assistant", "content": "1"}]]
    assert r(None, completions) == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown format style"):
        FormatReward("xml")


def user_reward(prompts, completions, **kwargs):
    return [float(len(c)) for c in completions]


def test_resolve_builtin_and_user_rewards(tmp_path):
    r = resolve_reward("math_verify", timeout=2, workers=1)
    assert isinstance(r, MathVerifyReward) and r.timeout == 2
    assert isinstance(resolve_reward("format", style="boxed"), FormatReward)
    fn = resolve_reward("test_gym_format_and_loading:user_reward")
    assert fn(None, ["ab", "c"]) == [2.0, 1.0]
    f = tmp_path / "my_rewards.py"
    f.write_text("def short(prompts, completions, **kw):\n    return [1.0 for _ in completions]\n")
    assert load_reward_function(f"{f}:short")(None, ["x"]) == [1.0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "expected 'module:function'"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("os:no_such_function", "has no attribute 'no_such_function'"),
        ("os:sep", "'sep' is not callable"),
        ("/nope/r.py:f", "file '/nope/r.py' not found"),
    ],
)
def test_reward_loading_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        load_reward_function(spec)


def test_options_only_for_builtins():
    with pytest.raises(ValueError, match="built-in rewards only"):
        resolve_reward("os:getcwd", timeout=3)
