"""The custom dataset's held-out split is by problem: a prompt the file repeats (as
DAPO-Math-17k's Hub copy repeats each problem) is held out or trained on, never both."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from trainer_utils import save_tiny_model

from contrastive_rlvr.data import load_prompts, prompt_key, split_heldout
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.custom_inputs import custom_inputs
from contrastive_rlvr.run.preflight import preflight
from contrastive_rlvr.trainer.parse import parse_config

PROBLEMS = [(f"{a}+{a + 3}=", str(2 * a + 3)) for a in range(10)]


def write_rows(path, problems, copies):
    """``copies`` rows of each problem, the copies spread through the file (round-robin)."""
    rows = [{"problem": q, "answer": a} for _ in range(copies) for q, a in problems]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def config_for(tmp_path, data, heldout_size, seed=0, **extra):
    args = {
        "--model": str(save_tiny_model(tmp_path / "model")), "--dataset": str(data),
        "--output_dir": str(tmp_path / "out"), "--rewards": "format",
        "--heldout_size": str(heldout_size), "--seed": str(seed), "--eval_n": "1",
        "--num_generations": "4", "--per_device_train_batch_size": "4",
        "--chat_template": "false", "--instruction": "none", "--max_completion_length": "8",
        **extra,
    }  # fmt: skip
    return parse_config(None, [x for kv in args.items() for x in kv])


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_repeated_problems_stay_on_one_side(tmp_path, seed, caplog):
    torch.set_num_threads(1)
    data = write_rows(tmp_path / "thrice.jsonl", PROBLEMS, copies=3)  # 30 rows, 10 problems
    with caplog.at_level(logging.WARNING, logger="contrastive_rlvr"):
        built = custom_inputs(config_for(tmp_path, data, heldout_size=4, seed=seed))
    held, train = list(built["heldout"]["prompt"]), list(built["train"]["prompt"])
    # 4 problems held out, each evaluated once; none of them among the training rows
    assert len(held) == 4 and len(set(held)) == 4
    assert not set(held) & set(train)
    # the other 6 problems train with all their 3 copies; the held-out ones' 8 other
    # copies are in neither split
    assert len(train) == 6 * 3 and len(set(train)) == 6
    assert all(train.count(p) == 3 for p in set(train))
    # each row keeps its own answer
    gold = {f"{q}\n": a for q, a in PROBLEMS}  # a string prompt as the run renders it
    for part in ("heldout", "train"):
        assert [gold[p] for p in built[part]["prompt"]] == list(built[part]["answer"])
    logged = [r.getMessage() for r in caplog.records if "repeat an earlier row" in r.getMessage()]
    assert len(logged) == 1
    assert "20 of 30 rows repeat an earlier row's prompt (10 distinct prompts)" in logged[0]
    assert "held out 4 prompts" in logged[0] and "their 8 other rows" in logged[0]


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_without_repeats_the_split_is_the_split_by_rows(tmp_path, seed, caplog):
    """The seeded rows split as before the split was by problem: the first heldout_size
    rows of the dataset shuffled with the seed held out, the rest trained on in order."""
    torch.set_num_threads(1)
    data = write_rows(tmp_path / "once.jsonl", PROBLEMS, copies=1)
    shuffled = load_prompts(data).dataset.shuffle(seed=seed)
    split = split_heldout(shuffled, 3)
    assert (split.heldout, split.train) == ([0, 1, 2], list(range(3, 10)))
    assert (split.problems, split.repeats, split.dropped) == (10, 0, 0)
    with caplog.at_level(logging.WARNING, logger="contrastive_rlvr"):
        built = custom_inputs(config_for(tmp_path, data, heldout_size=3, seed=seed))
    by_rows = [f"{p}\n" for p in shuffled["prompt"]]  # as the run renders a string prompt
    assert list(built["heldout"]["prompt"]) == by_rows[:3]
    assert list(built["train"]["prompt"]) == by_rows[3:]
    assert list(built["train"]["id"]) == list(shuffled["id"])[3:]
    assert not [r for r in caplog.records if "repeat an earlier row" in r.getMessage()]


def test_split_heldout_counts_problems_not_rows():
    from datasets import Dataset

    # order as the seeded shuffle left it: a, b, a, c, b, d, a
    rows = Dataset.from_dict({"prompt": ["a", "b", "a", "c", "b", "d", "a"]})
    split = split_heldout(rows, 2, batch_size=3)  # batches split a problem's copies too
    assert split.heldout == [0, 1]  # a and b, the first two distinct prompts
    assert split.train == [3, 5]  # c and d; the 3 other copies of a and b in neither
    assert (split.problems, split.repeats, split.dropped) == (4, 3, 3)
    # every row when heldout_size exceeds the problems: nothing left to train on
    assert split_heldout(rows, 4).train == []


def test_conversational_prompts_are_compared_as_their_messages():
    user = {"role": "user", "content": "What is 3 + 4?"}
    assert prompt_key([user]) == prompt_key([{"content": "What is 3 + 4?", "role": "user"}])
    assert prompt_key([user]) != prompt_key([{"role": "system", "content": "Be brief."}, user])
    assert prompt_key("What is 3 + 4?") != prompt_key("What is 3 + 4? ")


def test_too_few_distinct_problems_is_named_before_the_model_loads(tmp_path):
    data = write_rows(tmp_path / "thrice.jsonl", PROBLEMS[:3], copies=3)  # 9 rows, 3 problems
    with pytest.raises(UserError) as err:
        preflight(config_for(tmp_path, data, heldout_size=3))
    assert str(err.value) == (
        f"heldout_size=3 leaves no training rows in {data} (9 rows, 3 distinct prompts); "
        "lower heldout_size (0: no held-out scoring)"
    )
    # training rows are those of the problems not held out: 2 problems x 3 copies = 6
    config = config_for(tmp_path, data, heldout_size=1, **{"--generation_batch_size": "32"})
    with pytest.raises(UserError, match=r"leaves 6 training rows after heldout_size=1, fewer "
                       r"than the 8 distinct prompts"):  # fmt: skip
        preflight(config)
