"""One reading of answers for train and eval (prose answers read by default), and one
set of defaults for a user's model (a warm-up that fits a short run, BiCC's mix as the
embedded default's), printed at the start."""

from __future__ import annotations

from pathlib import Path

import pytest
from trainer_utils import save_tiny_model
from typer.testing import CliRunner

from contrastive_rlvr.cli import app
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.evaluation import EvalConfig
from contrastive_rlvr.rewards import READING_FIELDS, AnswerReading, MathVerifyReward
from contrastive_rlvr.run.heldout import heldout_reward_index
from contrastive_rlvr.run.preflight import preflight
from contrastive_rlvr.run.summary import settings_line
from contrastive_rlvr.trainer.learning_signal import warmup_problem
from contrastive_rlvr.trainer.parse import parse_config

GSM8K_TINY = Path(__file__).parents[1] / "fixtures" / "gsm8k_tiny.jsonl"
PROSE = "Tom has 2 + 5 = 7 apples. So, the final answer is 7."


def test_a_prose_answer_is_read_by_default():
    with MathVerifyReward(workers=1) as reward:
        assert reward.extract(PROSE) == "7"
        assert reward(completions=[PROSE, "So, the final answer is 8."], answer=["7", "7"]) \
            == [1.0, 0.0]  # fmt: skip
    assert MathVerifyReward(answer_phrase=False).extract(PROSE) is None


def test_train_and_eval_read_answers_with_the_same_options_and_defaults():
    train_config = parse_config(None, ["--model", "m", "--dataset", "d.jsonl"])
    eval_config = EvalConfig(model="m")
    reward = MathVerifyReward()
    assert READING_FIELDS == ("answer_line", "answer_phrase", "last_number_fallback")
    for name in READING_FIELDS:
        default = getattr(AnswerReading(), name)
        assert getattr(train_config, name) == default, name
        assert getattr(eval_config, name) == default, name
        assert reward.reading_options()[name] == default, name


def _preflight_args(tmp_path, *extra):
    model = save_tiny_model(tmp_path / "model")
    return ["--model", str(model), "--dataset", str(GSM8K_TINY), "--heldout_size", "2",
            "--num_generations", "4", "--per_device_train_batch_size", "8",
            "--output_dir", str(tmp_path / "out"), *extra]  # fmt: skip


def test_train_takes_the_reading_options_eval_takes(tmp_path):
    args = _preflight_args(tmp_path, "--last_number_fallback", "true", "--answer_phrase",
                           "false")  # fmt: skip
    checked = preflight(parse_config(None, args))
    assert checked.rewards[0].reading_options() == {
        "answer_line": True, "answer_phrase": False, "last_number_fallback": True,
    }  # fmt: skip
    assert checked.rewards[0].extract("3 apples and 4 pears") == "4"


def test_a_reading_option_no_reward_reads_is_refused(tmp_path):
    args = _preflight_args(tmp_path, "--rewards", "format", "--last_number_fallback", "true")
    with pytest.raises(UserError, match="last_number_fallback=True set, but rewards=.*"
                       "has no math_verify"):  # fmt: skip
        preflight(parse_config(None, args))
    with pytest.raises(UserError, match="last_number_fallback"):  # the embedded task's own
        parse_config(None, ["--last_number_fallback", "true"])


@pytest.mark.parametrize(
    ("flags", "expected"),
    [([], True), (["--no-answer-phrase"], False), (["--no_answer_phrase"], False)],
)
def test_eval_cli_takes_the_answer_phrase_option(tmp_path, monkeypatch, flags, expected):
    import contrastive_rlvr.evaluation as evaluation

    configs = []
    monkeypatch.setattr(evaluation, "evaluate", configs.append)
    args = ["eval", "--model", "m", "--benchmarks", "gsm8k", "--n", "1", *flags]
    result = CliRunner().invoke(app, [*args, "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert [c.answer_phrase for c in configs] == [expected]


def test_heldout_reward_is_an_option_and_never_a_format_reward_by_default():
    def config(*rewards, chosen=None):
        extra = ["--heldout_reward", chosen] if chosen else []
        return parse_config(None, ["--model", "m", "--dataset", "d.jsonl", "--rewards",
                                   *rewards, *extra])  # fmt: skip

    assert heldout_reward_index(config("math_verify")) == 0
    assert heldout_reward_index(config("format", "math_verify")) == 1
    assert heldout_reward_index(config("format", "my.py:fn", "math_verify")) == 2
    assert heldout_reward_index(config("format", "my.py:fn")) == 1
    assert heldout_reward_index(config("format", "math_verify", chosen="format")) == 0
    with pytest.raises(UserError, match="heldout_reward='other' is invalid"):
        config("math_verify", chosen="other")


# -- one set of defaults ----------------------------------------------------------------


def test_every_entry_point_runs_the_same_bicc_default():
    from contrastive_rlvr.trainer import RLVRConfig

    embedded = parse_config(None, ["--bicc", "true"])
    user_model = parse_config(None, ["--model", "m", "--dataset", "d.jsonl", "--bicc", "true"])
    root = Path(__file__).resolve().parents[2]
    recipe = parse_config(
        str(root / "recipes" / "trl" / "grpo_bicc_rcc.yaml"),
        ["--bf16", "false", "--use_vllm", "false"],
    )
    python = RLVRConfig(output_dir="x", bicc=True, use_cpu=True)
    for cfg in (embedded, user_model, recipe, python):
        assert (cfg.bicc_form, cfg.bicc_distill_weight, cfg.bicc_mix) == ("distill", 0.1, 1.0)


@pytest.mark.parametrize(("max_steps", "warmup"), [(2, 1), (20, 1), (60, 2), (3000, 100)])
def test_a_users_model_warms_up_for_a_share_of_its_run(max_steps, warmup):
    config = parse_config(None, ["--model", "m", "--dataset", "d.jsonl",
                                 "--max_steps", str(max_steps)])  # fmt: skip
    # 0.0333 of the run, rounded up: the paper's 100 of 3000, 1 step in a short run.
    assert config.get_warmup_steps(max_steps) == warmup
    assert warmup_problem(config, max_steps) is None


def test_the_settings_a_short_run_depends_on_are_printed_at_the_start(tmp_path, monkeypatch):
    import contrastive_rlvr.run as run

    monkeypatch.setattr(run, "train", lambda cfg: (_ for _ in ()).throw(SystemExit(0)))
    args = ["train", "--model", "m", "--dataset", "d.jsonl", "--bicc", "true",
            "--max_steps", "2", "--output_dir", str(tmp_path / "out")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert "base configuration: " in result.output and "paper.yaml" in result.output
    line = next(x for x in result.output.splitlines() if x.startswith("settings: "))
    assert "warm-up 1 of 2 steps (warmup_steps 0.0333)" in line
    assert "bicc on (bicc_form distill: weight 0.1, rows wrong, teacher sampling)" in line
    assert "math_verify reads <answer>...</answer>, \\boxed{...}, an 'Answer: X' line or " \
        "'the answer is X' in prose" in line  # fmt: skip
    assert "held-out reward math_verify" in line
    config = parse_config(None, args[1:])
    assert settings_line(config) == line.removeprefix("settings: ")


def test_the_held_out_reward_and_the_no_signal_policy_do_not_block_a_resume():
    from contrastive_rlvr.run.config_compare import config_differences

    base = ["--model", "m", "--dataset", "d.jsonl", "--rewards", "format", "math_verify"]
    saved = parse_config(None, base).to_dict()
    now = parse_config(None, [*base, "--no_learning_signal", "error",
                              "--heldout_reward", "format"]).to_dict()  # fmt: skip
    assert config_differences(saved, now) == []
    changed = parse_config(None, [*base, "--answer_phrase", "false"]).to_dict()
    assert config_differences(saved, changed) == ["answer_phrase: True -> False"]
