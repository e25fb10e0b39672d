"""The reading warm start: BiCC-format contexts in SFT, laid out as BiCC lays them out."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import math
import random

import pytest
import torch

from contrastive_rlvr.algorithms import BiCCTemplate, build_bicc_prompts
from contrastive_rlvr.embedded.sft import (
    WarmStartConfig,
    context_demonstration,
    context_prompt,
)
from contrastive_rlvr.embedded.task import (
    chain_answer,
    parse_prompt,
)
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def cid(c: str) -> int:
    """Character id of the embedded tokenizer: 4 + ord(c) - 32."""
    return 4 + ord(c) - 32


def chars(text: str) -> list[int]:
    return [cid(c) for c in text]


def test_context_prompt_by_hand(tok):
    # "<bos>5+9+3=" then the default framing around two wrong chains, character by character.
    ids = context_prompt(tok, "5+9+3=", ["14+3=18", "14+3=16"], False)
    text = (
        "\nIncorrect attempts at this problem:\n"
        "Attempt 1: 14+3=18\n"
        "Attempt 2: 14+3=16\n"
        "Your attempt:\n"
    )
    assert ids == [tok.bos_token_id] + chars("5+9+3=") + [cid(c) if c != "\n" else 99 for c in text]


def test_context_prompt_equals_bicc_conditioned_prompt(tok):
    # A group of 4 as the trainer sees it: rows 0 and 3 correct, 1 and 2 wrong.
    prompt = tok("5+9+3=", add_special_tokens=True)["input_ids"]
    chains = ["14+3=17", "14+3=18", "14+3=16", "14+3=17"]
    completions = [
        tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in chains
    ]
    template = BiCCTemplate().encode(
        lambda t: tok(t, add_special_tokens=False)["input_ids"], max_items=4
    )
    built = build_bicc_prompts(
        [prompt] * 4,
        completions,
        torch.tensor([1.0, 0.0, 0.0, 1.0]),
        4,
        template,
        budget=1638,  # floor(0.4 * 4096)
        pad_token_id=tok.pad_token_id,
        strip_token_ids={tok.eos_token_id, tok.pad_token_id},
    )

    def row(i: int) -> list[int]:
        return built.input_ids[i][built.attention_mask[i].bool()].tolist()

    # Correct rows see the wrong ones; wrong rows see the correct ones.
    assert context_prompt(tok, "5+9+3=", chains[1:3], False) == row(0) == row(3)
    assert context_prompt(tok, "5+9+3=", [chains[0], chains[3]], True) == row(1) == row(2)


def test_context_demonstration_reads_the_attempts():
    problem = parse_prompt("5+9+3=")
    rng = random.Random(0)
    sides = {True: 0, False: 0}
    for _ in range(400):
        attempts, correct, target = context_demonstration(problem, rng, 0.4, 7)
        assert 1 <= len(attempts) <= 7
        sides[correct] += 1
        if correct:
            assert attempts == [problem.solution] * len(attempts)
            assert target == problem.solution
        else:
            shown = {chain_answer(a) for a in attempts}
            assert problem.answer not in shown  # every shown attempt is wrong
            assert chain_answer(target) not in shown  # and the target repeats none of them
            # distinct while slips remain: 5+9=14, +3: 18, 16, 27, 7 are the four slips
            assert len(set(attempts)) == min(len(attempts), 4)
    assert 150 < sides[True] < 250  # half and half (binomial 400, 1/2: sd 10)


def test_context_frac_must_be_a_share():
    with pytest.raises(ValueError, match="context_frac"):
        WarmStartConfig(context_frac=1.5)
    with pytest.raises(ValueError, match="context_max_attempts"):
        WarmStartConfig(context_max_attempts=0)


def test_context_prompt_cut_to_bicc_budget_by_hand(tok):
    # The embedded default's budget floor(0.4 * 256) = 102 tokens: framing 37 (header) +
    # 14 (footer) + 3 x (11 "Attempt k: " + 1 "\n") = 87 leaves 15 for three attempts,
    # 5 characters each, cut in the middle (head 3, tail 2); a fourth attempt would need
    # 51 + 4 x 12 = 99 of framing and leave 3 < 4 tokens, so it is left out.
    wrong = ["14+3=18", "14+3=16", "14+3=27", "14+3=7"]
    ids = context_prompt(tok, "5+9+3=", wrong, False, budget=102)
    text = (
        "\nIncorrect attempts at this problem:\n"
        "Attempt 1: 14+18\n"
        "Attempt 2: 14+16\n"
        "Attempt 3: 14+27\n"
        "Your attempt:\n"
    )
    assert len(ids) - 7 == 102
    assert ids == [tok.bos_token_id] + chars("5+9+3=") + [cid(c) if c != "\n" else 99 for c in text]


def test_context_prompt_with_budget_equals_bicc_conditioned_prompt(tok):
    # Same group as above but with the trainer's budget: both must cut alike.
    prompt = tok("5+9+3=", add_special_tokens=True)["input_ids"]
    chains = ["14+3=17", "14+3=18", "14+3=16", "14+3=27", "14+3=17"]
    completions = [
        tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for c in chains
    ]
    template = BiCCTemplate().encode(
        lambda t: tok(t, add_special_tokens=False)["input_ids"], max_items=5
    )
    built = build_bicc_prompts(
        [prompt] * 5,
        completions,
        torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0]),
        5,
        template,
        budget=102,
        pad_token_id=tok.pad_token_id,
        framing="inside",
        strip_token_ids={tok.eos_token_id, tok.pad_token_id},
    )
    row0 = built.input_ids[0][built.attention_mask[0].bool()].tolist()
    assert context_prompt(tok, "5+9+3=", chains[1:4], False, budget=102) == row0


def test_reference_target_after_wrong_attempts():
    problem = parse_prompt("5+9+3=")
    rng = random.Random(1)
    wrong_sides = 0
    for _ in range(200):
        attempts, correct, target = context_demonstration(problem, rng, 0.4, 3, "reference")
        assert target == "14+3=17"  # after any context the demonstration is right
        if not correct:
            wrong_sides += 1
            assert all(chain_answer(a) != 17 for a in attempts)
    assert 70 < wrong_sides < 130


def test_split_loss_is_the_mean_over_all_labelled_tokens(tok):
    # Two sub-batches of different widths give the mean token loss of all their rows:
    # with a model whose logits are all zero every token costs log(V), so the mean
    # is log(V) whatever the split; with a real model it equals one padded batch.
    from contrastive_rlvr.embedded.model import build_tiny_model
    from contrastive_rlvr.embedded.sft import collate, completion_loss, completion_loss_split

    model = build_tiny_model(tok, hidden=16, layers=1, heads=2, mlp=32, seed=0)
    long_prompt = context_prompt(tok, "5+9+3=", ["14+3=18"], False)
    a = collate(tok, ["5+9+3="], ["14+3=17"])
    b = collate(tok, [long_prompt], ["14+3=17,1"])
    both = collate(tok, ["5+9+3=", long_prompt], ["14+3=17", "14+3=17,1"])
    split = completion_loss_split(model, [a, b])
    assert torch.allclose(split, completion_loss(model, both), atol=1e-6)
    with torch.no_grad():
        for p in model.lm_head.parameters():
            p.zero_()
    vocab = model.config.vocab_size
    assert torch.allclose(
        completion_loss_split(model, [a, b]), torch.tensor(math.log(vocab)), atol=1e-5
    )


def test_target_rule_and_budget_are_checked():
    with pytest.raises(ValueError, match="context_target"):
        WarmStartConfig(context_target="copy")
    with pytest.raises(ValueError, match="context_budget"):
        WarmStartConfig(context_budget=0)


def test_sampled_reading_pool_by_hand(tok, monkeypatch):
    # The model's own samples, replaced by four fixed ones (G = 4): rows 0 and 2 correct
    # (13+3=17 is right too: the reward reads the final number), rows 1 and 3 wrong.
    from contrastive_rlvr.embedded import evaluate
    from contrastive_rlvr.embedded.sft import encode_template, sampled_reading_pool

    texts = ["14+3=17", "14+3=18", "13+3=17", "12+3=15"]
    monkeypatch.setattr(evaluate, "sample_completions", lambda *a, **k: [texts])
    problem = parse_prompt("5+9+3=")
    cfg = WarmStartConfig(
        context_frac=0.5,
        context_attempts="sampled",
        context_target="reference",
        context_max_attempts=3,
        context_pool=1,
        context_budget=102,
    )
    pool = sampled_reading_pool(
        None, tok, [problem], random.Random(0), cfg, encode_template(tok, 3)
    )

    def framed(header: str, attempts: list[str]) -> list[int]:
        text = header + "".join(f"Attempt {i + 1}: {a}\n" for i, a in enumerate(attempts))
        text += "Your attempt:\n"
        return [tok.bos_token_id] + chars("5+9+3=") + [cid(c) if c != "\n" else 99 for c in text]

    # Correct rows read the wrong ones, wrong rows the correct ones; both write the reference.
    assert pool == [
        (framed("\nIncorrect attempts at this problem:\n", ["14+3=18", "12+3=15"]), "14+3=17"),
        (framed("\nCorrect attempts at this problem:\n", ["14+3=17", "13+3=17"]), "14+3=17"),
    ]
    # With "avoid", the target after the wrong attempts repeats neither 18 nor 15.
    avoid = sampled_reading_pool(
        None,
        tok,
        [problem],
        random.Random(0),
        WarmStartConfig(**{**cfg.__dict__, "context_target": "avoid"}),
        encode_template(tok, 3),
    )
    assert chain_answer(avoid[0][1]) not in (18, 15) and avoid[1][1] == "14+3=17"
    # A one-sided group gives nothing.
    texts[:] = ["14+3=17"] * 4
    assert (
        sampled_reading_pool(None, tok, [problem], random.Random(0), cfg, encode_template(tok, 3))
        == []
    )


def test_context_prompt_before_prompt_by_hand(tok):
    # BiCC's before_prompt placement: the framed attempts, then <bos> and the prompt.
    ids = context_prompt(tok, "5+9+3=", ["14+3=17"], True, placement="before_prompt")
    text = "\nCorrect attempts at this problem:\nAttempt 1: 14+3=17\nYour attempt:\n"
    framed = [cid(c) if c != "\n" else 99 for c in text]
    assert ids == framed + [tok.bos_token_id] + chars("5+9+3=")
