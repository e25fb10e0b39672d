"""Running the command line in-process, for the tests of what it tells the user."""

from __future__ import annotations

from typing import Any


def cli(args: list[str]) -> Any:
    """``contrastive-rlvr <args>`` through typer's test runner (output and exit code)."""
    from typer.testing import CliRunner

    from contrastive_rlvr.cli import app

    return CliRunner().invoke(app, args)


def one_line(result: Any, code: int, message: str) -> None:
    """The command exited ``code`` with ``message`` in one ``error:`` line, no traceback."""
    assert result.exit_code == code, result.output
    assert message in result.output, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
