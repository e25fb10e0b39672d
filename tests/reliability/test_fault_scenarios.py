"""Reliability, round two: nothing reported as success that is not, one writer per folder,
resume exact past an epoch, early one-line errors. Each test makes the fault happen."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_utils import cli, one_line
from safetensors.torch import load_file
from trainer_utils import save_tiny_model

from contrastive_rlvr import compare as cmp
from contrastive_rlvr.errors import NonFiniteRewardError, RewardExitError, UserError
from contrastive_rlvr.evaluation import EvalConfig
from contrastive_rlvr.input_checks import check_output_dir
from contrastive_rlvr.run.command import train
from contrastive_rlvr.run.embedded_inputs import warm_start_problems
from contrastive_rlvr.run.folder import (
    CONFIG_FILE,
    holds_run,
    save_resolved_config,
)
from contrastive_rlvr.run.folder_lock import OutputDirLock
from contrastive_rlvr.run.output_plan import plan_output_dir
from contrastive_rlvr.run_files import claim
from contrastive_rlvr.trainer.callbacks import MetricsJsonl, _shown
from contrastive_rlvr.trainer.parse import parse_config
from contrastive_rlvr.trainer.reward_guards import GuardedReward

# ---------------------------------------------------------------------- compare


@pytest.fixture
def fake_runs(monkeypatch):
    """train() stand-in writing what a real run writes: its config.yaml and summary; a run
    with learning_rate 1e39 writes an errored summary and raises, as the real one does."""
    import contrastive_rlvr.run.command as run_module
    from contrastive_rlvr.errors import AllUpdatesSkipped

    calls = []

    def fake_inputs(cfg, directory):
        (Path(directory) / "sft-model").mkdir(parents=True, exist_ok=True)
        (Path(directory) / "sft-model" / "config.json").write_text("{}")

    def fake_train(cfg, progress=True):
        out = Path(cfg.output_dir)
        calls.append((cfg.seed, cfg.learning_rate))
        save_resolved_config(cfg, out / CONFIG_FILE)
        summary = {"heldout_avg@n_before": 0.5, "heldout_avg@n_after": 0.75, "eval_n": 1}
        if cfg.learning_rate > 1e30:
            summary["error"] = "every one of the 2 optimizer steps was skipped"
        (out / "summary.json").write_text(json.dumps(summary))
        if "error" in summary:
            raise AllUpdatesSkipped(summary["error"])

    monkeypatch.setattr(run_module, "load_run_inputs", fake_inputs)
    monkeypatch.setattr(run_module, "train", fake_train)
    return calls


def _spec(out, seeds="0", *over):
    return cmp.make_spec(recipes="grpo", arms="plain", seeds=seeds, output_dir=out,
                         overrides=["--max_steps", "2", *over])  # fmt: skip


def test_compare_counts_an_errored_summary_as_failed_also_on_rerun(tmp_path, fake_runs):
    spec = _spec(tmp_path, "0", "--learning_rate", "1e39")
    for attempt in range(2):  # the rerun used to skip the run and report it as a seed
        report = cmp.run_compare(spec, echo=lambda _: None)
        assert [f["seed"] for f in report["failed"]] == [0], attempt
        assert report["rows"][0]["seeds"] == []
    assert len(fake_runs) == 2  # tried again like any failed run, never counted


def test_compare_refuses_a_folder_made_with_other_settings(tmp_path, fake_runs):
    report = cmp.run_compare(_spec(tmp_path, "0", "--learning_rate", "1e-4"), echo=print)
    assert report["rows"][0]["seeds"] == [0]
    with pytest.raises(ValueError, match=r"other settings: grpo/plain/seed0 \(learning_rate"):
        cmp.run_compare(_spec(tmp_path, "0,1", "--learning_rate", "1e-3"), echo=print)
    assert fake_runs == [(0, 1e-4)]  # nothing ran with the new settings
    # more seeds with the same settings: the finished seed is kept, both share one key
    report = cmp.run_compare(_spec(tmp_path, "0,1", "--learning_rate", "1e-4"), echo=print)
    assert fake_runs == [(0, 1e-4), (1, 1e-4)]
    per_seed = report["rows"][0]["per_seed"]
    assert per_seed["0"]["config_sha256"] == per_seed["1"]["config_sha256"] != ""
    assert per_seed["0"]["config"].endswith("grpo/plain/seed0/config.yaml")


def test_compare_reruns_a_failed_attempt_made_with_other_settings(tmp_path, fake_runs):
    cmp.run_compare(_spec(tmp_path, "0", "--learning_rate", "1e39"), echo=print)
    report = cmp.run_compare(_spec(tmp_path, "0", "--learning_rate", "1e-4"), echo=print)
    assert report["failed"] == [] and report["rows"][0]["seeds"] == [0]


# ---------------------------------------------------------------------- config and eval values


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon_high", "-5"], "epsilon_high=-5.0"),
        (["--epsilon", "-1"], "epsilon=-1.0"),
        (["--epsilon_high", "nan"], "epsilon_high=nan"),
        (["--num_iterations", "0"], "num_iterations=0"),
    ],
)
def test_clip_and_iteration_values_refused_when_the_config_is_built(args, message):
    with pytest.raises(ValueError, match=message):
        parse_config(None, args)


@pytest.mark.parametrize("temperature", [math.nan, math.inf])
def test_eval_refuses_a_non_finite_temperature(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        EvalConfig(model="x", benchmarks=["gsm8k"], temperature=temperature)


def test_empty_output_dir_refused():
    with pytest.raises(UserError, match="output_dir='' is empty"):
        check_output_dir("")


# ---------------------------------------------------------------------- rewards


def test_each_reward_function_gets_its_own_copy_of_the_inputs():
    def vandal(prompts, completions, answer, **kwargs):
        completions[0] = "\\boxed{7}"  # edits its input in place
        answer[0] = "7"
        return [0.0] * len(completions)

    seen = []

    def judge(prompts, completions, answer, **kwargs):
        seen.append((list(completions), list(answer)))
        return [float(c == "\\boxed{7}") for c in completions]

    completions, answer = ["no answer", "still none"], ["7", "7"]
    first, second = GuardedReward(vandal, "vandal"), GuardedReward(judge, "judge")
    first(["p", "p"], completions, answer=answer)
    assert second(["p", "p"], completions, answer=answer) == [0.0, 0.0]
    assert seen == [(["no answer", "still none"], ["7", "7"])]


def test_reward_calling_sys_exit_is_an_error_naming_it():
    def quits(prompts, completions, **kwargs):
        sys.exit(0)

    with pytest.raises(RewardExitError, match=r"'quits' called sys.exit\(0\)"):
        GuardedReward(quits, "quits")(["p"], ["c"])


@pytest.mark.parametrize(
    ("value", "message"),
    [(10**400, "an integer of 401 digits"), (1e39, "beyond the float32 range")],
)
def test_huge_rewards_are_one_line_errors_with_the_true_value(value, message):
    def huge(prompts, completions, **kwargs):
        return [value] * len(completions)

    with pytest.raises(NonFiniteRewardError, match=message) as info:
        GuardedReward(huge, "huge")(["p"], ["c"])
    if value == 1e39:  # finite: not reported as non-finite inf
        assert "returned 1e+39" in str(info.value)


def test_progress_bar_shows_a_step_without_rewards():
    # TRL logs None for the reward of a step whose every reward function returned None
    assert _shown(None) == "-" and _shown(0.25) == "0.250"


# ---------------------------------------------------------------------- the output folder


LOCK_HOLDER = """
import sys, time
from contrastive_rlvr.run.folder_lock import OutputDirLock
with OutputDirLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


def test_one_writer_per_folder_and_a_killed_writer_frees_it(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(out)],
                              stdout=subprocess.PIPE, env=env)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == b"locked"
        with pytest.raises(UserError, match=r"in use by another run \(a live process"):
            with OutputDirLock(out):
                pass
        # train() takes the lock before it looks at the folder or loads anything
        with pytest.raises(UserError, match="in use by another run"):
            train(parse_config(None, ["--output_dir", str(out), "--max_steps", "1"]))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    finally:
        holder.kill()
    with OutputDirLock(out):  # free again: no stale lock after kill -9
        assert sorted(out.iterdir()) == []  # and the lock wrote nothing


def test_resume_refuses_a_deleted_or_corrupt_config_yaml(tmp_path):
    cfg = parse_config(None, ["--output_dir", str(tmp_path), "--resume", "true"])
    (tmp_path / "checkpoint-2").mkdir()
    with pytest.raises(UserError, match="config.yaml is missing"):
        plan_output_dir(cfg, tmp_path)
    (tmp_path / CONFIG_FILE).write_text("recipe: grpo\n  bad: [\n")
    with pytest.raises(UserError, match=r"config.yaml does not parse"):
        plan_output_dir(cfg, tmp_path)


def test_the_users_own_config_yaml_is_never_replaced(tmp_path):
    own = tmp_path / CONFIG_FILE
    own.write_text("max_steps: 2\n")
    cfg = parse_config(None, ["--output_dir", str(tmp_path), "--overwrite_output_dir", "true"])
    with pytest.raises(UserError, match="config.yaml that no run wrote"):
        plan_output_dir(cfg, tmp_path)
    assert own.read_text() == "max_steps: 2\n"


def test_a_failed_start_does_not_block_the_rerun(tmp_path):
    # A start stopped before its first step (Ctrl-C in the warm start) leaves config.yaml.
    cfg = parse_config(None, ["--output_dir", str(tmp_path)])
    save_resolved_config(cfg, tmp_path / CONFIG_FILE)
    assert holds_run(tmp_path) == []
    assert plan_output_dir(cfg, tmp_path) == (None, None)


def test_torn_last_line_of_metrics_is_dropped_and_named(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.7}\n{"step": 3, "rew')
    claim(path)  # a run's own log (run_files records the files the project wrote)
    args = type("A", (), {"should_save": True})()
    state = type("S", (), {"global_step": 2})()
    MetricsJsonl(tmp_path).on_train_begin(args, state, None)
    assert path.read_text() == '{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 0.7}\n'
    assert str(path) in caplog.text and "torn last line 3" in caplog.text
    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')  # not a torn write: refused
    with pytest.raises(UserError, match="line 2 is not JSON"):
        MetricsJsonl(tmp_path).on_train_begin(args, state, None)


def test_weights_only_checkpoints_get_advice_that_keeps_them(tmp_path):
    ckpt = save_tiny_model(tmp_path / "checkpoint-2")
    (ckpt / "trainer_state.json").write_text('{"global_step": 2}')
    cfg = parse_config(None, ["--output_dir", str(tmp_path), "--resume", "true"])
    save_resolved_config(cfg, tmp_path / CONFIG_FILE)
    with pytest.raises(UserError, match="save_only_model=true") as info:
        plan_output_dir(cfg, tmp_path)
    assert f"--model {ckpt}" in str(info.value)
    assert "would delete these weights" in str(info.value)


def test_a_half_written_warm_start_is_rebuilt(tmp_path):
    from contrastive_rlvr.run.command import load_run_inputs

    cfg = parse_config(None, ["--output_dir", str(tmp_path), "--embedded_sft_steps", "2"])
    load_run_inputs(cfg, tmp_path)
    weights = tmp_path / "sft-model" / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])  # a disk that filled up mid-save
    assert warm_start_problems(tmp_path / "sft-model")
    load_run_inputs(cfg, tmp_path)  # used to reuse it (and fail to load it)
    assert warm_start_problems(tmp_path / "sft-model") == []
    assert weights.read_bytes() == whole  # same seed, same settings: the same warm start


# ---------------------------------------------------------------------- resume past an epoch


REWARD_SRC = "def parity(prompts, completions, **kwargs):\n" \
             "    return [float(len(c) % 2) for c in completions]\n"  # fmt: skip


def _epoch_args(root: Path, out: Path, *extra: str) -> list[str]:
    # 5 rows, 1 held out: 4 training prompts, one per step, so 4 steps an epoch.
    return [
        "--model", str(root / "model"), "--dataset", str(root / "data.jsonl"),
        "--rewards", f"{root / 'reward.py'}:parity", "--heldout_size", "1",
        "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "6",
        "--learning_rate", "1e-2", "--save_steps", "1", "--save_total_limit", "20",
        "--eval_n", "1", "--eval_limit", "1",
        "--diagnostics_every", "0", "--deltas_every", "0", "--beta", "0",
        "--output_dir", str(out), *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def epoch_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("epochs")
    save_tiny_model(root / "model")
    rows = [{"problem": f"{i}+{i}=", "answer": str(2 * i)} for i in range(5)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "reward.py").write_text(REWARD_SRC)
    torch.set_num_threads(1)
    train(parse_config(None, _epoch_args(root, root / "straight", "--max_steps", "9")),
          progress=False)  # fmt: skip
    return root


@pytest.mark.parametrize("resume_at", [4, 6])  # the start of epoch 2; inside epoch 2
def test_resume_past_an_epoch_ends_bit_for_bit_where_the_straight_run_does(
    epoch_root, tmp_path, resume_at
):
    straight = epoch_root / "straight"
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copytree(straight / f"checkpoint-{resume_at}", out / f"checkpoint-{resume_at}")
    shutil.copyfile(straight / CONFIG_FILE, out / CONFIG_FILE)
    summary = train(
        parse_config(None, _epoch_args(epoch_root, out, "--max_steps", "9", "--resume", "true")),
        progress=False,
    )
    assert summary["steps"] == 9
    want = load_file(straight / "checkpoint-9" / "model.safetensors")
    got = load_file(out / "checkpoint-9" / "model.safetensors")
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)  # bit for bit, past two epochs


def test_a_finished_run_is_extended_when_the_override_says_so(epoch_root, tmp_path):
    out = tmp_path / "short"
    train(parse_config(None, _epoch_args(epoch_root, out, "--max_steps", "2")), progress=False)
    extra = ("--max_steps", "3", "--resume", "true", "--resume_allow_config_change", "true")
    summary = train(parse_config(None, _epoch_args(epoch_root, out, *extra)), progress=False)
    assert summary["steps"] == 3
    assert (out / "summary.before-resume.json").exists()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


# ---------------------------------------------------------------------- early one-line errors


def _no_model(*args, **kwargs):
    raise AssertionError("a model was loaded before the input was checked")


@pytest.fixture
def guarded(monkeypatch):
    import contrastive_rlvr.models as models
    import contrastive_rlvr.run.command as run_module

    monkeypatch.setattr(run_module, "load_run_inputs", _no_model)
    monkeypatch.setattr(models, "load_model_and_tokenizer", _no_model)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_steps: 2\n  bad: [\n", "is not valid YAML"),
        # a TypeError traceback from the range check before
        ("max_steps: 2\nbeta: [0.1]\n", "beta=[0.1] is a list, not a float or null"),
        ("max_steps: 2\nmax_steps: 3\n", "'max_steps' is given twice (lines 1 and 2)"),
    ],
)
def test_yaml_mistakes_are_one_line_before_any_model(text, message, tmp_path, guarded):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    one_line(cli(["train", "--config", str(config)]), 2, message)


def test_a_yaml_of_only_max_steps_builds_its_warm_start(tmp_path, monkeypatch):
    # No reading warm start asked for: its context budget is not computed (it was 0 here,
    # and WarmStartConfig refused it before anything was built).
    import contrastive_rlvr.embedded as embedded
    from contrastive_rlvr.run.command import load_run_inputs

    config = tmp_path / "c.yaml"
    # A YAML of TRL fields alone must name its model (issue 18): the embedded one here.
    config.write_text("model: embedded\nmax_steps: 2\n")
    seen = []

    def stop(out, settings, sft_steps):
        seen.append(settings.sft.context_budget)
        raise KeyboardInterrupt

    monkeypatch.setattr(embedded, "build_embedded_default", stop)
    cfg = parse_config(config, ["--output_dir", str(tmp_path / "o")])
    with pytest.raises(KeyboardInterrupt):
        load_run_inputs(cfg, tmp_path / "o")
    assert seen == [None]


@pytest.fixture(scope="module")
def custom(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("custom")
    rows = [{"problem": f"{i}+{i}=", "answer": str(2 * i)} for i in range(5)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rows[3]["problem"] = "1+" * 400 + "1="  # 802 characters: more than the model's positions
    (root / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "reward.py").write_text(REWARD_SRC)
    save_tiny_model(root / "model")
    return {"root": root, "model": root / "model"}


def _custom_args(custom, *extra: str) -> list[str]:
    root = custom["root"]
    return [
        "train", "--model", str(custom["model"]), "--dataset", str(root / "data.jsonl"),
        "--rewards", f"{root / 'reward.py'}:parity", "--heldout_size", "1",
        "--num_generations", "4", "--per_device_train_batch_size", "4",
        "--gradient_accumulation_steps", "1", "--max_completion_length", "6", *extra,
    ]  # fmt: skip


def test_too_few_rows_for_one_step_refused_before_the_model(custom, guarded, tmp_path):
    # 4 training rows, 8 distinct prompts per generation batch (32 rows / 4): 0 steps.
    args = _custom_args(
        custom, "--per_device_train_batch_size", "32", "--output_dir", str(tmp_path)
    )
    one_line(cli(args), 2, "fewer than the 8 distinct prompts one generation batch needs")


def test_report_to_a_missing_integration_refused_before_the_model(custom, guarded, tmp_path):
    args = _custom_args(custom, "--report_to", "wandb", "--output_dir", str(tmp_path))
    one_line(cli(args), 2, "wandb is not installed")


def test_prompts_longer_than_the_models_positions_refused(custom, tmp_path):
    root = custom["root"]
    args = _custom_args(
        custom, "--dataset", str(root / "long.jsonl"), "--output_dir", str(tmp_path)
    )
    one_line(cli(args), 2, "needs more than the model's")


def test_eval_of_truncated_weights_is_one_line_before_loading(custom, guarded, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(custom["model"], model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    args = ["eval", "--model", str(model), "--benchmarks", "gsm8k", "--n", "1", "--limit", "1"]
    one_line(cli([*args, "--output-dir", str(tmp_path / "e")]), 2, "its weights are not whole")


def _subprocess_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1",
            **extra}  # fmt: skip


def test_unreachable_hub_id_refused_before_the_model(custom, tmp_path):
    # A closed port stands for a Hub that cannot be reached.
    root = custom["root"]
    args = _custom_args(custom, "--model", "some-org/not-cached-model", "--output_dir",
                        str(tmp_path / "o"))  # fmt: skip
    env = _subprocess_env(HF_HUB_OFFLINE="0", HF_ENDPOINT="http://127.0.0.1:9",
                          HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DISABLE_TELEMETRY="1")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "contrastive_rlvr.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=root)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "the Hub cannot give it" in done.stderr and "Traceback" not in done.stderr


DISK_FULL = """
import resource, signal, sys
from contrastive_rlvr.cli import app
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
sys.argv = ["contrastive-rlvr", "train", "--output_dir", sys.argv[1], "--embedded_sft_steps", "1"]
app()
"""


def test_disk_full_during_a_save_is_said(tmp_path):
    # A 64 KiB file-size limit: the warm start's weights cannot be written whole.
    cmd = [sys.executable, "-c", DISK_FULL, str(tmp_path / "o")]
    done = subprocess.run(cmd, env=_subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "error: disk full" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "o" / "sft-model").exists()  # nothing half-written left in place


# ---------------------------------------------------------------------- eval into one folder


def _eval_config(model: Path, out: Path, limit: int) -> EvalConfig:
    # GSM8K ships with the package: no benchmarks folder needed.
    return EvalConfig(model=str(model), benchmarks=["gsm8k"], n=1, limit=limit,
                      max_new_tokens=4, batch_size=2, output_dir=str(out),
                      reward_workers=1, progress=False)  # fmt: skip


@pytest.fixture
def batch_dependent_generation(monkeypatch):
    """HF draws a whole batch from one seed: a sample depends on its batch. This stand-in
    makes that visible: each completion names the size of the batch it was drawn in."""
    from contrastive_rlvr.generation import HFGenerator

    def generate(self, prompts, seed):
        return [f"batch of {len(prompts)}, seed {seed}" for _ in prompts]

    monkeypatch.setattr(HFGenerator, "generate", generate)


def _samples(out: Path) -> list[str]:
    rows = (out / "samples" / "gsm8k.jsonl").read_text().splitlines()
    return [json.loads(r)["completion"] for r in rows]


def test_eval_limit_raised_in_one_folder_equals_a_fresh_eval(
    custom, tmp_path, batch_dependent_generation
):
    from contrastive_rlvr.evaluation import evaluate

    evaluate(_eval_config(custom["model"], tmp_path / "one", 3))  # batches [0, 1], [2]
    evaluate(_eval_config(custom["model"], tmp_path / "one", 4))  # batches [0, 1], [2, 3]
    evaluate(_eval_config(custom["model"], tmp_path / "fresh", 4))
    assert _samples(tmp_path / "one") == _samples(tmp_path / "fresh")
    assert _samples(tmp_path / "one")[2] == "batch of 2, seed 0"  # not the cached batch of 1


def test_eval_of_another_model_into_the_same_folder_refused(
    custom, tmp_path, batch_dependent_generation
):
    from contrastive_rlvr.evaluation import evaluate

    other = shutil.copytree(custom["model"], tmp_path / "other-model")
    evaluate(_eval_config(custom["model"], tmp_path / "e", 2))
    before = (tmp_path / "e" / "results.json").read_text()
    with pytest.raises(ValueError, match="holds the evaluation of model="):
        evaluate(_eval_config(other, tmp_path / "e", 2))
    assert (tmp_path / "e" / "results.json").read_text() == before


# ---------------------------------------------------------------------- compare and SIGTERM

SIGTERM_ARGS = [
    "--recipes", "grpo", "--arms", "plain,rcc", "--seeds", "0", "--max_steps", "40",
    "--embedded_sft_steps", "20", "--eval_n", "1", "--eval_limit", "2", "--save_steps", "2",
    "--diagnostics_every", "0", "--deltas_every", "0", "--jobs", "2",
]  # fmt: skip


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting for its (gone) parent counts as ended
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


@pytest.mark.slow
def test_sigterm_to_compare_stops_its_children(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "contrastive_rlvr.cli", "compare", "--out", str(out)]
    proc = subprocess.Popen([*cmd, *SIGTERM_ARGS], env=_subprocess_env(HF_HUB_OFFLINE="1"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    files = [out / "grpo" / arm / "seed0" / "metrics.jsonl" for arm in ("plain", "rcc")]
    while not all(f.exists() and f.read_text().count("\n") >= 2 for f in files):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        time.sleep(0.5)
    children = [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
        and _parent(int(p.name)) == proc.pid
    ]  # fmt: skip
    assert len(children) == 2
    proc.send_signal(signal.SIGTERM)  # what `kill` and job schedulers send
    output = proc.communicate(timeout=600)[0].decode()
    assert proc.returncode == 130, output[-3000:]
    assert not any(_alive(pid) for pid in children)  # none left running, reparented
    report = json.loads((out / "results.json").read_text())
    assert sorted(i["arm"] for i in report["interrupted"]) == ["plain", "rcc"]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_a_run_whose_rewards_are_all_none_fails_with_one_line(custom, tmp_path):
    # It crashed in the progress bar (None formatted as a number); a run that scored
    # nothing must not end as a success either.
    reward = tmp_path / "none.py"
    reward.write_text(
        "def nothing(prompts, completions, **kwargs):\n    return [None] * len(completions)\n"
    )
    args = _custom_args(custom, "--rewards", f"{reward}:nothing", "--max_steps", "2")
    args += ["--eval_n", "1", "--eval_limit", "1", "--output_dir", str(tmp_path / "o")]
    one_line(cli(args), 1, "no completion of the 2 steps was scored")
    assert "error" in json.loads((tmp_path / "o" / "summary.json").read_text())
