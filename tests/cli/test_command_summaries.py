"""The command line: one-sentence command summaries and the same option spellings."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from contrastive_rlvr.cli import app


def test_top_level_help_summaries_are_whole_sentences():
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in app.registered_commands:
        summary = command.short_help
        assert summary and summary.endswith(".") and summary.count(". ") == 0, command.name
        # rich wraps a long line; its first words must be on the command's row.
        assert summary.split()[0] in result.output


@pytest.mark.parametrize("spelling", ["--max-new-tokens", "--max_new_tokens"])
def test_eval_takes_both_spellings(monkeypatch, spelling):
    import contrastive_rlvr.evaluation as evaluation

    seen = {}
    monkeypatch.setattr(evaluation, "evaluate", lambda cfg: seen.setdefault("cfg", cfg))
    args = ["eval", "--model", "m", spelling, "7", "--top_p", "0.5", "--batch-size", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    cfg = seen["cfg"]
    assert (cfg.max_new_tokens, cfg.top_p, cfg.batch_size) == (7, 0.5, 3)
