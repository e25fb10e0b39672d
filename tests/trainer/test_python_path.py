"""What a Python script on ``RLVRTrainer`` is told, against ``contrastive_rlvr.train`` (the
CLI's ``train`` in Python): string prompts that reach a chat model without its template
are named once with the fixes; the learning-signal warning points to what each path
writes (samples/ for train, TRL's printed completions for a script); the model card names
the data actually used."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from datasets import Dataset
from inputs.test_trl_dataset_formats import chat_model
from trainer_utils import make_config, token_parity_reward
from transformers import AutoModelForCausalLM, AutoTokenizer

from contrastive_rlvr.trainer import RLVRTrainer
from contrastive_rlvr.trainer.learning_signal import LearningSignal
from contrastive_rlvr.trainer.model_card import data_named

NOTE = "the training prompts are plain strings and RLVRTrainer passes them to the model"


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return chat_model(tmp_path_factory.mktemp("chat") / "model")


def _trainer(chat_dir, tmp_path, prompts, **overrides):
    config = make_config(tmp_path, max_steps=1, **overrides)
    return RLVRTrainer(
        model=AutoModelForCausalLM.from_pretrained(chat_dir),
        reward_funcs=[token_parity_reward],
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts, "answer": ["2"] * len(prompts)}),
        processing_class=AutoTokenizer.from_pretrained(chat_dir),
    )


def test_string_prompts_on_a_chat_model_are_named_once(chat_dir, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="contrastive_rlvr"):
        trainer = _trainer(chat_dir, tmp_path, [f"{i}+{i}=" for i in range(8)])
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert len(notes) == 1
    assert "run contrastive_rlvr.train(config), or set chat_template=False" in notes[0]
    # the card names the dataset passed in code, not the embedded task
    trainer.create_model_card()
    card = (tmp_path / "out" / "README.md").read_text()
    assert "- dataset: a dataset passed in code (8 rows, columns prompt, answer)" in card
    assert "embedded arithmetic task" not in card


@pytest.mark.parametrize(
    ("prompts", "overrides"),
    [
        ([[{"role": "user", "content": f"{i}+{i}="}] for i in range(8)], {}),  # conversational
        ([f"{i}+{i}=" for i in range(8)], {"chat_template": False}),  # plain text asked for
    ],
)
def test_no_note_for_conversations_or_when_plain_text_is_asked(
    chat_dir, tmp_path, caplog, prompts, overrides
):
    with caplog.at_level(logging.WARNING, logger="contrastive_rlvr"):
        _trainer(chat_dir, tmp_path, prompts, **overrides)
    assert not [r for r in caplog.records if NOTE in r.getMessage()]


@pytest.mark.parametrize(
    ("writes", "pointer"),
    [
        (True, "the held-out samples in samples/ show what it wrote and what was read"),
        (False, "log_completions=True prints sampled completions with their rewards"),
    ],
)
def test_the_all_wrong_hint_points_to_what_the_path_writes(writes, pointer):
    trainer = SimpleNamespace(reward_funcs=[], reward_func_names=[], writes_heldout_samples=writes)
    monitor = LearningSignal(trainer)
    monitor.observe({"reward": 0.0, "adv/collapse_rate": 1.0, "adv/collapse_wrong_rate": 1.0,
                     "adv/collapse_correct_rate": 0.0})  # fmt: skip
    assert pointer in monitor.current_causes(SimpleNamespace(max_completion_length=8))["collapsed"]


def test_the_card_names_the_data_of_each_path():
    embedded = SimpleNamespace(model="embedded", dataset=None)
    named = SimpleNamespace(model="m", dataset="sums.jsonl")
    assert data_named(embedded) == "the embedded arithmetic task"
    assert data_named(named) == "`sums.jsonl`"
    code = SimpleNamespace(model="m", dataset=None)
    rows = Dataset.from_dict({"prompt": ["a", "b"], "level": [1, 2]})
    assert data_named(code, rows) == "a dataset passed in code (2 rows, columns prompt, level)"
