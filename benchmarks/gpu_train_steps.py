"""A few training steps of every recipe with BiCC and RCC on, through ``RLVRTrainer`` (issue 11,
item 6; the second part of the GPU check, ``benchmarks/gpu_check.sh``).

For each recipe of the registry (grpo, dr_grpo, dapo, gmpo, gspo, conspo) a fresh randomly
initialised Llama-style model (the embedded character tokenizer, no download) trains
``--steps`` optimizer steps with ``bicc`` and ``rcc`` on, through the real path:
``RLVRTrainer`` (TRL's generation and scoring, the stage pipeline, the recipe's loss: TRL's
``_compute_loss`` for grpo / dr_grpo / dapo / gspo, the project's for gmpo / conspo,
``trainer/trl_settings.py``), accelerate's optimizer step and the non-finite guards. On CUDA
in bfloat16 (``bf16=True``: float32 weights, bfloat16 autocast, as ``contrastive-rlvr train``
runs a model on CUDA); ``--device cpu`` in float32 as a smoke run.

The reward is 2 (else 0) when the completion's token ids sum to an even number: a coin flip under a
random model, so every group mixes correct and wrong completions, BiCC has opposite attempts
to condition on and every recipe has a gradient. Per recipe it prints the steps done,
whether every logged loss was finite (and no update skipped), whether the weights changed,
the median step time (TRL's ``step_time``; the first step, which includes warm-up, is left
out when there are three or more), the peak CUDA memory (``torch.cuda.max_memory_allocated``
from a reset before the recipe), the mean share of rows BiCC conditioned and the mean RCC
baseline shift ``|b* - mean_g R|``, and PASS (all steps done, every loss finite, no update
skipped, the weights changed, BiCC conditioned some rows and, from step 2 on, RCC moved a
baseline) or FAIL; then one summary line. Exit status 0 when
every recipe passed.

    python benchmarks/gpu_train_steps.py --device cuda            # 3 steps each, bfloat16
    python benchmarks/gpu_train_steps.py --device cpu --quick     # smoke run: tiny shapes
    python benchmarks/gpu_train_steps.py --recipes gmpo,grpo --steps 2 --budget-s 60

``--budget-s`` bounds the whole part: a recipe is not started once the budget is spent (it is
reported as not run, a FAIL).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

DEFAULT_STEPS = 3
DEFAULT_BUDGET_S = 150.0


@dataclass(frozen=True)
class Shapes:
    """Model and batch sizes of one run."""

    hidden: int
    layers: int
    heads: int
    mlp: int
    max_positions: int
    group: int  # G, num_generations
    prompts: int  # prompts per optimizer step
    completion: int  # max_completion_length


#: CUDA: a 4-layer model of about 3.2M parameters, G = 8, 4 prompts a step, 64 tokens.
FULL = Shapes(hidden=256, layers=4, heads=4, mlp=1024, max_positions=512, group=8, prompts=4,
              completion=64)  # fmt: skip
#: --quick: the embedded default's model size, G = 4, 2 prompts a step, 8 tokens.
QUICK = Shapes(hidden=64, layers=2, heads=4, mlp=256, max_positions=256, group=4, prompts=2,
               completion=8)  # fmt: skip


@dataclass
class RecipeResult:
    recipe: str
    loss_route: str = ""
    steps: int = 0
    finite_loss: bool = False
    weights_changed: bool = False
    max_abs_change: float = 0.0
    step_time_s: float = math.nan
    peak_cuda_mib: float | None = None
    reward_mean: float = math.nan
    bicc_conditioned_frac: float = math.nan
    rcc_baseline_shift: float = math.nan
    error: str | None = None
    passed: bool = False


#: The reward of a "correct" completion: above reward_threshold (0.5) even after DAPO's
#: overlong punishment (down to -1 at max_completion_length, where a random model's
#: completions end), so BiCC finds opposite attempts under every recipe.
CORRECT_REWARD = 2.0


def token_parity_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """CORRECT_REWARD when the completion's token ids sum to an even number (a coin flip for
    a random model), else 0."""
    return [CORRECT_REWARD * (sum(ids) % 2 == 0) for ids in completion_ids]


def prompt_dataset(n: int = 64):
    """``n`` distinct arithmetic prompts (the embedded task's alphabet) as a ``Dataset``."""
    from datasets import Dataset

    prompts = [f"{i}+{i + 3}+{(7 * i) % 10}=" for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "answer": ["0"] * n})


def make_config(recipe: str, shapes: Shapes, *, device: str, steps: int, output_dir: str,
                bicc_mix: float, checkpointing: bool = False):  # fmt: skip
    """The run's RLVRConfig: BiCC and RCC on, the recipe's own TRL settings."""
    from contrastive_rlvr.trainer import RLVRConfig

    return RLVRConfig(
        output_dir=output_dir,
        model="gpu-check-random-llama",
        recipe=recipe,
        bicc=True,
        bicc_mix=bicc_mix,
        rcc=True,
        # BiCC's budget as a share of the model's positions: the run's own length (prompt +
        # completion) is too short for the framing text in characters (as embedded.yaml).
        bicc_max_seq_len=shapes.max_positions,
        num_generations=shapes.group,
        per_device_train_batch_size=shapes.group * shapes.prompts,
        max_completion_length=shapes.completion,
        max_steps=steps,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        beta=0.0,
        temperature=1.0,
        # Off as in embedded.yaml (TRL's default is on, as paper.yaml leaves it): --checkpointing.
        gradient_checkpointing=checkpointing,
        disable_tqdm=True,
        bf16=device == "cuda",
        use_cpu=device == "cpu",
        diagnostics_every=0,
        deltas_every=0,
        torch_threads=1,
    )


def run_recipe(
    recipe: str,
    shapes: Shapes,
    *,
    device: str,
    steps: int,
    workdir: Path,
    bicc_mix: float = 1.0,
    checkpointing: bool = False,
) -> RecipeResult:
    """Train ``steps`` steps of ``recipe`` with BiCC and RCC on a fresh random model."""
    from transformers.trainer_callback import PrinterCallback

    from contrastive_rlvr.embedded import build_char_tokenizer, build_tiny_model
    from contrastive_rlvr.trainer import RLVRTrainer
    from contrastive_rlvr.trainer.trl_settings import uses_trl_loss

    result = RecipeResult(recipe)
    config = make_config(recipe, shapes, device=device, steps=steps,
                         output_dir=str(workdir / recipe), bicc_mix=bicc_mix,
                         checkpointing=checkpointing)  # fmt: skip
    result.loss_route = "TRL" if uses_trl_loss(config) else "project"
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, hidden=shapes.hidden, layers=shapes.layers,
                             heads=shapes.heads, mlp=shapes.mlp,
                             max_positions=shapes.max_positions, seed=0)  # fmt: skip
    before = {n: p.detach().float().cpu().clone() for n, p in model.named_parameters()}
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    trainer = RLVRTrainer(
        model=model,
        reward_funcs=[token_parity_reward],
        args=config,
        train_dataset=prompt_dataset(),
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)  # no printed log dict per step
    trainer.train()
    if device == "cuda":
        torch.cuda.synchronize()
        result.peak_cuda_mib = torch.cuda.max_memory_allocated() / 2**20
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    result.steps = trainer.state.global_step
    losses = [float(entry["loss"]) for entry in logs]
    result.finite_loss = (
        len(losses) == result.steps
        and all(math.isfinite(v) for v in losses)
        and trainer.nonfinite_losses == 0
        and trainer.skipped_updates == 0
    )
    after = {n: p.detach().float().cpu() for n, p in trainer.model.named_parameters()}
    result.max_abs_change = max(float((after[n] - before[n]).abs().max()) for n in before)
    result.weights_changed = result.max_abs_change > 0 and all(
        torch.isfinite(t).all() for t in after.values()
    )
    times = [float(e["step_time"]) for e in logs if "step_time" in e]
    if len(times) >= 3:
        times = times[1:]  # the first step includes the warm-up (kernels, allocator)
    result.step_time_s = statistics.median(times) if times else math.nan
    result.reward_mean = _mean(logs, "reward")
    result.bicc_conditioned_frac = _mean(logs, "bicc/conditioned_frac")
    result.rcc_baseline_shift = _mean(logs, "rcc/baseline_shift")
    # BiCC and RCC must have acted: some rows conditioned, and (after step 1, where the
    # policy still equals the reference and delta is 0) a baseline moved by delta.
    acted = result.bicc_conditioned_frac > 0 and (steps < 2 or result.rcc_baseline_shift > 0)
    result.passed = (
        result.steps == steps and result.finite_loss and result.weights_changed and acted
    )
    return result


def _mean(logs: list[dict], key: str) -> float:
    values = [float(e[key]) for e in logs if key in e]
    return statistics.fmean(values) if values else math.nan


def format_result(r: RecipeResult) -> str:
    if r.error is not None:
        return f"  {r.recipe:8s} FAIL  {r.error}"
    peak = "n/a (cpu)" if r.peak_cuda_mib is None else f"{r.peak_cuda_mib:.0f} MiB"
    return (
        f"  {r.recipe:8s} {'PASS' if r.passed else 'FAIL'}  loss {r.loss_route:7s}  "
        f"steps {r.steps}  finite loss {'yes' if r.finite_loss else 'no'}  "
        f"weights changed {'yes' if r.weights_changed else 'no'} (max |dw| {r.max_abs_change:.2e})"
        f"  step {r.step_time_s:.2f} s  peak CUDA {peak}  reward {r.reward_mean:.2f}  "
        f"BiCC conditioned {r.bicc_conditioned_frac:.2f}  RCC shift {r.rcc_baseline_shift:.1e}"
    )


def run_all(
    recipes: list[str],
    shapes: Shapes,
    *,
    device: str,
    steps: int,
    budget_s: float,
    bicc_mix: float = 1.0,
    checkpointing: bool = False,
    echo=print,
) -> list[RecipeResult]:
    """Every recipe in turn; one failing (an exception) does not stop the others; none is
    started once ``budget_s`` seconds have passed."""
    import traceback

    started = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory(prefix="gpu-train-steps-") as tmp:
        for recipe in recipes:
            elapsed = time.perf_counter() - started
            if elapsed > budget_s:
                result = RecipeResult(recipe, error=f"not run: time budget {budget_s:.0f} s spent")
            else:
                try:
                    result = run_recipe(recipe, shapes, device=device, steps=steps,
                                        workdir=Path(tmp), bicc_mix=bicc_mix,
                                        checkpointing=checkpointing)  # fmt: skip
                except Exception as err:
                    last = traceback.format_exception_only(type(err), err)[-1].strip()
                    result = RecipeResult(recipe, error=last[:300])
                    traceback.print_exc(file=sys.stderr)
            # The trainer holds reference cycles: free this recipe's models and optimizer state
            # before the next one, whose peak memory is measured from a reset.
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
            results.append(result)
            echo(format_result(result))
    return results


def main(argv: list[str] | None = None) -> int:
    from contrastive_rlvr.algorithms import RECIPES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument("--bicc-mix", type=float, default=1.0,
                        help="1.0 (BiCC as the paper states it, default); < 1 sends every "
                        "recipe through the project's loss")  # fmt: skip
    parser.add_argument("--checkpointing", action="store_true",
                        help="gradient checkpointing on (TRL's default; off by default here, "
                        "as in embedded.yaml)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    opts = parser.parse_args(argv)
    if opts.device == "cuda" and not torch.cuda.is_available():
        print("gpu_train_steps: torch.cuda.is_available() is False; use --device cpu")
        return 2
    recipes = [r.strip() for r in opts.recipes.split(",") if r.strip()]
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        parser.error(f"--recipes: unknown {unknown}; valid: {', '.join(RECIPES)}")
    if opts.device == "cpu":
        torch.set_num_threads(1)
    import contrastive_rlvr.trainer  # noqa: F401 - imports TRL, hence datasets / pandas / pyarrow

    shapes = QUICK if opts.quick else FULL
    precision = "bfloat16 autocast, float32 weights" if opts.device == "cuda" else "float32"
    print(
        f"gpu_train_steps: {len(recipes)} recipe(s) x {opts.steps} step(s), BiCC (mix "
        f"{opts.bicc_mix}) + RCC, device {opts.device}, {precision}, gradient checkpointing "
        f"{'on' if opts.checkpointing else 'off'}, budget {opts.budget_s:.0f} s; {asdict(shapes)}"
    )
    for name in ("datasets", "pandas", "pyarrow"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "STAND_IN", False):
            print(f"  {name}: the GPU check's stand-in (benchmarks/gpu_stand_ins)")
    started = time.perf_counter()
    results = run_all(recipes, shapes, device=opts.device, steps=opts.steps,
                      budget_s=opts.budget_s, bicc_mix=opts.bicc_mix,
                      checkpointing=opts.checkpointing)  # fmt: skip
    passed = sum(r.passed for r in results)
    verdict = "PASS" if passed == len(results) else "FAIL"
    print(
        f"gpu_train_steps: {verdict} ({passed}/{len(results)} recipes) in "
        f"{time.perf_counter() - started:.0f} s"
    )
    if opts.json is not None:
        opts.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
