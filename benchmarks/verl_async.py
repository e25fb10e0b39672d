"""verl's sync mode against its colocated asynchronous one, the same recipe and steps.

The shipped GRPO + BiCC + RCC recipe (recipes/verl/grpo_bicc_rcc.yaml) trains the
embedded arithmetic task's warm-started tiny Llama through verl's own ``main_ppo`` on
the CPU (tests/verl_cpu.py, as ``make test-verl-real``), once per seed in each mode:
``trainer.v1.trainer_mode=crlvr_sync`` and ``crlvr_colocate_async`` (rows one version
old from step 2; the stale-rollout defaults of docs/algorithms.md). The overrides are
benchmarks/two_engines.py's verl arm (sizes, devices, the task's reward, lr 1e-4,
``bicc_max_seq_len`` 256) plus the seed (``data.seed``, ``actor_rollout_ref.rollout.seed``);
the two modes of a seed run one after the other, in alternating order over seeds.

Reported per mode: the training reward's change (mean of the last ``--window`` steps
minus the first's) per seed and its mean over seeds with a 95% t-interval; the held-out
avg@4 (verl's validation, temperature 1) before and after; and the step time: verl's
``timing_s/step`` summed over the steps (generation, old / reference log-probs,
advantages, the update and the weight sync; validation and start-up excluded), with
the ratio colocate_async / sync per seed and its mean.

Usage (from the repository root, after ``make .venv-verl/.installed``):
    OMP_NUM_THREADS=1 .venv-verl/bin/python benchmarks/verl_async.py \\
        --out runs/verl-async --steps 30 --seeds 0,1,2 --window 10
Results: docs/results/verl-async/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("crlvr_sync", "crlvr_colocate_async")
#: Two-sided 95% t quantiles by degrees of freedom (seeds - 1).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}


def interval(values: list[float]) -> dict[str, float]:
    """Mean and 95% t-interval over seeds (no interval from one seed)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": len(values)}
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": len(values)}


def run_mode(task: dict[str, Any], files, out: Path, mode: str, seed: int, steps: int):
    """One verl run; returns its metrics by step and its wall time."""
    from two_engines import verl_overrides
    from verl_runs import main_ppo, mode_overrides

    run = out / f"{mode}-seed{seed}"
    run.mkdir(parents=True, exist_ok=False)
    start = time.time()
    code, metrics, log = main_ppo(
        "grpo_bicc_rcc",
        [
            *verl_overrides(task, files, run, steps),
            *mode_overrides(mode),
            f"data.seed={seed}",
            f"actor_rollout_ref.rollout.seed={seed}",
        ],
        run,
        "run",
        timeout_s=max(900, 60 * steps),
    )
    if code != 0:
        tail = "\n".join(log.splitlines()[-40:])
        sys.exit(f"{mode} seed {seed} exited {code}: see {run / 'run.log'}\n{tail}")
    return metrics, time.time() - start


def summarise(metrics: dict[int, dict], steps: int, window: int) -> dict[str, Any]:
    """Reward curve, its change over the run, held-out before / after, step times."""
    from two_engines import verl_heldout

    reward = [metrics[s]["critic/score/mean"] for s in range(1, steps + 1)]
    times = [metrics[s]["timing_s/step"] for s in range(1, steps + 1)]
    stale = [metrics[s].get("training/off_policy/trajectory_staleness/mean", 0) for s in metrics]
    return {
        "reward": reward,
        "reward_change": statistics.fmean(reward[-window:]) - statistics.fmean(reward[:window]),
        "heldout": verl_heldout(metrics),
        "step_time_total": sum(times),
        "step_time_after_first": statistics.fmean(times[1:]),
        "staleness_max": max(stale),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/verl-async"))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--window", type=int, default=10, help="steps at each end of the curve")
    args = ap.parse_args()
    args.out = args.out.resolve()
    if args.out.exists() and any(args.out.iterdir()):
        sys.exit(f"{args.out} is not empty: give a new --out")
    from two_engines import build, verl_parquet

    task = build(args.out / "task")
    # task.jsonl holds the training rows, then the held-out ones: their ids are the split
    held = set(range(len(task["train_rows"]), len(task["train_rows"]) + len(task["val_rows"])))
    files = verl_parquet(task, held, args.out)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs: dict[str, dict[int, dict]] = {m: {} for m in MODES}
    for k, seed in enumerate(seeds):
        for mode in MODES if k % 2 == 0 else MODES[::-1]:
            metrics, wall = run_mode(task, files, args.out, mode, seed, args.steps)
            runs[mode][seed] = {**summarise(metrics, args.steps, args.window), "wall_s": wall}
            print(
                f"{mode} seed {seed}: reward change {runs[mode][seed]['reward_change']:+.3f}, "
                f"steps {runs[mode][seed]['step_time_total']:.1f} s, wall {wall:.0f} s",
                flush=True,
            )
    summary = {
        mode: {
            "reward_change": interval([runs[mode][s]["reward_change"] for s in seeds]),
            "heldout_change": interval(
                [runs[mode][s]["heldout"]["after"] - runs[mode][s]["heldout"]["before"]
                 for s in seeds if runs[mode][s]["heldout"]]
            ),
            "step_time_total": interval([runs[mode][s]["step_time_total"] for s in seeds]),
        }
        for mode in MODES
    }  # fmt: skip
    ratios = [
        runs["crlvr_colocate_async"][s]["step_time_total"]
        / runs["crlvr_sync"][s]["step_time_total"]
        for s in seeds
    ]
    summary["step_time_ratio_async_over_sync"] = interval(ratios)
    summary["reward_change_async_minus_sync"] = interval(
        [runs["crlvr_colocate_async"][s]["reward_change"] - runs["crlvr_sync"][s]["reward_change"]
         for s in seeds]
    )  # fmt: skip
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs, "summary": summary}
    (args.out / "summary.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
