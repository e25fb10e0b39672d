"""``contrastive-rlvr premise``: the options it shares with train reach the measurement,
bad options stop before any model loads, and a run on a local model and data file
writes its table, JSON and samples."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from contrastive_rlvr.cli import app


def _no_model(*_args, **_kwargs):
    raise AssertionError("the model was loaded")


def test_bad_options_stop_before_the_model_loads(monkeypatch, tmp_path):
    import contrastive_rlvr.premise as premise

    monkeypatch.setattr(premise, "run_premise", _no_model)
    out = ["--output_dir", str(tmp_path / "p")]
    for args, message in (
        (["--control", "other"], "control='other' is not one of other_problem, same_sign"),
        (["--problems", "1"], "problems=1: the interval needs at least 2 problems"),
        (["--num_generations", "1"], "num_generations"),
        (["--no_such_field", "3"], "no_such_field"),
    ):
        result = CliRunner().invoke(app, ["premise", *args, *out])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output


def test_train_options_reach_the_measurement(monkeypatch, tmp_path):
    """--model, the bicc_* and sampling fields go into the run's config as train parses
    them; the premise's own options stay its own; the table and JSON are written."""
    import contrastive_rlvr.premise as premise

    seen = {}

    def fake_run(cfg, *, problems, control, echo):
        seen.update(cfg=cfg, problems=problems, control=control)
        return premise.PremiseResult(control, problems, cfg.num_generations, 0.5, 0)

    monkeypatch.setattr(premise, "run_premise", fake_run)
    out = tmp_path / "p"
    args = ["premise", "--num_generations", "4", "--bicc_max_seq_len", "300",
            "--bicc_placement", "before_prompt", "--temperature", "0.7", "--problems", "5",
            "--control", "same_sign", "--output_dir", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert (cfg.model, cfg.num_generations, cfg.bicc_max_seq_len) == ("embedded", 4, 300)
    assert (cfg.bicc_placement, cfg.temperature, cfg.output_dir) == (
        "before_prompt", 0.7, str(out)
    )  # fmt: skip
    assert (seen["problems"], seen["control"]) == (5, "same_sign")
    saved = json.loads((out / "premise.json").read_text())
    assert saved["verdict"] == "undetermined" and saved["control"] == "same_sign"
    assert "UNDETERMINED" in (out / "premise.txt").read_text()
    assert "UNDETERMINED" in result.output


def _tiny_model_and_sums(tmp_path: Path) -> tuple[Path, Path]:
    """A random tiny Llama and 20 ``x+y=`` rows whose prompt column is named ``problem``."""
    from trainer_utils import save_tiny_model

    model = save_tiny_model(tmp_path / "model")
    data = tmp_path / "train.jsonl"
    rows = [{"problem": f"{x}+{y}=", "answer": str(x + y)} for x in range(5) for y in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, data


def test_top_level_help_lists_premise():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0 and "premise" in result.output


def test_a_local_model_and_data_file_end_to_end(tmp_path):
    """A random tiny Llama, a jsonl file whose prompt column is named ``problem``, a reward
    that marks every other completion correct (so every group is two-sided): each problem
    is measured, samples.jsonl holds each group with its rewards, and premise.json agrees
    with the table."""
    model, data = _tiny_model_and_sums(tmp_path)
    reward = tmp_path / "alternate.py"
    reward.write_text(
        "def alternate(prompts, completions, **kwargs):\n"
        "    return [float(i % 2 == 0) for i, _ in enumerate(completions)]\n"
    )
    out = tmp_path / "p"
    args = ["premise", "--model", str(model), "--dataset", str(data),
            "--prompt_field", "problem", "--rewards", f"{reward}:alternate",
            "--heldout_size", "4", "--num_generations", "4", "--max_completion_length", "4",
            "--bicc_max_seq_len", "200", "--temperature", "1.0", "--problems", "3",
            "--output_dir", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "premise.json").read_text())
    assert (saved["problems"], saved["group_size"], saved["two_sided_problems"]) == (3, 4, 3)
    assert saved["accuracy"] == 0.5
    assert saved["per_token"]["net"]["n"] == 3
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [s["correct"] for s in samples] == [[True, False, True, False]] * 3
    assert all(s["prompt"].startswith(tuple("01234")) for s in samples)
    assert saved["verdict"].upper() in (out / "premise.txt").read_text()
    assert Path(out / "premise.txt").read_text().strip() in result.output
    # The start weights' transfer measure is in the report and in premise.json.
    assert "bicc/transfer_cos at the start weights (3 groups" in result.output
    assert set(saved["transfer_cos_at_start"]) == {"conditioned", "distill", "groups"}


def test_rewards_that_score_nothing_are_one_line_not_undetermined(tmp_path):
    model, data = _tiny_model_and_sums(tmp_path)
    reward = tmp_path / "silent.py"
    reward.write_text(
        "def silent(prompts, completions, **kwargs):\n    return [None] * len(completions)\n"
    )
    args = ["premise", "--model", str(model), "--dataset", str(data),
            "--prompt_field", "problem", "--rewards", f"{reward}:silent",
            "--heldout_size", "4", "--num_generations", "2", "--max_completion_length", "2",
            "--problems", "2", "--output_dir", str(tmp_path / "p")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "nothing was scored" in result.output and "all 4 completions" in result.output
