"""One config reader for train and compare (``trainer.parse``) and the same value rules
on verl (``method_options.check_field_types``): an empty config is an error, alias
expansion is bounded in values and in characters, a wrong type is one line naming the
file, the field and the type, an unknown key names the closest field."""

from __future__ import annotations

import dataclasses
import time

import pytest
from cli_utils import cli, one_line

from contrastive_rlvr.compare import make_spec
from contrastive_rlvr.errors import UserError
from contrastive_rlvr.method_options import (
    SHARED_GROUPS,
    AdvantageFields,
    BiCCFields,
    ConSPOFields,
    RCCFields,
    check_field_types,
)
from contrastive_rlvr.trainer.parse import MAX_YAML_CHARS, YAMLTooLarge, safe_yaml


def _yaml(tmp_path, text: str, name: str = "c.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_config_is_an_error_for_train_and_compare(tmp_path, text):
    path = _yaml(tmp_path, text)
    result = cli(["train", "--config", str(path), "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, f"config file {path} is empty")
    with pytest.raises(ValueError, match="is empty"):
        make_spec(path)  # compare's --spec
    assert not (tmp_path / "o").exists() and not (tmp_path / "trainer_output").exists()


def test_a_string_aliased_many_times_is_refused_before_it_is_built():
    big = "x" * 100_000
    text = f'run_name: &a "{big}"\nreport_to: [{", ".join(["*a"] * 2000)}]\n'
    started = time.monotonic()
    with pytest.raises(YAMLTooLarge, match=f"more than {MAX_YAML_CHARS} characters"):
        safe_yaml(text)
    assert time.monotonic() - started < 5
    safe_yaml(f'run_name: &a "{big}"\nreport_to: [*a, *a]\n')  # a few aliases are fine


def test_a_wrong_type_in_the_yaml_is_one_line_naming_file_field_and_type(tmp_path):
    path = _yaml(tmp_path, "model: embedded\nlearning_rate: fast\n")
    result = cli(["train", "--config", str(path), "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, f"config file {path}: learning_rate='fast' is invalid (expected float)")
    assert "usage:" not in result.output


def test_a_wrong_type_on_the_command_line_is_one_line_not_the_usage(tmp_path):
    result = cli(["train", "--max_steps", "many", "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "--max_steps: invalid int value: 'many' (expected int)")
    assert "usage:" not in result.output and len(result.output.splitlines()) == 1


def test_an_unknown_key_names_the_closest_field(tmp_path):
    path = _yaml(tmp_path, "model: embedded\nlearnig_rate: 0.1\n")
    result = cli(["train", "--config", str(path), "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "unknown field 'learnig_rate' (did you mean learning_rate?)")
    result = cli(["train", "--num_generation", "4", "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "unknown field 'num_generation' (did you mean num_generations?)")


def test_a_verl_only_stale_rollout_field_says_so_on_train(tmp_path):
    path = _yaml(tmp_path, "model: embedded\nrcc_offpolicy: refuse\n")
    result = cli(["train", "--config", str(path), "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "'rcc_offpolicy' is a verl option (its asynchronous modes")
    result = cli(["train", "--stale_ratio", "sampler", "--output_dir", str(tmp_path / "o")])
    one_line(result, 2, "'stale_ratio' is a verl option")
    assert "drop it" in result.output and not (tmp_path / "o").exists()

@dataclasses.dataclass
class _Options(AdvantageFields, ConSPOFields, RCCFields, BiCCFields):
    """The shared groups as verl's policy-loss config holds them (without verl)."""


@pytest.mark.parametrize("value", ["false", "off", "0"])
def test_a_quoted_boolean_is_refused_as_verl_reads_it(value):
    with pytest.raises(UserError, match=rf"where.bicc='{value}' is a str, not a bool"):
        check_field_types({"bicc": value}, SHARED_GROUPS, "where.")
    options = _Options()
    options.bicc = value
    with pytest.raises(UserError, match="without quotes"):
        check_field_types(options, SHARED_GROUPS)


def test_a_string_number_is_refused_and_real_values_pass():
    with pytest.raises(UserError, match=r"rcc_coef='0.5' is a str, not a float"):
        check_field_types({"rcc_coef": "0.5"}, SHARED_GROUPS)
    check_field_types({"rcc_coef": 1, "bicc": True}, SHARED_GROUPS)
    check_field_types(_Options(), SHARED_GROUPS)
