"""The reading warm start: BiCC-format contexts in SFT, laid out as BiCC lays them out."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import random  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from contrastive_rlvr.algorithms import BiCCTemplate, build_bicc_prompts  # noqa: E402
from contrastive_rlvr.embedded.sft import (  # noqa: E402
    WarmStartConfig,
    context_demonstration,
    context_prompt,
)
from contrastive_rlvr.embedded.task import (  # noqa: E402
    chain_answer,
    parse_prompt,
)
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer  # noqa: E402

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
        max_seq_len=4096,
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
