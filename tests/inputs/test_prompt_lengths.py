"""A dataset whose longest prompt, with ``max_completion_length``, needs more positions
than the model has is refused before training, naming the numbers and the fix (TRL does
not cut prompts: the model would run past its positions without a word)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.run.custom_inputs import check_prompt_lengths


def _model(positions: int):
    return SimpleNamespace(config=SimpleNamespace(max_position_embeddings=positions))


def test_a_prompt_past_the_models_positions_is_refused_with_the_numbers():
    tokenizer = build_char_tokenizer()  # one token a character, after <bos>
    config = SimpleNamespace(dataset="d.jsonl", max_completion_length=8)
    prompts = ["1+2=", "12+34+56="]  # 1 + 4 and 1 + 9 tokens: the longest is 10
    check_prompt_lengths(config, _model(18), tokenizer, prompts)  # 10 + 8 = 18 fits
    with pytest.raises(UserError) as err:
        check_prompt_lengths(config, _model(17), tokenizer, prompts)
    assert str(err.value) == (
        "dataset='d.jsonl': its longest prompt is 10 tokens, which with "
        "max_completion_length=8 needs more than the model's 17 positions "
        "(max_position_embeddings); shorten the prompts or lower max_completion_length"
    )


def test_chat_prompts_are_measured_as_the_template_renders_them():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = (
        "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}=>{% endif %}"
    )
    config = SimpleNamespace(dataset="d.jsonl", max_completion_length=4)
    prompt = [{"role": "user", "content": "1+2"}]  # <bos> 1 + 2 = > : 6 tokens
    check_prompt_lengths(config, _model(10), tokenizer, [prompt])
    with pytest.raises(UserError, match="longest prompt is 6 tokens"):
        check_prompt_lengths(config, _model(9), tokenizer, [prompt])


def test_every_row_is_checked_not_the_first_2000():
    tokenizer = build_char_tokenizer()
    config = SimpleNamespace(dataset="d.jsonl", max_completion_length=8)
    prompts = ["1+2="] * 2600 + ["1" * 40]  # the long one is row 2601
    with pytest.raises(UserError, match="longest prompt is 41 tokens"):
        check_prompt_lengths(config, _model(32), tokenizer, prompts)
