"""TRL's dataset formats pass through unchanged: conversational prompts rendered once by the
chat template, every column reaching the rewards (training and held-out evaluation) and the
stages, field mapping, the instruction option, csv files, TRL's dataset option names."""

from __future__ import annotations

import json

import pytest
import torch
from trainer_utils import save_tiny_model
from transformers import AutoTokenizer

from contrastive_rlvr.data import load_prompts, resolve_instruction, with_instruction
from contrastive_rlvr.generation import DEFAULT_INSTRUCTION
from contrastive_rlvr.run import train
from contrastive_rlvr.trainer.parse import parse_config

# A small template in the char tokenizer's alphabet: every turn "<role>content\n".
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
SYSTEM = {"role": "system", "content": "be brief"}


def chat_model(path):
    """The tiny model, its tokenizer given a chat template."""
    save_tiny_model(path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(path)
    return path


def rendered_ids(tok, messages):
    """The token ids of ``messages`` under the tokenizer's chat template, generation prompt on."""
    out = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return out if isinstance(out, list) else out["input_ids"]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def conversation(i):
    return [SYSTEM, {"role": "user", "content": f"{i}+1="}]


# ---------------------------------------------------------------- loading


def test_every_column_survives_and_messages_drop_the_reply(tmp_path):
    rows = [
        {"messages": [*conversation(i), {"role": "assistant", "content": str(i + 1)}],
         "answer": i + 1, "level": i % 3, "solution": f"{i}+1={i + 1}"}
        for i in range(3)
    ]  # fmt: skip
    ds = load_prompts(write_jsonl(tmp_path / "m.jsonl", rows)).dataset
    assert ds["prompt"] == [conversation(i) for i in range(3)]  # system turn kept, reply gone
    assert ds["level"] == [0, 1, 2] and ds["solution"] == ["0+1=1", "1+1=2", "2+1=3"]
    assert ds["answer"] == ["1", "2", "3"]


def test_csv_file_through_datasets(tmp_path):
    f = tmp_path / "p.csv"
    f.write_text("question,target,source\nwhat is 2+2?,4,book\n3*3?,9,web\n")
    ds = load_prompts(f).dataset
    assert ds["prompt"] == ["what is 2+2?", "3*3?"]
    assert ds["answer"] == ["4", "9"] and ds["source"] == ["book", "web"]


def test_mixed_prompt_formats_are_refused(tmp_path):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": conversation(1), "answer": "2"}]
    with pytest.raises(ValueError, match="some prompts are strings and some are message lists"):
        load_prompts(write_jsonl(tmp_path / "x.jsonl", rows))


def test_instruction_option():
    assert resolve_instruction("auto", conversational=False) == DEFAULT_INSTRUCTION
    assert resolve_instruction("auto", conversational=True) is None
    assert resolve_instruction("default", conversational=True) == DEFAULT_INSTRUCTION
    assert resolve_instruction("none", conversational=False) is None
    assert resolve_instruction("Answer with a number.", conversational=True) == (
        "Answer with a number."
    )
    assert with_instruction("2+2=", "Go.", chat=False) == "2+2=\nGo.\n"
    assert with_instruction("2+2=", None, chat=True) == [{"role": "user", "content": "2+2="}]
    convo = [SYSTEM, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
             {"role": "user", "content": "c"}]  # fmt: skip
    assert with_instruction(convo, "Go.", chat=True) == [
        *convo[:3],
        {"role": "user", "content": "c\nGo."},
    ]
    assert with_instruction(convo, None, chat=True) is convo


def test_trl_dataset_option_names(tmp_path):
    f = write_jsonl(tmp_path / "d.jsonl", [{"q": "1+1=", "sol": "2"}] * 3)
    config = parse_config(None, [
        "--model", "some/model", "--dataset_name", str(f), "--dataset_train_split", "train",
        "--prompt_field", "q", "--answer_field", "sol", "--output_dir", str(tmp_path / "o"),
    ])  # fmt: skip
    assert config.dataset == str(f)
    with pytest.raises(ValueError, match="dataset_name"):
        parse_config(None, ["--model", "m", "--dataset", "a.jsonl", "--dataset_name", "b.jsonl"])


# ---------------------------------------------------------------- training


def _run_args(model, data, out, *extra):
    return [
        "--model", str(model), "--dataset", str(data), "--output_dir", str(out),
        "--heldout_size", "2", "--eval_n", "1", "--max_steps", "1", "--num_generations", "4",
        "--per_device_train_batch_size", "8", "--max_completion_length", "4",
        "--diagnostics_every", "0", "--deltas_every", "0", "--save_strategy", "no",
        "--learning_rate", "1e-3", "--warmup_steps", "0", *extra,
    ]  # fmt: skip


def test_conversational_prompts_rendered_once_and_columns_reach_rewards(tmp_path, monkeypatch):
    """What the model sees is the chat template of the messages, token for token, in training
    and in the held-out evaluation; the reward gets the extra column ``level`` in both."""
    import contrastive_rlvr.models as models

    torch.set_num_threads(1)
    model_dir = chat_model(tmp_path / "model")
    rows = [{"prompt": conversation(i), "answer": str(i + 1), "level": 10 + i} for i in range(6)]
    data = write_jsonl(tmp_path / "chat.jsonl", rows)
    tok = AutoTokenizer.from_pretrained(model_dir)
    expected = {tuple(rendered_ids(tok, r["prompt"])) for r in rows}
    seen_ids: list[tuple[int, ...]] = []
    original = models.load_model_and_tokenizer

    def recording_load(*args, **kwargs):
        model, tokenizer = original(*args, **kwargs)
        generate = model.generate

        def record(*a, **kw):
            ids, mask = kw["input_ids"], kw["attention_mask"]
            for row, keep in zip(ids.tolist(), mask.tolist(), strict=True):
                seen_ids.append(tuple(t for t, m in zip(row, keep, strict=True) if m))
            return generate(*a, **kw)

        model.generate = record
        return model, tokenizer

    monkeypatch.setattr(models, "load_model_and_tokenizer", recording_load)
    log = tmp_path / "calls.jsonl"
    reward = tmp_path / "level_reward.py"
    reward.write_text(
        "import json\n"
        "def level_reward(prompts, completions, answer, level, **kwargs):\n"
        "    phase = 'train' if 'trainer_state' in kwargs else 'eval'\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps([phase, list(level), prompts[0], completions[0]]) + '\\n')\n"
        "    return [float(x % 2) for x in level]\n"
    )
    config = parse_config(None, _run_args(model_dir, data, tmp_path / "out",
                                          "--rewards", f"{reward}:level_reward"))  # fmt: skip
    summary = train(config, progress=False)
    assert summary["steps"] == 1
    # every prompt the model was given is one of the rendered conversations, exactly
    assert seen_ids and set(seen_ids) <= expected, (seen_ids[:2], sorted(expected)[:2])
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    phases = {c[0] for c in calls}
    assert phases == {"train", "eval"}, phases
    for _phase, levels, prompt, completion in calls:
        assert all(lv in range(10, 16) for lv in levels)
        assert prompt[0] == SYSTEM  # the raw conversation, as TRL passes it
        assert isinstance(completion, list) and completion[0]["role"] == "assistant"


def test_oc_grpo_on_a_custom_dataset_with_a_solution_column(tmp_path):
    torch.set_num_threads(1)
    model_dir = save_tiny_model(tmp_path / "model")
    rows = [{"problem": f"{i}+1=", "answer": str(i + 1), "solution": f"{i}+1={i + 1}"}
            for i in range(8)]  # fmt: skip
    data = write_jsonl(tmp_path / "oc.jsonl", rows)
    config = parse_config(None, _run_args(model_dir, data, tmp_path / "out",
                                          "--oc_grpo", "true", "--beta", "0",
                                          "--rewards", "math_verify"))  # fmt: skip
    summary = train(config, progress=False)
    assert summary["steps"] == 1
    row = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert any(k.startswith("oc/") for k in row), sorted(row)
