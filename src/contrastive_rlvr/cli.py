"""The ``contrastive-rlvr`` command line."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)


@app.command()
def recipes() -> None:
    """List the recipes with their papers."""
    from .algorithms import RECIPES

    for r in RECIPES.values():
        typer.echo(f"{r.name:8s} {r.summary}  [{r.paper}]")


@app.callback()
def main() -> None:
    """RLVR for language models: GRPO variants with BiCC, RCC, ConSPO and more."""
