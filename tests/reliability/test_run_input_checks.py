"""Options reach what they set or are refused in one line; a chat role the template
refuses is found on any row before training; a checkpoint file that asks to run code is
refused without advice to switch the safe loader off; the Hub token is never on disk."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from cli_utils import cli, one_line
from trainer_utils import forbid_model_loading, tiny_model_and_data

from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.trainer.parse import parse_config

#: Refuses any role but system, user and assistant, as many chat templates do.
STRICT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}"
)
SECRET = "hf_secretTOKEN0123456789"


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tiny_model_and_data(tmp_path_factory.mktemp("inputs"))


def _train(root: Path, out: Path, *extra: str, model: Path | None = None) -> list[str]:
    return ["train", "--model", str(model or root / "model"), "--dataset",
            str(root / "d.jsonl"), "--rewards", "format", "--heldout_size", "1",
            "--num_generations", "2", "--per_device_train_batch_size", "2",
            "--max_completion_length", "4", "--eval_n", "1", "--eval_limit", "1",
            "--report_to", "none", "--output_dir", str(out), *extra]  # fmt: skip


@pytest.fixture
def guarded(monkeypatch):
    forbid_model_loading(monkeypatch, "a model was loaded before the input was checked")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            '{"junk_option": 1}',
            "generation_kwargs: 'junk_option' is not an option of transformers' GenerationConfig",
        ),
        ('{"num_beam": 2}', "(did you mean num_beams"),
        ('{"temperature": 0.1}', "generation_kwargs: 'temperature' must be set as temperature"),
        ('{"top_k": 5}', "top_k=3 and generation_kwargs 'top_k': 5 disagree"),
    ],
)
def test_generation_kwargs_that_would_be_ignored_are_refused(tmp_path, guarded, value, message):
    args = ["train", "--generation_kwargs", value, "--top_k", "3", "--output_dir", str(tmp_path)]
    one_line(cli(args), 2, message)


def test_known_generation_kwargs_pass(tmp_path):
    cfg = parse_config(None, ["--generation_kwargs", '{"num_beams": 1, "no_repeat_ngram_size": 3}',
                              "--output_dir", str(tmp_path)])  # fmt: skip
    assert cfg.generation_kwargs == {"num_beams": 1, "no_repeat_ngram_size": 3}


def test_a_split_name_on_a_local_file_is_refused(root, tmp_path, guarded):
    args = _train(root, tmp_path / "o", "--dataset_train_split", "test")
    one_line(cli(args), 2, "dataset_train_split='test' names a split, but")


@pytest.mark.parametrize("prefix", ["Try {n}: ", "Try {index: ", "Try {0}: "])
def test_a_bicc_item_prefix_with_another_field_is_refused(tmp_path, guarded, prefix):
    result = cli(["train", "--bicc", "true", "--bicc_item_prefix", prefix,
                   "--output_dir", str(tmp_path)])  # fmt: skip
    one_line(result, 2, f"bicc_item_prefix={prefix!r} is invalid")
    assert "it may use {index}" in result.output


def test_a_chat_role_refused_on_a_late_row_is_named_before_training(root, tmp_path, monkeypatch):
    model = tmp_path / "chat-model"
    shutil.copytree(root / "model", model)
    tokenizer = load_char_tokenizer(model)
    tokenizer.chat_template = STRICT_TEMPLATE
    tokenizer.save_pretrained(model)
    rows = [{"prompt": [{"role": "user", "content": f"{i % 9}+1"}], "answer": "1"}
            for i in range(2100)]  # fmt: skip
    rows[2049]["prompt"].insert(0, {"role": "tool", "content": "1"})  # past the first 2000
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    import contrastive_rlvr.run.command as run_module

    def no_training(*a, **k):
        raise AssertionError("training started")

    monkeypatch.setattr(run_module, "RLVRTrainer", no_training)
    args = _train(root, tmp_path / "o", "--dataset", str(data), model=model)
    one_line(cli(args), 2, "row 2050 (id 2049, roles tool, user): the model's chat template "
                             "refuses it (unknown role tool)")  # fmt: skip


class _RunsCode:
    """Pickles as a call of os.system: what a tampered checkpoint file would hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def two_step_run(root, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "o"
    args = _train(root, out, "--max_steps", "2", "--save_steps", "1", "--hub_token", SECRET)
    result = cli(args)
    assert result.exit_code == 0, result.output
    return out


def test_the_hub_token_is_never_written(two_step_run):
    written = [p for p in two_step_run.rglob("*") if p.is_file()]
    assert any(p.name == "training_args.bin" for p in written)  # it held the token in clear
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    saved = torch.load(two_step_run / "training_args.bin", weights_only=False)
    assert saved.hub_token is None


def test_a_checkpoint_file_that_would_run_code_is_refused_in_one_line(two_step_run, tmp_path,
                                                                     root):  # fmt: skip
    run = tmp_path / "o"
    shutil.copytree(two_step_run, run)
    # as a run killed after its first checkpoint leaves its folder
    shutil.rmtree(run / "checkpoint-2")
    (run / "summary.json").unlink()
    marker = tmp_path / "code-ran"
    torch.save({"state": _RunsCode(marker)}, run / "checkpoint-1" / "optimizer.pt")
    result = cli([*_train(root, run, "--max_steps", "2", "--save_steps", "1", "--hub_token",
                           SECRET), "--resume", "true"])  # fmt: skip
    one_line(result, 2, "checkpoint-1 holds a file the safe loader refuses (optimizer.pt: ")
    assert "weights_only" not in result.output and "system" in result.output
    assert not marker.exists()


def test_refused_pickles_outside_a_resume_are_left_alone():
    import pickle

    from contrastive_rlvr.checkpoints import refused_pickles_as_user_error

    with pytest.raises(pickle.UnpicklingError):
        with refused_pickles_as_user_error(None):
            raise pickle.UnpicklingError("not a resume")
    with pytest.raises(UserError, match="safe loader refuses"):
        with refused_pickles_as_user_error("/nonexistent/checkpoint-3"):
            raise pickle.UnpicklingError("during a resume")
