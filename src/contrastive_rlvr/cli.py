"""contrastive-rlvr: RL with verifiable rewards for language models (GRPO variants with
BiCC, RCC, ConSPO and the token-level methods), on TRL.

Each command's --help lists its options; `train --help` lists every training field."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import NoReturn

import typer
from typer.core import TyperGroup

from .failure_lines import (
    address_space_too_small,
    disk_full,
    out_of_memory,
    read_only,
)


class _Commands(TyperGroup):
    """The command group: a bare ``--debug`` anywhere on the line (before or after any
    subcommand) switches tracebacks on and is taken out before the subcommand parses."""

    def parse_args(self, ctx, args):
        _STATE["debug"] = _DEBUG_FROM_ENV
        return super().parse_args(ctx, _take_debug(list(args)))

    def invoke(self, ctx):
        # Every command imports torch, TRL and datasets in its body, before its own error
        # policy (_run) is in place: a memory limit met there is the same one line.
        from click.exceptions import Exit as ClickExit

        from .errors import UserError

        line = address_space_too_small()
        if line is not None:
            _fail(UserError(line), 1)
        try:
            return super().invoke(ctx)
        except (typer.Exit, ClickExit):  # a command's own exit (a RuntimeError): said already
            raise
        except (MemoryError, ImportError, RuntimeError, OSError, SystemError) as err:
            line = out_of_memory(err)
            if line is None:
                raise
            _fail(RuntimeError(line), 1)


app = typer.Typer(
    cls=_Commands,
    add_completion=False,
    no_args_is_help=True,
    help=__doc__,
    pretty_exceptions_enable=False,
)


#: Exceptions that report a mistake in the user's input: one ``error:`` line, exit 2.
USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)
_DEBUG_FROM_ENV = os.environ.get("CONTRASTIVE_RLVR_DEBUG", "") not in ("", "0")
_STATE = {"debug": _DEBUG_FROM_ENV}
#: What an error line ends with: the flag that prints the traceback, and where it goes.
DEBUG_HINT = " (traceback: add --debug anywhere on the command line, or CONTRASTIVE_RLVR_DEBUG=1)"


@app.callback()
def main(
    debug: bool = typer.Option(
        False, "--debug", help="Print the traceback of an error (also: CONTRASTIVE_RLVR_DEBUG=1)."
    ),
) -> None:
    """RLVR for language models: GRPO variants with BiCC, RCC, ConSPO and more."""
    _STATE["debug"] = _STATE["debug"] or debug


#: Values of transformers' own ``--debug`` option (TrainingArguments.debug): a
#: ``--debug`` followed by one of them is TRL's, a bare one is this CLI's.
_TRL_DEBUG_VALUES = ("underflow_overflow", "tpu_metrics_debug")


def _take_debug(args: list[str]) -> list[str]:
    """``args`` without this CLI's bare ``--debug`` (which switches tracebacks on), so it
    works after every subcommand too; ``--debug underflow_overflow`` (transformers' own
    option, which takes a value) stays for TRL."""
    kept = []
    for i, arg in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else ""
        if arg == "--debug" and not any(v in nxt for v in _TRL_DEBUG_VALUES):
            _STATE["debug"] = True
            continue
        kept.append(arg)
    return kept


def _fail(err: BaseException, code: int) -> NoReturn:
    """Print ``err`` as one ``error:`` line (its traceback too with --debug) and exit."""
    from .errors import UserError

    if _STATE["debug"]:
        traceback.print_exception(err, file=sys.stderr)
    hint = "" if isinstance(err, UserError) or _STATE["debug"] else DEBUG_HINT
    # A user error may name several problems, one per line (each missing package): one
    # error line each; any other error is one line.
    text = str(err)
    lines = text.split("\n") if isinstance(err, UserError) else [" ".join(text.split("\n"))]
    for line in lines:
        message = line.strip() or type(err).__name__
        typer.echo(f"error: {message}{hint}", err=True)
    raise typer.Exit(code) from err


def _run(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with the CLI's error policy: user errors exit 2, a run that
    learned nothing exits 1, Ctrl-C exits 130, anything else (a bug) keeps its traceback."""
    from .errors import (
        AllUpdatesSkipped,
        NonFiniteParametersError,
        NoTrainingSteps,
        RewardExitError,
    )
    from .input_checks import check_cache_variables
    from .termination import sigterm_as_sigint

    on_interrupt = kwargs.pop("_on_interrupt", None)
    try:
        with sigterm_as_sigint():  # a cluster's SIGTERM is Ctrl-C (termination.py)
            check_cache_variables()  # HF_HOME naming a file: one line, before any work
            return fn(*args, **kwargs)
    except USER_ERRORS as err:
        _fail(err, 2)
    except (AllUpdatesSkipped, NonFiniteParametersError, NoTrainingSteps, RewardExitError) as err:
        _fail(err, 1)
    except KeyboardInterrupt as err:
        typer.echo(on_interrupt() if on_interrupt else "interrupted", err=True)
        raise typer.Exit(130) from err
    except MemoryError as err:  # a memory limit (ulimit -v, a cgroup): one line
        _fail(RuntimeError(out_of_memory(err)), 1)
    except Exception as err:
        line = out_of_memory(err) or disk_full(err) or read_only(err)
        if line is None:
            raise
        _fail(RuntimeError(line), 1)


@app.command(short_help="List the recipes with their papers.")
def recipes() -> None:
    """List the recipes with their papers."""
    from .algorithms import RECIPES

    for r in RECIPES.values():
        typer.echo(f"{r.name:8s} {r.summary}  [{r.paper}]")


@app.command(
    short_help="Train a model with a recipe (default: the offline embedded run).",
    # --help is this command's own: it lists every RLVRConfig field, not just the three below.
    context_settings={
        "allow_extra_args": True,
        "ignore_unknown_options": True,
        "help_option_names": [],
    },
)
def train(
    ctx: typer.Context,
    config: Path | None = typer.Option(
        None, "--config", help="YAML file of RLVRConfig fields (default: the embedded default)."
    ),
    fields: bool = typer.Option(
        False,
        "--fields",
        help="List every RLVRConfig field, one line each (name, type, this run's value, "
        "help), and exit.",
    ),
    show_help: bool = typer.Option(
        False, "--help", "-h", help="List every option with its help text, and exit."
    ),
) -> None:
    """Train. With no arguments: the embedded default (tiny model, arithmetic task,
    SFT warm start, then GRPO + BiCC + RCC), offline. Any RLVRConfig field can be
    given as --field value after the YAML, e.g. --recipe dapo --bicc false
    (`--fields` lists them)."""
    from .run import train as run_training
    from .trainer.parse import config_fields, config_help, parse_config

    if fields or show_help:
        # The values shown are those this command line would run with (its --config or the
        # base YAML of its --model); the code's own where it does not parse.
        try:
            resolved = parse_config(config, _take_debug(list(ctx.args)))
        except (ValueError, SystemExit):
            resolved = None
        # --help: argparse's full help; --fields: one compact line per field.
        typer.echo(config_help(resolved) if show_help else config_fields(resolved))
        raise typer.Exit(0)
    cfg = _run(parse_config, config, _take_debug(list(ctx.args)))
    main = os.environ.get("RANK", "0") == "0"  # torchrun: one summary, from the main process
    if main:
        from .run.summary import settings_line

        typer.echo(f"base configuration: {cfg.base_config}")
        typer.echo(f"settings: {settings_line(cfg)}")
    from .trainer.interrupts import interrupted_note

    overrides = _take_debug(list(ctx.args))
    summary = _run(
        run_training,
        cfg,
        _on_interrupt=lambda: interrupted_note(cfg.output_dir, config, overrides),
    )
    if not main:
        return
    typer.echo(_outcome_line(summary))
    signal = summary.get("learning_signal") or {}
    for name, message in (signal.get("causes") or {}).items():
        typer.echo(f"warning ({name}): {message}")
    for name, message in (signal.get("held_earlier") or {}).items():
        typer.echo(f"warning ({name}, held earlier in the run, not over all of it): {message}")
    if signal.get("learned_nothing"):
        typer.echo(
            f"the run learned nothing: {signal['learned_nothing']} (--no_learning_signal "
            "error makes this an error)"
        )
    # The whole summary is in the file; the terminal gets where it is (one long JSON line
    # was unreadable).
    typer.echo(f"summary: {Path(cfg.output_dir) / 'summary.json'}")
    from .trainer.disk import disk_summary

    typer.echo(disk_summary(cfg.output_dir))


def _outcome_line(summary: dict) -> str:
    """The run's outcome in one line: held-out avg@n before and after, the steps and the
    time, and the after score's interval (summary.json's); or that there was no held-out
    scoring."""
    steps = f"{summary['steps']} steps ({summary['wall_seconds']:.0f} s)"
    if summary.get("heldout_avg@n_after") is None:
        return f"no held-out scoring (heldout_size=0): {steps}"
    scorer = summary.get("heldout_reward")
    line = (
        f"held-out avg@{summary['eval_n']}{f' ({scorer})' if scorer else ''}: "
        f"{summary['heldout_avg@n_before']:.3f} before RL -> "
        f"{summary['heldout_avg@n_after']:.3f} after {steps}"
    )
    after = summary.get("heldout_after") or {}
    if "ci_low" in after:
        method = " Wilson" if "Wilson" in str(after.get("interval", "")) else ""
        line += (
            f"; after: {after.get('level', 0.95):.0%}{method} interval "
            f"[{after['ci_low']:.3f}, {after['ci_high']:.3f}]"
        )
    return line


@app.command(
    short_help="Compare recipes with and without BiCC and RCC over seeds, with a results table.",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def compare(
    ctx: typer.Context,
    out: Path | None = typer.Option(
        None, "--output_dir", "--output-dir", "--out", help="Output folder (default runs/compare)."
    ),
    recipes: str | None = typer.Option(
        None, "--recipes", help="Comma-separated (default: all six)."
    ),
    arms: str | None = typer.Option(
        None, "--arms", help="Comma-separated from plain,bicc,rcc,bicc+rcc (default: all four)."
    ),
    seeds: str | None = typer.Option(None, "--seeds", help="Comma-separated (default 0,1,2)."),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="RLVRConfig YAML for every run (default: as train, embedded.yaml for the "
        "embedded model, paper.yaml for any other --model).",
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

    cfg = _run(
        make_spec,
        spec,
        recipes=recipes,
        arms=arms,
        seeds=seeds,
        config=config,
        output_dir=out,
        jobs=jobs,
        overrides=_take_debug(list(ctx.args)),
    )
    report = _run(run_compare, cfg, echo=typer.echo)
    typer.echo((Path(cfg.output_dir) / "results.md").read_text())
    if report.get("interrupted"):
        typer.echo("interrupted: run compare again to resume", err=True)
        raise typer.Exit(130)
    if report["failed"]:
        raise typer.Exit(1)
    if report.get("busy"):
        typer.echo(
            f"error: {len(report['busy'])} run(s) left alone: a live process holds their "
            "folders; run compare again once it has ended",
            err=True,
        )
        raise typer.Exit(1)


@app.command(short_help="Plot the curves and diagnostics of training runs as PNG figures.")
def plot(
    run_dirs: list[Path] = typer.Argument(..., help="Run folders, or a compare output folder."),
    out: Path | None = typer.Option(
        None,
        "--output_dir",
        "--output-dir",
        "--out",
        help="Folder for the PNG files (default: FIRST_DIR/figures).",
    ),
) -> None:
    """PNG figures: reward and held-out accuracy, Cov(R, delta), delta distributions of
    correct vs wrong completions, gradient variance with vs without RCC."""
    from .plots import plot_runs

    paths = _run(plot_runs, run_dirs, out or run_dirs[0] / "figures")
    for path in paths:
        typer.echo(str(path))


@app.command(short_help="One self-contained HTML page of a run, compare or eval folder.")
def report(
    folder: Path = typer.Argument(
        ..., help="A run folder, a compare output folder or an eval folder."
    ),
    out: Path | None = typer.Option(None, "--out", help="HTML file (default: FOLDER/report.html)."),
) -> None:
    """Table with intervals, curves (embedded PNGs) and diagnostics, in one HTML file."""
    from .html_report import write_report

    typer.echo(str(_run(write_report, folder, out)))


@app.command(
    "eval", short_help="Evaluate a model on math benchmarks: avg@n, pass@k and unparsable rate."
)
def eval_command(
    model: str = typer.Option(
        ...,
        "--model",
        help="HF id, local dir, .gguf file or smollm2-135m (SmolLM2-135M-Instruct's Q4_1 "
        "GGUF build, dequantised to float32).",
    ),
    benchmarks: str = typer.Option(
        "math500",
        "--benchmarks",
        help="Comma-separated names (math500,amc23,aime24,aime25,gsm8k; math500 and gsm8k "
        "ship with the package) or files (PATH.jsonl or NAME=PATH).",
    ),
    benchmark_fields: str | None = typer.Option(
        None,
        "--benchmark-fields",
        "--benchmark_fields",
        help="Fields of the benchmark files: prompt=question,answer=answer,id=qid,format=gsm8k "
        "(unset: detected).",
    ),
    n: int = typer.Option(32, "--n", help="Samples per problem (seeds 0..n-1)."),
    limit: int | None = typer.Option(None, "--limit", help="First N problems per benchmark."),
    max_new_tokens: int = typer.Option(
        4096, "--max-new-tokens", "--max_new_tokens", help="Longest completion, in tokens."
    ),
    temperature: float = typer.Option(0.6, "--temperature", help="Sampling temperature."),
    top_p: float = typer.Option(0.95, "--top-p", "--top_p", help="Nucleus sampling p."),
    batch_size: int = typer.Option(
        16, "--batch-size", "--batch_size", help="Prompts per generate call (HF)."
    ),
    backend: str = typer.Option("auto", "--backend", help="auto, hf or vllm."),
    output_dir: Path = typer.Option(
        Path("eval_results"), "--output_dir", "--output-dir", help="Folder of the results."
    ),
    benchmarks_dir: Path | None = typer.Option(
        None,
        "--benchmarks-dir",
        "--benchmarks_dir",
        help="Folder of benchmark jsonl files (amc23, aime24, aime25 offline; its copy of "
        "math500 or gsm8k wins over the packaged one).",
    ),
    last_number_fallback: bool = typer.Option(
        False,
        "--last-number-fallback",
        "--last_number_fallback",
        help="Score the last number when no answer is boxed, on a line or in prose "
        "(train: --last_number_fallback true).",
    ),
    answer_line: bool = typer.Option(
        True,
        "--answer-line/--no-answer-line",
        "--answer_line/--no_answer_line",
        help="Read a last 'Answer: X' line when a completion has no <answer> and no box.",
    ),
    answer_phrase: bool = typer.Option(
        True,
        "--answer-phrase/--no-answer-phrase",
        "--answer_phrase/--no_answer_phrase",
        help="Then read the last 'the answer is X' of the prose ('So, the final answer is 4.').",
    ),
) -> None:
    """Sample n completions per problem, verify them, print avg@n, pass@k, unparsable."""
    from .evaluation import EvalConfig, evaluate

    cfg = _run(
        EvalConfig,
        model=model,
        benchmarks=[b.strip() for b in benchmarks.split(",") if b.strip()],
        benchmark_fields=benchmark_fields,
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
        answer_line=answer_line,
        answer_phrase=answer_phrase,
    )
    _run(evaluate, cfg)


@app.command(
    short_help="Measure whether BiCC can help a model: its premise in minutes, with a verdict "
    "(no training).",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def premise(
    ctx: typer.Context,
    config: Path | None = typer.Option(
        None,
        "--config",
        help="RLVRConfig YAML, as train takes it (default: as train, embedded.yaml for the "
        "embedded model, paper.yaml for any other --model).",
    ),
    problems: int = typer.Option(24, "--problems", help="Prompts to sample a group for."),
    control: str = typer.Option(
        "other_problem",
        "--control",
        help="The control context subtracted from BiCC's: other_problem (another problem's "
        "opposite attempts, the default) or same_sign (the other attempts of the row's own "
        "side).",
    ),
    out: Path = typer.Option(
        Path("runs/premise"),
        "--output_dir",
        "--output-dir",
        help="Folder of premise.json, premise.txt and samples.jsonl (and of the embedded "
        "model's warm start).",
    ),
) -> None:
    """Measure BiCC's premise on a model, without training: sample G completions per
    problem, then how much the group's opposite attempts in the context (built as training
    builds them) raise log pi of the correct completions over the wrong ones, minus the
    same for a control context. Prints a table with 95% intervals and a verdict (premise
    shown / not shown / reversed). Every train option works here as it does in train
    (--model, --dataset, --prompt_field, --answer_field, --rewards,
    --num_generations, --max_completion_length, --temperature, --bicc_*, ...); the
    training-only ones (optimiser, steps, ...) play no part. docs/bicc.md, "Will BiCC
    help on my model?"."""
    from .premise import check_options
    from .premise.command import check_premise_folder
    from .trainer.parse import parse_config

    args = [*_take_debug(list(ctx.args)), "--output_dir", str(out)]
    cfg = _run(parse_config, config, args)
    _run(check_options, problems, control, cfg)
    _run(check_premise_folder, out)
    typer.echo(f"base configuration: {cfg.base_config}")
    _run(_premise_locked, cfg, out, problems, control)
    typer.echo(f"\nwritten: {out}/premise.json, premise.txt, samples.jsonl")


def _premise_locked(cfg, out: Path, problems: int, control: str) -> None:
    """premise's measurement and files under its folder's lock (a live train or premise
    there refuses it), every file written through ``run_files``."""
    from .premise import dump, format_table, run_premise
    from .run_files import write_file, writer_lock

    in_use = "output_dir={path!r} is in use by another run (a live process holds its lock); "
    with writer_lock(out, in_use=in_use + "wait for it to end, or choose another --output_dir"):
        result = run_premise(cfg, problems=problems, control=control, echo=typer.echo)
        data = cfg.dataset or cfg.dataset_name or "the embedded task"
        table = format_table(result, title=f"BiCC premise: model {cfg.model}, data {data}")
        # What train would name as a cause of learning nothing, as train names it.
        causes = result.settings.get("causes") or {}
        table += "".join(f"\nwarning ({name}): {message}" for name, message in causes.items())
        typer.echo("\n" + table)
        write_file(out, "premise.txt", table + "\n")
        write_file(out, "premise.json", dump(result))


if __name__ == "__main__":
    # `python -m contrastive_rlvr.cli` (what `accelerate launch -m` runs) as the console script.
    app()
