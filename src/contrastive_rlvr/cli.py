"""The ``contrastive-rlvr`` command line."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False
)


@app.callback()
def main() -> None:
    """RLVR for language models: GRPO variants with BiCC, RCC, ConSPO and more."""


@app.command()
def recipes() -> None:
    """List the recipes with their papers."""
    from .algorithms import RECIPES

    for r in RECIPES.values():
        typer.echo(f"{r.name:8s} {r.summary}  [{r.paper}]")


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def train(
    ctx: typer.Context,
    config: Path | None = typer.Option(
        None, "--config", help="YAML file of RLVRConfig fields (default: the embedded default)."
    ),
) -> None:
    """Train. With no arguments: the embedded default (tiny model, arithmetic task,
    SFT warm start, then GRPO + BiCC + RCC), offline. Any RLVRConfig field can be
    given as --field value after the YAML, e.g. --recipe dapo --bicc false."""
    from .trainer import train as run_training
    from .trainer.parse import parse_config

    try:
        cfg = parse_config(config, list(ctx.args))
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    summary = run_training(cfg)
    typer.echo(
        f"held-out avg@{summary['eval_n']}: {summary['heldout_avg@n_before']:.3f} before RL -> "
        f"{summary['heldout_avg@n_after']:.3f} after {summary['steps']} steps "
        f"({summary['wall_seconds']:.0f} s)"
    )
    typer.echo(json.dumps(summary))
