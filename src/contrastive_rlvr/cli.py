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
    fields: bool = typer.Option(
        False, "--fields", help="List every RLVRConfig field with its meaning, and exit."
    ),
) -> None:
    """Train. With no arguments: the embedded default (tiny model, arithmetic task,
    SFT warm start, then GRPO + BiCC + RCC), offline. Any RLVRConfig field can be
    given as --field value after the YAML, e.g. --recipe dapo --bicc false
    (`--fields` lists them)."""
    from .trainer import train as run_training
    from .trainer.parse import config_help, parse_config

    if fields:
        typer.echo(config_help())
        raise typer.Exit(0)
    try:
        cfg = parse_config(config, list(ctx.args))
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    typer.echo(f"base configuration: {cfg.base_config}")
    summary = run_training(cfg)
    typer.echo(
        f"held-out avg@{summary['eval_n']}: {summary['heldout_avg@n_before']:.3f} before RL -> "
        f"{summary['heldout_avg@n_after']:.3f} after {summary['steps']} steps "
        f"({summary['wall_seconds']:.0f} s)"
    )
    typer.echo(json.dumps(summary))


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def compare(
    ctx: typer.Context,
    out: Path | None = typer.Option(None, "--out", help="Output folder (default runs/compare)."),
    recipes: str | None = typer.Option(
        None, "--recipes", help="Comma-separated (default: all six)."
    ),
    arms: str | None = typer.Option(
        None, "--arms", help="Comma-separated from plain,bicc,rcc,bicc+rcc (default: all four)."
    ),
    seeds: str | None = typer.Option(None, "--seeds", help="Comma-separated (default 0,1,2)."),
    config: Path | None = typer.Option(
        None, "--config", help="RLVRConfig YAML for every run (default: the embedded default)."
    ),
    spec: Path | None = typer.Option(
        None, "--spec", help="YAML of these options (recipes, arms, seeds, config, overrides, ...)."
    ),
    jobs: int | None = typer.Option(None, "--jobs", help="Runs at once (default 1)."),
) -> None:
    """Run recipes x {plain, bicc, rcc, bicc+rcc} x seeds and write OUT/results.md and
    results.json (mean and 95% t interval over seeds, paired difference to plain).
    Extra --field value arguments override RLVRConfig fields in every run."""
    from .compare import make_spec, run_compare

    try:
        cfg = make_spec(
            spec,
            recipes=recipes,
            arms=arms,
            seeds=seeds,
            config=config,
            output_dir=out,
            jobs=jobs,
            overrides=list(ctx.args),
        )
        report = run_compare(cfg, echo=typer.echo)
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    typer.echo((Path(cfg.output_dir) / "results.md").read_text())
    if report["failed"]:
        raise typer.Exit(1)


@app.command()
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders, or a compare output folder."),
    out: Path | None = typer.Option(
        None, "--out", help="Folder for the PNG files (default: FIRST_DIR/figures)."
    ),
) -> None:
    """PNG figures: reward and held-out accuracy, Cov(R, delta), delta distributions of
    correct vs wrong completions, gradient variance with vs without RCC."""
    from .plots import plot_runs

    try:
        paths = plot_runs(run_dirs, out or run_dirs[0] / "figures")
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    for path in paths:
        typer.echo(str(path))


@app.command("eval")
def eval_command(
    model: str = typer.Option(..., "--model", help="HF id, local dir, .gguf file or smollm2-135m."),
    benchmarks: str = typer.Option(
        "math500", "--benchmarks", help="Comma-separated: math500,amc23,aime24,aime25,gsm8k."
    ),
    n: int = typer.Option(32, "--n", help="Samples per problem (seeds 0..n-1)."),
    limit: int | None = typer.Option(None, "--limit", help="First N problems per benchmark."),
    max_new_tokens: int = typer.Option(4096, "--max-new-tokens"),
    temperature: float = typer.Option(0.6, "--temperature"),
    top_p: float = typer.Option(0.95, "--top-p"),
    batch_size: int = typer.Option(16, "--batch-size", help="Prompts per generate call (HF)."),
    backend: str = typer.Option("auto", "--backend", help="auto, hf or vllm."),
    output_dir: Path = typer.Option(Path("eval_results"), "--output-dir"),
    benchmarks_dir: Path | None = typer.Option(
        None, "--benchmarks-dir", help="Folder of benchmark jsonl files."
    ),
    last_number_fallback: bool = typer.Option(
        False, "--last-number-fallback", help="Score the last number when no answer is boxed."
    ),
) -> None:
    """Sample n completions per problem, verify them, print avg@n, pass@k, unparsable."""
    from .evaluation import EvalConfig, evaluate

    try:
        cfg = EvalConfig(
            model=model,
            benchmarks=[b.strip() for b in benchmarks.split(",") if b.strip()],
            n=n,
            limit=limit,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            batch_size=batch_size,
            backend=backend,  # type: ignore[arg-type]
            output_dir=str(output_dir),
            benchmarks_dir=str(benchmarks_dir) if benchmarks_dir else None,
            last_number_fallback=last_number_fallback,
        )
        evaluate(cfg)
    except (ValueError, FileNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err


if __name__ == "__main__":
    # `python -m contrastive_rlvr.cli` (what `accelerate launch -m` runs) as the console script.
    app()
