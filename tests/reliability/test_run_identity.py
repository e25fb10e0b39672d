"""One run identity (``run.identity``: the reward's code, a dataset folder's files,
the model's files, beside the config and the dataset file's content) checked on every path
that reuses a run: the same command again, ``--resume``, ``--resume_from_checkpoint`` and
``compare``. Each test changes the input after the run and runs the command again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_utils import cli, one_line
from trainer_utils import forbid_model_loading, save_tiny_model

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.run.folder import (
    CONFIG_FILE,
    save_data_identity,
    save_resolved_config,
)
from contrastive_rlvr.run.identity import model_identity
from contrastive_rlvr.run.preflight import load_dataset_of
from contrastive_rlvr.trainer.parse import parse_config

SUMMARY = {"heldout_avg@n_before": 0.25, "heldout_avg@n_after": 0.5, "eval_n": 1, "steps": 2,
           "wall_seconds": 1.0}  # fmt: skip


@pytest.fixture
def inputs(tmp_path):
    """A tiny model, a dataset file and a reward file; the train arguments over them."""
    save_tiny_model(tmp_path / "model")
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "reward.py").write_text(
        "def r(prompts, completions, **k):\n    return [1.0] * len(completions)\n"
    )
    args = ["--model", str(tmp_path / "model"), "--dataset", str(tmp_path / "d.jsonl"),
            "--rewards", f"{tmp_path / 'reward.py'}:r", "--output_dir", str(tmp_path / "run"),
            "--heldout_size", "1", "--max_steps", "2", "--num_generations", "2",
            "--per_device_train_batch_size", "2"]  # fmt: skip
    return tmp_path, args


def _finished(args: list[str], out: Path) -> None:
    """The files a finished run leaves: its config, data.json (with its identity), summary."""
    cfg = parse_config(None, args)
    out.mkdir(parents=True, exist_ok=True)
    save_resolved_config(cfg, out / CONFIG_FILE)
    save_data_identity(out, cfg, load_dataset_of(cfg).fingerprint)
    (out / "summary.json").write_text(json.dumps(SUMMARY))


def test_the_same_command_after_the_reward_code_changed_is_refused(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "neither path loads a model")
    _finished(args, tmp_path / "run")
    assert cli(["train", *args]).exit_code == 0  # unchanged: reported as finished
    (tmp_path / "reward.py").write_text(
        "def r(prompts, completions, **k):\n    return [0.0] * len(completions)\n"
    )
    result = cli(["train", *args])
    one_line(result, 2, "holds a finished run of these settings, but the code of reward")
    assert "overwrite_output_dir=true" in result.output


def test_the_same_command_after_the_data_changed_is_refused(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "refused before any model loads")
    _finished(args, tmp_path / "run")
    with (tmp_path / "d.jsonl").open("a") as f:
        f.write(json.dumps({"prompt": "9+9=", "answer": "18"}) + "\n")
    one_line(cli(["train", *args]), 2, "dataset=")


def test_a_dataset_folder_is_part_of_the_identity(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "refused before any model loads")
    folder = tmp_path / "data-folder"
    folder.mkdir()
    (tmp_path / "d.jsonl").rename(folder / "train.jsonl")
    args[args.index("--dataset") + 1] = str(folder)
    _finished(args, tmp_path / "run")
    record = json.loads((tmp_path / "run" / "data.json").read_text())
    assert record["identity"]["dataset_folder"]  # folder datasets are recorded now
    (folder / "train.jsonl").write_text((folder / "train.jsonl").read_text().replace("2", "3"))
    one_line(cli(["train", *args]), 2, "the files of the dataset folder changed")


def test_resume_after_the_reward_code_changed_is_refused(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "refused before any model loads")
    _finished(args, tmp_path / "run")
    (tmp_path / "run" / "summary.json").unlink()
    (tmp_path / "reward.py").write_text(
        "def r(prompts, completions, **k):\n    return [0.5] * len(completions)\n"
    )
    one_line(cli(["train", *args, "--resume", "true"]), 2, "the code of reward")


def test_resume_from_another_runs_checkpoint_is_refused(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "refused before any model loads")
    other = tmp_path / "other"
    other_args = [*args[: args.index("--output_dir")], "--output_dir", str(other),
                  *args[args.index("--output_dir") + 2:], "--recipe", "dapo"]  # fmt: skip
    _finished(other_args, other)
    checkpoint = save_tiny_model(other / "checkpoint-1")
    for name in ("optimizer.pt", "scheduler.pt"):
        import torch

        torch.save({}, checkpoint / name)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 1}')
    result = cli(["train", *args, "--resume_from_checkpoint", str(checkpoint)])
    one_line(result, 2, "is of a run made otherwise (")
    assert "recipe: 'dapo' -> 'grpo'" in result.output


def test_resume_from_a_checkpoint_of_another_shape_is_refused_before_the_model(inputs, monkeypatch):
    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "refused before any model loads")
    checkpoint = save_tiny_model(tmp_path / "elsewhere" / "checkpoint-1")
    config = json.loads((checkpoint / "config.json").read_text())
    config["hidden_size"] = config["hidden_size"] * 2
    (checkpoint / "config.json").write_text(json.dumps(config))
    import torch

    for name in ("optimizer.pt", "scheduler.pt"):
        torch.save({}, checkpoint / name)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 1}')
    result = cli(["train", *args, "--resume_from_checkpoint", str(checkpoint)])
    one_line(result, 2, "holds weights of another shape than model=")


def test_compare_does_not_reuse_runs_after_the_reward_code_changed(tmp_path, monkeypatch):
    import contrastive_rlvr.run.command as run_module

    calls = []

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        calls.append(cfg.seed)
        save_resolved_config(cfg, out / CONFIG_FILE)
        save_data_identity(out, cfg, load_dataset_of(cfg).fingerprint)
        (out / "summary.json").write_text(json.dumps(SUMMARY))

    monkeypatch.setattr(run_module, "train", fake_train)
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(6)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    reward = tmp_path / "reward.py"
    reward.write_text("def r(prompts, completions, **k):\n    return [1.0] * len(completions)\n")
    over = ["--model", str(tmp_path / "m"), "--dataset", str(tmp_path / "d.jsonl"),
            "--rewards", f"{reward}:r"]  # fmt: skip
    spec = cmp.make_spec(recipes="grpo", arms="plain", seeds="0", output_dir=tmp_path / "c",
                         overrides=over)  # fmt: skip
    cmp.run_compare(spec, echo=lambda _: None)
    cmp.run_compare(spec, echo=lambda _: None)  # unchanged: reused
    assert calls == [0]
    reward.write_text("def r(prompts, completions, **k):\n    return [0.0] * len(completions)\n")
    with pytest.raises(ValueError, match="the code of reward"):
        cmp.run_compare(spec, echo=lambda _: None)
    assert calls == [0]


def test_the_same_command_after_the_model_was_retrained_in_place_is_refused(inputs, monkeypatch):
    # A model folder retrained in place keeps its file names and sizes: the sampled
    # content of its weights tells it apart.
    from safetensors.torch import load_file, save_file

    tmp_path, args = inputs
    forbid_model_loading(monkeypatch, "neither path loads a model")
    _finished(args, tmp_path / "run")
    weights = next((tmp_path / "model").glob("*.safetensors"))
    size = weights.stat().st_size
    tensors = load_file(weights)
    save_file({k: v + 0.01 for k, v in tensors.items()}, weights, metadata={"format": "pt"})
    assert weights.stat().st_size == size
    result = cli(["train", *args])
    one_line(result, 2, "but the model's files changed (weights_sampled differ)")


def test_a_run_recorded_before_the_weights_were_sampled_is_compared_on_what_it_kept(tmp_path):
    from contrastive_rlvr.run.identity import identity_differences

    save_tiny_model(tmp_path / "model")
    now = {"rewards": {}, "model": model_identity(str(tmp_path / "model"))}
    old = {"rewards": {}, "model": {k: v for k, v in now["model"].items()
                                    if k != "weights_sampled"}}  # fmt: skip
    assert identity_differences(old, now) is None
    old["model"]["weights"] = {name: size + 1 for name, size in old["model"]["weights"].items()}
    assert identity_differences(old, now) == "the model's files changed (weights differ)"


def test_the_sampled_hash_reads_the_head_and_64_evenly_spaced_regions(tmp_path):
    # A 9 MiB file (9216 KiB): the head is [0, 1024) KiB; region i of 64 KiB starts at
    # 1024 + 8128 * i / 63 KiB (8128 = 9216 - 1024 - 64), i.e. every 129.02 KiB: region 0
    # is [1024, 1088), region 1 starts at 1153.0, region 31 is [5023.5, 5087.5), region 63
    # is [9152, 9216), the file's end. A byte at 1124 KiB or at 5120 KiB lies in a gap.
    from contrastive_rlvr.run import identity as ri

    path = tmp_path / "w.safetensors"
    data = bytearray(9 << 20)
    path.write_bytes(data)
    base = ri.sampled_sha256(path)
    kib = 1 << 10
    cases = [(1124 * kib, False), (5120 * kib, False), (100, True), (1030 * kib, True),
             (5040 * kib, True), (9216 * kib - 1, True)]  # fmt: skip
    for offset, read in cases:
        changed = bytearray(data)
        changed[offset] = 1
        path.write_bytes(changed)
        assert (ri.sampled_sha256(path) != base) is read, offset
    # a file no longer than what is sampled is hashed whole
    small = tmp_path / "s.bin"
    small.write_bytes(b"ab")
    import hashlib

    assert ri.sampled_sha256(small) == hashlib.sha256(b"ab" + b"2").hexdigest()
