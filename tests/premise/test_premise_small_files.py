"""``premise`` on a small file: it trains nothing, so a held-out split too large for the
file is no reason to refuse (every prompt may be measured); it shows its sampling
progress; and it names the causes ``train`` names (completions cut at the length limit,
groups all wrong or all right), counted from its own samples."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from contrastive_rlvr.cli import app


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A random tiny Llama, an 8-row file and two rewards: every other completion right
    (two-sided groups) and always wrong (every group all wrong)."""
    from trainer_utils import save_tiny_model

    root = tmp_path_factory.mktemp("small")
    save_tiny_model(root / "model")
    rows = [{"prompt": f"{x}+{x}=", "answer": str(2 * x)} for x in range(8)]
    (root / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "r.py").write_text(
        "def alternate(prompts, completions, **kwargs):\n"
        "    return [float(i % 2 == 0) for i, _ in enumerate(completions)]\n"
        "def never(prompts, completions, **kwargs):\n"
        "    return [0.0 for _ in completions]\n"
    )
    return root


def _premise(root, out, reward: str, *extra: str):
    args = ["premise", "--model", str(root / "model"), "--dataset", str(root / "d.jsonl"),
            "--rewards", f"{root / 'r.py'}:{reward}", "--num_generations", "4",
            "--max_completion_length", "4", "--bicc_max_seq_len", "200", "--temperature",
            "1.0", "--problems", "3", "--output_dir", str(out), *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


def test_a_heldout_size_larger_than_the_file_is_no_reason_to_refuse(small, tmp_path):
    result = _premise(small, tmp_path / "p", "alternate", "--heldout_size", "100")
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "p" / "premise.json").read_text())
    assert (saved["problems"], saved["two_sided_problems"]) == (3, 3)
    # progress: the start line and the end line of the sampling (12 completions)
    assert "premise: sampling 12 completions (3 problems x 4" in result.output
    assert "premise: 12 of 12 completions in " in result.output


def test_premise_names_truncation_and_one_sided_groups_as_train_does(small, tmp_path):
    out = tmp_path / "p"
    result = _premise(small, out, "never")
    assert result.exit_code == 0, result.output
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    cut = sum(sum(s["truncated"]) for s in samples)
    assert cut >= 2  # a random model over 4 tokens rarely ends: most are cut
    line = (
        f"warning (truncated): {cut} of 12 completions ({cut / 12:.0%}) were cut at "
        "max_completion_length=4"
    )
    assert line in result.output and line in (out / "premise.txt").read_text()
    # every reward 0: the 3 groups are all wrong, so none measures anything
    assert "warning (collapsed): 3 of 3 groups had every completion wrong (3)" in result.output
    causes = json.loads((out / "premise.json").read_text())["settings"]["causes"]
    assert set(causes) == {"truncated", "collapsed"}
