"""``generation_kwargs`` as TRL takes them: a key such as ``top_k`` overrides the sampling
field in training (TRL's ``GenerationConfig``), and the held-out scoring and ``premise``
sample with it too, so all three draw from one distribution. ``top_k=1`` makes sampling
greedy, which the tests below can see: every sample of a prompt is the same."""

from __future__ import annotations

import json

import pytest
from datasets import Dataset
from trainer_utils import make_config, make_trainer, save_tiny_model

from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.premise.command import sample_groups
from contrastive_rlvr.run.heldout import heldout_evaluator
from contrastive_rlvr.trainer.config import sampling_settings

#: TRL's own GRPO test_train_with_generation_kwargs passes these.
TRL_TEST_KWARGS = {"do_sample": True, "top_k": 50, "num_beams": 2, "length_penalty": -0.1}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("gk") / "model")


def test_the_fields_then_generation_kwargs_over_them(tmp_path):
    config = make_config(tmp_path, generation_kwargs={"top_k": 7, "num_beams": 2})
    assert sampling_settings(config) == {
        "temperature": 1.0, "top_p": 1.0, "top_k": 7, "repetition_penalty": 1.0,
        "num_beams": 2,
    }  # fmt: skip
    # a field left at TRL's default is overridden; set to the same value, it agrees
    assert make_config(tmp_path, top_k=7, generation_kwargs={"top_k": 7}).top_k == 7


def test_a_field_and_its_key_that_disagree_are_refused(tmp_path):
    with pytest.raises(UserError, match=r"^top_k=3 and generation_kwargs 'top_k': 7 disagree"):
        make_config(tmp_path, top_k=3, generation_kwargs={"top_k": 7})


def test_trls_generation_kwargs_test_trains_on_rlvrtrainer(tmp_path, model_dir):
    config = make_config(tmp_path, generation_kwargs=dict(TRL_TEST_KWARGS), max_steps=1)
    trainer = make_trainer(model_dir, config)
    # TRL's generation config of the run carries them
    assert trainer.generation_config.top_k == 50 and trainer.generation_config.num_beams == 2
    trainer.train()
    assert trainer.state.log_history[-1]["train_loss"] is not None


def _heldout_samples(tmp_path, model_dir, **overrides) -> list[list[str]]:
    """The held-out evaluator's eval_n=4 completions of each of 3 prompts."""
    config = make_config(tmp_path, eval_n=4, max_completion_length=6, **overrides)
    heldout = Dataset.from_dict({"prompt": ["1+2=", "3+4=", "5+6="], "answer": ["3", "7", "11"]})
    tokenizer = load_char_tokenizer(model_dir)
    evaluate = heldout_evaluator(
        config, tokenizer, heldout, lambda prompts, completions, **kw: [0.0] * len(prompts),
        chat=False,
    )  # fmt: skip
    from transformers import AutoModelForCausalLM

    evaluate(AutoModelForCausalLM.from_pretrained(model_dir), label="t")
    records = [
        json.loads(line)
        for line in (tmp_path / "out" / "samples" / "heldout_t.jsonl").read_text().splitlines()
    ]
    by_prompt: dict[str, list[str]] = {}
    for rec in records:
        by_prompt.setdefault(rec["problem_id"], []).append(rec["completion"])
    return list(by_prompt.values())


def test_heldout_scoring_samples_with_generation_kwargs_top_k(tmp_path, model_dir):
    free = _heldout_samples(tmp_path / "free", model_dir)
    greedy = _heldout_samples(tmp_path / "k1", model_dir, generation_kwargs={"top_k": 1})
    # temperature 1 over a random model's whole vocabulary: the 4 samples differ
    assert all(len(set(samples)) > 1 for samples in free)
    # top_k=1 leaves one token a step: the 4 samples of each prompt are one text
    assert all(len(set(samples)) == 1 for samples in greedy)
    # ... as the field top_k=1 gives (the held-out scoring reads the field as well)
    assert _heldout_samples(tmp_path / "field", model_dir, top_k=1) == greedy


def test_premise_samples_with_generation_kwargs_top_k(tmp_path, model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = load_char_tokenizer(model_dir)
    prompts = [tokenizer("1+2=")["input_ids"], tokenizer("3+4=")["input_ids"]]
    common = dict(
        group=4, max_new_tokens=6, temperature=1.0, top_p=1.0, batch=2, seed=0,
        pad_token_id=tokenizer.pad_token_id, end_ids=[tokenizer.eos_token_id],
    )  # fmt: skip
    free = sample_groups(model, prompts, **common)
    greedy = sample_groups(model, prompts, extra={"top_k": 1}, **common)
    assert all(len({tuple(c) for c in group}) > 1 for group in free)
    assert all(len({tuple(c) for c in group}) == 1 for group in greedy)
