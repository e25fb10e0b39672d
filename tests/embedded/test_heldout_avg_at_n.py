"""Held-out avg@n: a stub generator with known outputs, and seeding of real sampling."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json

import pytest
import torch
from datasets import Dataset

from contrastive_rlvr.embedded import build_embedded_default
from contrastive_rlvr.embedded.evaluate import (
    heldout_accuracy,
    heldout_correctness,
    max_completion_tokens,
    sample_completions,
)
from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.task import Problem, parse_prompt, to_dataset
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer, load_char_tokenizer

torch.set_num_threads(1)


class StubModel(torch.nn.Module):
    """Answers each prompt with its reference chain if its first operand is even,
    else with the chain off by one; appends junk after <eos> (to be cut off).
    Records the keyword arguments and checks that prompts are left-padded."""

    def __init__(self, tok):
        super().__init__()
        self.tok = tok
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.calls: list[dict] = []

    def generate(self, input_ids, attention_mask, **kwargs):
        self.calls.append({k: v for k, v in kwargs.items() if k != "max_new_tokens"})
        assert attention_mask[:, -1].all(), "prompts must be left-padded"
        rows = []
        for ids in input_ids.tolist():
            prompt = self.tok.decode(ids, skip_special_tokens=True)
            p = parse_prompt(prompt)
            text = p.solution if p.operands[0] % 2 == 0 else p.chain(error_step=0, delta=1)
            new = self.tok(text + "9", add_special_tokens=False)["input_ids"]
            new = new[:-1] + [self.tok.eos_token_id] + new[-1:]  # "<eos>9": junk after <eos>
            rows.append(ids + new)
        width = max(map(len, rows))
        return torch.tensor([r + [self.tok.pad_token_id] * (width - len(r)) for r in rows])


@pytest.fixture(scope="module")
def tok():
    return build_char_tokenizer()


def hand_dataset():
    # First operands 2, 3, 4, 5: the stub is right on problems 0 and 2 only.
    problems = [
        Problem((2, 1, 1), ("+", "+")),
        Problem((3, 1, 1), ("+", "+")),
        Problem((4, 0, 0), ("+", "+")),
        Problem((5, 5, 5), ("+", "+")),
    ]
    return to_dataset(problems)


def test_stub_generator_gives_the_hand_computed_accuracy(tok):
    stub = StubModel(tok)
    tok.padding_side = "right"  # sampling must switch to left padding and back
    correct = heldout_correctness(stub, tok, hand_dataset(), n=3, max_new_tokens=12, batch_size=5)
    assert tok.padding_side == "right"
    tok.padding_side = "left"
    # 12 rows in batches of 5: 3 generate calls, each plain temperature-1 sampling.
    assert len(stub.calls) == 3
    assert all(c["do_sample"] is True and c["top_k"] == 0 for c in stub.calls)
    assert all(c["temperature"] == 1.0 and c["top_p"] == 1.0 for c in stub.calls)
    # Problem-major rows: each problem's 3 samples are all right or all wrong.
    assert correct == [[True] * 3, [False] * 3, [True] * 3, [False] * 3]
    # avg@3 = mean(1, 0, 1, 0) = 0.5.
    assert heldout_accuracy(stub, tok, hand_dataset(), n=3, max_new_tokens=12) == 0.5


def test_samples_are_cut_at_eos(tok):
    stub = StubModel(tok)
    out = sample_completions(stub, tok, ["2+1+1=", "3+1+1="], n=2, max_new_tokens=12)
    # 2+1 = 3, 3+1 = 4; the odd one is off by +1; the junk '9' after <eos> is gone.
    assert out == [["3+1=4", "3+1=4"], ["4+1=6", "4+1=6"]]


def test_max_completion_tokens_by_hand(tok):
    ds = to_dataset([Problem((9, 9, 9), ("+", "+")), Problem((1, 1, 1, 1), ("+", "+", "+"))])
    # "18+9=27": 7 tokens + <eos> + 1 step = 9; "2+1=3,3+1=4": 11 + 1 + 2 steps = 14.
    assert max_completion_tokens(ds, tok) == 14


def test_real_sampling_is_seeded_and_leaves_the_rng(tok):
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, mlp=64, max_positions=64)
    prompts = ["5+9+3=", "1+2+3="]
    torch.manual_seed(5)
    state = torch.get_rng_state()
    a = sample_completions(model, tok, prompts, n=4, max_new_tokens=6, seed=1)
    assert torch.equal(torch.get_rng_state(), state)
    b = sample_completions(model, tok, prompts, n=4, max_new_tokens=6, seed=1)
    c = sample_completions(model, tok, prompts, n=4, max_new_tokens=6, seed=2)
    assert a == b
    assert a != c  # an untrained model over 100 tokens: 8 samples of 6 never all repeat
    assert all(len(s) <= 6 for row in a for s in row)


def test_missing_column_is_named(tok):
    with pytest.raises(ValueError, match="'answer'"):
        heldout_accuracy(StubModel(tok), tok, Dataset.from_dict({"prompt": ["1+1+1="]}))


def test_build_embedded_default_saves_and_reloads(tmp_path):
    from transformers import AutoModelForCausalLM

    model, tok, train, heldout = build_embedded_default(tmp_path, seed=3, sft_steps=2)
    assert not set(train["prompt"]) & set(heldout["prompt"])
    back_tok = load_char_tokenizer(tmp_path)
    back = AutoModelForCausalLM.from_pretrained(tmp_path)
    ids = back_tok(["5+9+3="], return_tensors="pt")["input_ids"]
    model.eval()
    assert torch.equal(model(input_ids=ids).logits, back(input_ids=ids).logits)
    saved = json.loads((tmp_path / "embedded_settings.json").read_text())
    assert (saved["seed"], saved["sft"]["seed"], saved["sft_steps_run"]) == (3, 3, 2)
    assert (tmp_path / "heldout.jsonl").is_file()
