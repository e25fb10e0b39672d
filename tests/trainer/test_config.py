"""The training config: validation before any model loads, YAML + command-line overrides."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from contrastive_rlvr.trainer import RLVRConfig
from contrastive_rlvr.trainer.parse import default_config_path, load_yaml, parse_config


def config(**kw) -> RLVRConfig:
    return RLVRConfig(output_dir="/tmp/unused", report_to="none", **kw)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"recipe": "ppo"}, "recipe"),
        ({"bicc_context_ratio": 0.0}, "bicc_context_ratio"),
        ({"bicc_context_ratio": 1.0}, "bicc_context_ratio"),
        ({"bicc_ratio_mode": "other"}, "bicc_ratio_mode"),
        ({"num_generations": 1, "bicc": True}, "num_generations"),
        ({"num_generations": 1, "recipe": "conspo"}, "num_generations"),
        ({"clip_low": -0.1}, "clip_low"),
        ({"beta": -1.0}, "beta"),
        ({"rcc_delta": "max"}, "rcc_delta"),
        ({"rcc_reference": "old"}, "rcc_reference"),
        ({"conspo_tau": 0.0}, "conspo_tau"),
        ({"loss_agg": "sum"}, "loss_agg"),
        ({"bicc_truncation": "random"}, "bicc_truncation"),
        # ConSPO needs whole groups per micro-batch: 4 rows of a group of 8 cannot be.
        (
            {
                "recipe": "conspo",
                "num_generations": 8,
                "per_device_train_batch_size": 4,
                "gradient_accumulation_steps": 2,
            },
            "per_device_train_batch_size",
        ),
    ],
)
def test_invalid_values_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        config(**kwargs)


def test_recipe_defaults_resolve():
    # beta: TRL's 0.0 unless set; null takes the recipe's paper value
    assert config(recipe="grpo").beta == 0.0
    assert config(recipe="grpo", beta=None).beta == 0.04
    assert config(recipe="dr_grpo", beta=None).beta == 0.01
    dapo = config(recipe="dapo", max_completion_length=20)
    assert dapo.beta == 0.0 and dapo.dynamic_sampling and dapo.overlong_punishment
    assert dapo.overlong_cache_len == 5  # a quarter of max_completion_length
    assert config(recipe="dapo", beta=0.1).beta == 0.1  # an explicit value wins


def test_embedded_yaml_and_overrides(tmp_path):
    cfg = parse_config(None, ["--recipe", "dapo", "--bicc", "false", "--output_dir", str(tmp_path)])
    embedded = yaml.safe_load(default_config_path().read_text())
    assert cfg.recipe == "dapo" and cfg.bicc is False and cfg.output_dir == str(tmp_path)
    assert cfg.rcc is embedded["rcc"] is True  # untouched fields come from the YAML
    assert cfg.num_generations == embedded["num_generations"]


def test_yaml_unknown_key_and_bad_value(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("recipe: grpo\nbicc_ratio: 0.4\n")
    with pytest.raises(ValueError, match="bicc_ratio"):
        load_yaml(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        f"model: embedded\noutput_dir: {tmp_path}\nbicc_context_ratio: 2.0\nreport_to: none\n"
    )
    with pytest.raises(ValueError, match="bicc_context_ratio"):
        parse_config(wrong, [])
    with pytest.raises(ValueError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")


def test_cli_lists_the_fields():
    from typer.testing import CliRunner

    from contrastive_rlvr.cli import app

    result = CliRunner().invoke(app, ["train", "--fields"])
    assert result.exit_code == 0
    lines = result.stdout.splitlines()  # one per field: name, type, this run's value, help
    assert any(ln.startswith("bicc_context_ratio  float  0.4  ") for ln in lines)
    assert any(ln.startswith("learning_rate  float  0.0001  ") for ln in lines)


def test_cli_reports_a_bad_value_without_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from contrastive_rlvr.cli import app

    result = CliRunner().invoke(app, ["train", "--bicc_context_ratio", "1.5"])
    assert result.exit_code == 2
    assert "bicc_context_ratio=1.5 is invalid" in result.output


def test_conspo_takes_the_embedded_bicc_mix():
    # The mix is defined for every recipe (tests/trainer/test_loss.py): ConSPO takes it,
    # which selects the paper's form; the embedded YAML's BiCC is the default form.
    assert config(recipe="conspo", bicc_mix=0.5).bicc_mix == 0.5
    cfg = parse_config(None, ["--recipe", "conspo", "--bicc_mix", "0.5"])
    assert cfg.recipe == "conspo" and cfg.bicc is True and cfg.bicc_mix == 0.5
    assert cfg.bicc_form == "conditioned"
    assert parse_config(None, ["--recipe", "conspo"]).bicc_form == "distill"
    cfg = parse_config(None, ["--recipe", "conspo", "--bicc", "false"])
    assert cfg.bicc is False
    with pytest.raises(ValueError, match="bicc_mix=1.5 is invalid"):
        config(bicc_mix=1.5)


def test_each_group_validates_its_own_fields():
    from contrastive_rlvr.trainer.config_groups import GROUPS, BiCCOptions, RCCOptions

    names = [f.name for g in GROUPS for f in dataclasses.fields(g)]
    assert len(names) == len(set(names)), "a field belongs to one group"
    assert set(names) <= {f.name for f in dataclasses.fields(RLVRConfig)}
    # A group checks its fields on its own, without the rest of the config.
    with pytest.raises(ValueError, match="bicc_context_ratio"):
        BiCCOptions(bicc_context_ratio=1.0).validate_bicc()
    with pytest.raises(ValueError, match="rcc_coef"):
        RCCOptions(rcc_coef=float("inf")).validate_rcc()


def test_train_help_lists_every_field_project_groups_first():
    from typer.testing import CliRunner

    from contrastive_rlvr.cli import app

    result = CliRunner().invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    out = result.output
    for f in dataclasses.fields(RLVRConfig):
        if f.init:
            assert f"--{f.name}" in out, f.name
    # Help text, not only names: BiCC's ratio mode and TRL's learning rate.
    assert "pi_old(o|q)" in out and "The initial learning rate" in out
    headings = ["Command:", "Model, data and run:", "Recipe and loss:", "BiCC (", "RCC ("]
    headings += ["Token-level methods (", "Diagnostics:", "TRL ("]
    positions = [out.index("\n" + h) for h in headings]
    assert positions == sorted(positions)
    assert out.index("--bicc_mix") < out.index("\nTRL (") < out.index("--learning_rate")
    # The project overrides TRL's beta: it is listed once, in the recipe group.
    assert out.count("--beta BETA") == 1 and out.index("--beta") < out.index("\nBiCC (")


def test_field_overrides_take_both_spellings():
    a = parse_config(None, ["--max_completion_length", "12", "--bicc-context-ratio", "0.3"])
    b = parse_config(None, ["--max-completion-length", "12", "--bicc_context_ratio", "0.3"])
    assert a.max_completion_length == b.max_completion_length == 12
    assert a.bicc_context_ratio == b.bicc_context_ratio == 0.3


def test_compare_default_matrix_validates(tmp_path):
    # Every recipe x {plain, bicc, rcc, bicc+rcc} x seed on the embedded YAML (bicc_mix 0.5).
    from contrastive_rlvr.compare import make_spec, plan_runs

    spec = make_spec(None, output_dir=tmp_path / "cmp")
    runs = plan_runs(spec)
    assert len(runs) == len(spec.recipes) * len(spec.arms) * len(spec.seeds) == 72


def test_verigate_process_norm_defaults_to_steps_and_reaches_the_stage(tmp_path):
    from stage_utils import CharTokenizer

    from contrastive_rlvr.trainer.stages import RunFacts, build_stages

    cfg = config(verigate=True, num_generations=4, log_delta=False, max_completion_length=8)
    assert cfg.verigate_process_norm == "steps"
    facts = RunFacts(tokenizer=CharTokenizer(), group_size=4, has_reference=False)
    stage = build_stages(cfg, facts)["train"].stages[2]
    assert stage.name == "process_advantages" and stage.process_norm == "steps"
    with pytest.raises(ValueError, match="verigate_process_norm='mean' is invalid"):
        config(verigate_process_norm="mean")


def test_help_keeps_a_literal_percent_and_states_when_rcc_raises_variance():
    from contrastive_rlvr.trainer.parse import config_help

    text = " ".join(config_help().split())
    assert "embedded model +5% to +13%); see docs/rcc.md" in text
    assert "--rcc_bound {none,reward_range}" in text


def test_reco_weights_and_factor_fields(tmp_path):
    from stage_utils import CharTokenizer

    from contrastive_rlvr.trainer.stages import RunFacts, build_stages

    assert config().reco_weights == "count" and config().reco_factor == "variance"
    cfg = config(reco=True, reco_weights="expected", num_generations=4, log_delta=False,
                 max_completion_length=8)  # fmt: skip
    facts = RunFacts(tokenizer=CharTokenizer(), group_size=4, has_reference=False)
    stage = build_stages(cfg, facts)["train"].stages[2]
    assert stage.name == "occurrence_weights" and stage.weights == "expected"
    with pytest.raises(ValueError, match="reco_weights='often' is invalid"):
        config(reco_weights="often")
    with pytest.raises(ValueError, match="reco_identity='answer' is invalid: reco_weights="):
        config(reco=True, reco_weights="expected", reco_identity="answer")
    # The entropy factor: no p(1-p) mean is computed for it (its Z is the loss's).
    cfg = config(reco=True, reco_factor="entropy", num_generations=4, log_delta=False,
                 max_completion_length=8)  # fmt: skip
    stage = build_stages(cfg, facts)["train"].stages[2]
    assert stage.name == "occurrence_weights" and not stage.variance_mean
    with pytest.raises(ValueError, match="reco_factor='gini' is invalid"):
        config(reco=True, reco_factor="gini")


def test_the_base_configuration_follows_the_model_and_is_recorded(tmp_path):
    # No --config: the embedded model (or no --model) starts from embedded.yaml, any other
    # model from paper.yaml (lr 1e-6, BiCC off); an explicit --config wins.
    embedded = parse_config(None, [])
    assert embedded.base_config == str(default_config_path()) and embedded.bicc
    other = parse_config(None, ["--model", "some/model", "--output_dir", str(tmp_path)])
    assert other.base_config.endswith("paper.yaml")
    assert other.learning_rate == 1e-6 and not other.bicc and not other.rcc
    own = tmp_path / "own.yaml"
    own.write_text("learning_rate: 0.5\n")
    chosen = parse_config(own, ["--model", "some/model", "--output_dir", str(tmp_path)])
    assert chosen.base_config == str(own) and chosen.learning_rate == 0.5
    for flag in (["--base_config", "x.yaml"], ["--base-config=x.yaml"]):
        with pytest.raises(ValueError, match="base_config is set by the parser"):
            parse_config(None, flag)


def test_bicc_placement_values():
    assert config().bicc_placement == "auto"
    for placement in ("auto", "user_turn", "after_prompt", "before_prompt"):
        assert config(bicc_placement=placement).bicc_placement == placement
    with pytest.raises(ValueError, match="bicc_placement='system' is invalid: choose one of auto"):
        config(bicc_placement="system")


# The range checks TRL leaves open, made when the config is built (before: preflight).
RANGE_CASES = [
    ({"learning_rate": float("nan")}, "learning_rate=nan is invalid: must be a finite number > 0"),
    ({"learning_rate": 0.0}, "learning_rate=0.0 is invalid"),
    ({"temperature": float("inf")}, "temperature=inf is invalid: sampling needs"),
    ({"top_p": 1.5}, "top_p=1.5 is invalid: must be in (0, 1]"),
    ({"max_steps": -5}, "max_steps=-5 is invalid: give a number of optimizer steps >= 1"),
    ({"max_steps": -1, "num_train_epochs": 0.0}, "max_steps=-1 with num_train_epochs=0.0"),
    ({"max_completion_length": 0}, "max_completion_length=0 is invalid: must be >= 1"),
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0 is invalid"),
    ({"weight_decay": float("nan")}, "weight_decay=nan is invalid: must be a finite number"),
    ({"adv_eps": float("inf")}, "adv_eps=inf is invalid: must be a finite number"),
    ({"reward_threshold": float("nan")}, "reward_threshold=nan is invalid"),
    ({"adam_epsilon": 0.0}, "adam_epsilon=0.0 is invalid: must be > 0"),
    ({"adam_beta2": 1.0}, "adam_beta2=1.0 is invalid: must be in [0, 1)"),
    ({"max_grad_norm": -1.0}, "max_grad_norm=-1.0 is invalid: must be finite and >= 0"),
    ({"reward_weights": [1.0, float("inf")]}, "reward_weights=[1.0, inf] is invalid"),
    ({"embedded_sft_steps": -1}, "embedded_sft_steps=-1 is invalid: must be >= 0"),
    ({"embedded_sft_context_frac": 1.5}, "embedded_sft_context_frac=1.5 is invalid"),
    ({"eval_limit": 0}, "eval_limit=0 is invalid: must be >= 1"),
    ({"nonfinite_rewards": "ignore"}, "nonfinite_rewards='ignore' is invalid: choose one of"),
    ({"rollback_snapshot_max_bytes": -1}, "rollback_snapshot_max_bytes=-1 is invalid"),
    ({"dataset": "x.jsonl"}, "dataset='x.jsonl' is given with model='embedded'"),
    ({"rewards": ["format"]}, "rewards=['format'] is given with model='embedded'"),
]


@pytest.mark.parametrize(("kwargs", "message"), RANGE_CASES)
def test_ranges_are_checked_when_the_config_is_built(kwargs, message):
    from contrastive_rlvr.errors import UserError

    with pytest.raises(UserError) as err:
        config(**kwargs)
    assert message in str(err.value)


def test_reliability_fields_default_and_parse():
    cfg = config()
    assert cfg.overwrite_output_dir is False and cfg.resume_allow_config_change is False
    assert cfg.nonfinite_rewards == "error" and cfg.rollback_snapshot_max_bytes == 2 * 1024**3
    assert cfg.embedded_sft_context_frac == 0.0
    cfg = parse_config(None, ["--nonfinite_rewards", "skip_group", "--overwrite_output_dir",
                              "true", "--rollback_snapshot_max_bytes", "0"])  # fmt: skip
    assert cfg.nonfinite_rewards == "skip_group" and cfg.overwrite_output_dir is True
    assert cfg.rollback_snapshot_max_bytes == 0
    # A custom model may take a dataset and rewards (the files are preflight's to check).
    assert config(model="some/model", dataset="x.jsonl", rewards=["format"]).dataset == "x.jsonl"


def test_a_methods_options_are_no_difference_while_it_is_off_in_both():
    from contrastive_rlvr.run.config_compare import config_differences

    plain = {"bicc": False, "rcc": False, "bicc_mix": 1.0, "rcc_delta": "mean", "lr": 1.0}
    other = {**plain, "bicc_mix": 0.5, "rcc_delta": "sum"}
    assert config_differences(plain, other) == []
    # On in one of them: its options count, and so does the switch.
    on = {**other, "bicc": True}
    assert config_differences(plain, on) == ["bicc: False -> True", "bicc_mix: 1.0 -> 0.5"]
    # A reading warm start lays BiCC's contexts out with BiCC's budget and placement: those
    # count with BiCC off; the loss's options (bicc_mix) still do not.
    reading = {**plain, "embedded_sft_context_frac": 0.5, "bicc_placement": "auto"}
    assert config_differences(reading, {**reading, "bicc_mix": 0.5}) == []
    placed = {**reading, "bicc_placement": "before_prompt"}
    assert config_differences(reading, placed) == ["bicc_placement: 'auto' -> 'before_prompt'"]
