"""One sampler for the project: held-out scoring during ``train`` (the user's model and the
embedded task alike), the embedded task's evaluation and ``eval`` all draw through
``HFGenerator``'s one loop; and that loop's draws are checked by hand on a tiny model
(greedy: argmax step by step; sampling: softmax and ``torch.multinomial`` step by step)."""

from __future__ import annotations

import json

import pytest
import torch
from trainer_utils import save_tiny_model

from contrastive_rlvr.embedded.model import build_tiny_model
from contrastive_rlvr.embedded.task import parse_prompt
from contrastive_rlvr.embedded.tokenizer import build_char_tokenizer
from contrastive_rlvr.evaluation import EvalConfig, evaluate
from contrastive_rlvr.evaluation.suites import PACKAGED_DIR
from contrastive_rlvr.generation import HFGenerator
from contrastive_rlvr.run.command import load_run_inputs
from contrastive_rlvr.trainer.parse import parse_config

torch.set_num_threads(1)


@pytest.fixture
def recorded(monkeypatch):
    """The loop replaced by a stand-in that records each call (which caller, how many
    rows, the seed) and answers with ``reply[0](row)``: what the callers return can then
    only have come from it."""
    calls: list[tuple[str, int, int | None]] = []
    state = {"caller": None, "reply": None}

    def loop(self, rows, *, seed):
        calls.append((state["caller"], len(rows), seed))
        return [state["reply"](row) for row in rows]

    monkeypatch.setattr(HFGenerator, "_sample_rows", loop)
    return calls, state


def test_train_the_embedded_task_and_eval_sample_through_the_one_loop(tmp_path, recorded):
    calls, state = recorded
    model_dir = save_tiny_model(tmp_path / "model")

    # 1. train's held-out scoring on the user's model and data: one completion per prompt,
    # seeded per sample index (seed, seed + 1), written to samples/heldout_<label>.jsonl.
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{i}+{i}=", "answer": str(2 * i)}) + "\n"
                            for i in range(8)))  # fmt: skip
    out = tmp_path / "custom"
    args = ["--model", str(model_dir), "--dataset", str(data), "--rewards", "format",
            "--heldout_size", "3", "--eval_n", "2", "--seed", "5", "--chat_template", "false",
            "--instruction", "none", "--max_completion_length", "8",
            "--output_dir", str(out)]  # fmt: skip
    custom = load_run_inputs(parse_config(None, args), out)
    state.update(caller="train", reply=lambda row: "from the loop")
    custom["evaluate"](custom["model"], label="before")
    assert calls == [("train", 3, 5), ("train", 3, 6)]
    written = (out / "samples" / "heldout_before.jsonl").read_text().splitlines()
    assert [json.loads(line)["completion"] for line in written] == ["from the loop"] * 6

    # 2. the embedded task (train's held-out avg@n of the embedded default): n completions
    # per prompt, problem-major, one stream (no seed per call); the loop's answers are
    # each prompt's reference solution, so every sample is scored right.
    calls.clear()
    out = tmp_path / "embedded"
    args = ["--embedded_sft_steps", "2", "--eval_limit", "3", "--eval_n", "2",
            "--output_dir", str(out)]  # fmt: skip
    embedded = load_run_inputs(parse_config(None, args), out)
    state.update(caller="embedded", reply=lambda row: parse_prompt(row).solution)
    assert embedded["evaluate"](embedded["model"]) == [[True, True]] * 3
    assert calls == [("embedded", 6, None)]

    # 3. eval: one batch of prompts per seed 0..n-1, each sample as the loop wrote it.
    calls.clear()
    state.update(caller="eval", reply=lambda row: "from the loop")
    config = EvalConfig(model=str(model_dir), benchmarks=["gsm8k"], n=2, limit=2,
                        max_new_tokens=4, output_dir=str(tmp_path / "eval"),
                        benchmarks_dir=str(PACKAGED_DIR), reward_workers=1,
                        progress=False)  # fmt: skip
    evaluate(config)
    assert sorted(calls, key=lambda c: c[2]) == [("eval", 2, 0), ("eval", 2, 1)]
    samples = (tmp_path / "eval" / "samples" / "gsm8k.jsonl").read_text().splitlines()
    assert [json.loads(line)["completion"] for line in samples] == ["from the loop"] * 4


@pytest.fixture(scope="module")
def tiny():
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, mlp=64, max_positions=64, seed=3)
    model.eval()
    return model, tok


def by_hand(model, tok, prompt: str, steps: int, pick) -> str:
    """Decode ``steps`` tokens one at a time without a cache: the whole sequence through
    the model, ``pick(logits of the last position)`` the next token, stop at ``<eos>``."""
    ids = tok(prompt)["input_ids"]
    new: list[int] = []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids + new])).logits[:, -1].float()  # (1, V)
            token = pick(logits)
            if token == tok.eos_token_id:
                break
            new.append(token)
    return tok.decode(new, skip_special_tokens=True)


def test_greedy_decoding_is_argmax_step_by_step(tiny):
    model, tok = tiny
    prompts = ["5+9+3=", "1+2+3+4="]
    gen = HFGenerator(model, tok, max_new_tokens=10, temperature=0.0, top_p=1.0,
                      batch_size=1, chat=False)  # fmt: skip
    want = [by_hand(model, tok, p, 10, lambda lg: int(lg.argmax(-1))) for p in prompts]
    assert gen.generate(prompts, seed=0) == want
    # The embedded task's form: n per prompt, cut at <eos>; greedy repeats itself.
    eos_gen = HFGenerator(model, tok, max_new_tokens=10, temperature=0.0, top_p=1.0,
                          batch_size=1, chat=False, stop_at_eos=True)  # fmt: skip
    assert eos_gen.sample(prompts, n=2, seed=0) == [[w, w] for w in want]
    assert any(want)  # not vacuous: the random model writes something


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_is_softmax_and_multinomial_from_the_seed(tiny, temperature):
    model, tok = tiny
    prompt = "5+9+3="

    def draw(logits):  # what generate does: scores / T, softmax, one multinomial draw
        probs = torch.softmax(logits / temperature if temperature != 1.0 else logits, dim=-1)
        return int(torch.multinomial(probs, num_samples=1)[0, 0])

    torch.manual_seed(11)
    want = by_hand(model, tok, prompt, 12, draw)
    gen = HFGenerator(model, tok, max_new_tokens=12, temperature=temperature, top_p=1.0,
                      batch_size=1, chat=False)  # fmt: skip
    assert gen.generate([prompt], seed=11) == [want]
    # One prompt, one row: the single stream seeded once draws the same, and leaves the
    # caller's RNG as it was.
    before = torch.get_rng_state()
    assert gen.sample([prompt], n=1, seed=11) == [[want]]
    assert torch.equal(torch.get_rng_state(), before)
    other = [gen.generate([prompt], seed=s)[0] for s in range(12, 16)]
    assert any(o != want for o in other)  # another seed, other draws: the seed is used


def test_scoring_samples_with_dropout_off_and_gives_the_model_back_in_its_mode():
    """Held-out scoring in ``train`` gets the model in training mode, where dropout would
    change what it writes. Every forward of the sampling must run in eval mode (a hook
    records the mode of each), the draws must be the eval-mode argmax, and the model
    must come back in training mode."""
    tok = build_char_tokenizer()
    model = build_tiny_model(tok, hidden=32, layers=1, heads=2, mlp=64, max_positions=64, seed=3)
    model.eval()
    prompts = ["5+9+3=", "1+2+3+4="]
    want = [by_hand(model, tok, p, 10, lambda lg: int(lg.argmax(-1))) for p in prompts]
    modes: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    model.train()
    gen = HFGenerator(model, tok, max_new_tokens=10, temperature=0.0, top_p=1.0,
                      batch_size=1, chat=False)  # fmt: skip
    assert gen.generate(prompts, seed=0) == want
    assert modes and not any(modes)  # every forward of generate in eval mode
    assert model.training
