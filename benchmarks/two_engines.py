"""One recipe, one task, two engines: the TRL path and verl's own workers, side by side.

The shipped GRPO + BiCC + RCC recipe (recipes/trl/grpo_bicc_rcc.yaml and
recipes/verl/grpo_bicc_rcc.yaml) trains the embedded arithmetic task's warm-started
tiny Llama for ``--steps`` steps on each engine, then the script checks:

1. whether the reward rises on both: the training reward (share of correct completions
   of the step's 4 prompts x 8) over the first and last ``--window`` steps and its
   least-squares trend, each with a 95% interval, and the held-out avg@4 (temperature 1,
   the same problems) before and after, each engine its own evaluator;
2. the per-step quantities that must agree do, on the same completions: every verl
   step's advantage inputs and outputs are saved (tests/verl_dump.py) and fed to the
   TRL path's own stages (its log-prob pass and advantage stage, built from the TRL
   run's config): RCC's delta, baseline b* and advantages must equal verl's; ConSPO's
   targets (labels R > b*, the margin at the step's progress, the window normaliser)
   from the TRL path's ConSPO stage must equal verl's ``crlvr_conspo_rcc`` estimator's
   on the same rows; and at step 1 (both engines still at the warm start) verl's
   log-probs of its samples are compared with a float32 and a bf16 forward of the same
   tokens (verl's actor computes in bf16: they agree to its rounding).

Both arms use the recipes as shipped, overriding only sizes, devices, the task's reward
and two settings of the tiny task: the learning rate (1e-4 instead of the recipe's 1e-6,
which moves a 138k-parameter model nowhere in tens of steps) and BiCC's
``bicc_max_seq_len`` (256, the character tokenizer's context room, as the embedded
default). verl runs on the CPU through the test-side modules tests/verl_cpu.py and
tests/verl_runs.py (``make test-verl-real`` uses the same).

Usage (from the repository root, after ``make setup .venv-verl/.installed``):
    .venv/bin/python benchmarks/two_engines.py --out runs/two-engines --steps 60 --window 10
    (``--bicc false``: the same recipe with BiCC off on both engines)
Results: docs/results/two-engines.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"
REWARD = "contrastive_rlvr.embedded.task:arithmetic_reward"
GROUP, PROMPTS, TRAIN_ROWS, VAL_ROWS = 8, 4, 64, 64
MAX_RESPONSE = 16
LR = 1e-4
BICC_MAX_SEQ_LEN = 256


# ----------------------------------------------------------------------------- task


def build(out: Path) -> dict[str, Any]:
    """The warm-started model and the task: 64 training and 64 held-out problems, as
    verl parquet and as one jsonl for the TRL path (conversational prompts, rendered by
    the same chat template on both engines)."""
    sys.path.insert(0, str(TESTS))
    from verl_runs import build_task

    task = build_task(out, train_rows=TRAIN_ROWS, val_rows=VAL_ROWS)
    rows = [*task["train_rows"], *task["val_rows"]]
    path = out / "task.jsonl"
    with open(path, "w") as f:
        for i, ex in enumerate(rows):
            prompt = [{"role": "user", "content": ex["prompt"]}]
            f.write(json.dumps({"prompt": prompt, "answer": ex["answer"], "id": i}) + "\n")
    (out / "heldout_prompts.json").write_text(json.dumps([ex["prompt"] for ex in task["val_rows"]]))
    return {**task, "jsonl": path}


# ----------------------------------------------------------------------------- TRL arm


def trl_arm(task: dict[str, Any], out: Path, steps: int, bicc: str = "true") -> Path:
    """``contrastive-rlvr train`` with the shipped TRL recipe on the task; returns its folder."""
    run = out / "trl"
    cmd = [
        str(ROOT / ".venv" / "bin" / "contrastive-rlvr"),
        "train",
        "--config", str(ROOT / "recipes" / "trl" / "grpo_bicc_rcc.yaml"),
        "--model", str(task["model"]),
        "--dataset", str(task["jsonl"]),
        "--rewards", REWARD,
        "--heldout_reward", REWARD,
        "--instruction", "none",
        "--heldout_size", str(VAL_ROWS),
        "--eval_n", "4",
        "--output_dir", str(run),
        # sizes and devices
        "--max_steps", str(steps),
        "--num_generations", str(GROUP),
        "--per_device_train_batch_size", str(GROUP * PROMPTS),
        "--gradient_accumulation_steps", "1",
        "--max_completion_length", str(MAX_RESPONSE),
        "--bf16", "false",
        "--use_vllm", "false",
        "--activation_checkpointing", "false",
        "--save_strategy", "no",
        # the tiny task's two settings (module docstring); the schedule as verl's default
        "--learning_rate", str(LR),
        "--lr_scheduler_type", "constant",
        "--warmup_steps", "0",
        "--bicc_max_seq_len", str(BICC_MAX_SEQ_LEN),
        "--bicc", bicc,
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(out / "trl.log", "w") as log:
        code = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        sys.exit(f"the TRL arm exited {code}: see {out / 'trl.log'}")
    return run


def heldout_ids(run: Path) -> set[int]:
    """The problems the TRL run held out (its seeded split), from its samples."""
    with open(run / "samples" / "heldout_before.jsonl") as f:
        return {int(json.loads(line)["problem_id"]) for line in f}


# ----------------------------------------------------------------------------- verl arm


def verl_parquet(task: dict[str, Any], held: set[int], out: Path) -> tuple[Path, Path]:
    """The TRL run's split as verl parquet: the same training and held-out problems."""
    import pandas as pd

    rows = [json.loads(line) for line in task["jsonl"].read_text().splitlines()]

    def frame(part: list[dict], name: str) -> Path:
        records = [
            {
                "data_source": "arithmetic",
                "prompt": r["prompt"],
                "reward_model": {"style": "rule", "ground_truth": r["answer"]},
                "extra_info": {"index": r["id"]},
            }
            for r in part
        ]
        path = out / f"{name}.parquet"
        pd.DataFrame(records).to_parquet(path)
        return path

    return (
        frame([r for r in rows if r["id"] not in held], "verl_train"),
        frame([r for r in rows if r["id"] in held], "verl_val"),
    )


def verl_overrides(task: dict[str, Any], files: tuple[Path, Path], run: Path, steps: int):
    """Sizes, devices, the task's reward and the tiny task's two settings; the rest is
    the shipped recipe's."""
    from verl_runs import devices

    train, val = files
    return [
        f"data.train_files={train}",
        f"data.val_files={val}",
        f"data.train_batch_size={PROMPTS}",
        "data.max_prompt_length=16",
        f"data.max_response_length={MAX_RESPONSE}",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={task['model']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",  # one update a step, as TRL
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={GROUP}",
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={GROUP}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={GROUP}",
        # held-out as the TRL path scores it: avg@4 at the training temperature
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "reward.num_workers=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
        f"trainer.total_training_steps={steps}",
        f"trainer.total_epochs={steps}",  # as many passes over the 64 problems as it takes
        "trainer.save_freq=-1",
        f"trainer.test_freq={steps}",
        f"trainer.default_local_dir={run / 'checkpoints'}",
        "trainer.logger=[console,file]",
        f"reward.custom_reward_function.path={TESTS / 'verl_task_reward.py'}",
        "reward.custom_reward_function.name=compute_score",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        f"actor_rollout_ref.actor.policy_loss.bicc_max_seq_len={BICC_MAX_SEQ_LEN}",
        *devices(1),
    ]


def verl_arm(
    task: dict[str, Any], held: set[int], out: Path, steps: int, bicc: str = "true"
) -> dict[int, dict]:
    """verl's ``main_ppo`` with the shipped recipe; every step's advantage batch saved."""
    from verl_runs import main_ppo

    run = out / "verl"
    run.mkdir(exist_ok=True)
    files = verl_parquet(task, held, out)
    code, metrics, log = main_ppo(
        "grpo_bicc_rcc",
        [
            *verl_overrides(task, files, run, steps),
            f"actor_rollout_ref.actor.policy_loss.bicc={bicc}",
        ],
        run,
        "run",
        python=str(VERL_PYTHON),
        modules=("verl_cpu", "verl_dump"),
        env={"CRLVR_DUMP_DIR": str(run / "dumps")},
        timeout_s=max(900, 120 * steps),
    )
    if code != 0:
        tail = "\n".join(log.splitlines()[-40:])
        sys.exit(f"the verl arm exited {code}: see {run / 'run.log'}\n{tail}")
    return metrics


# ----------------------------------------------------------------------------- verl's ConSPO


# Run in verl's environment on the saved batches: the crlvr_conspo_rcc estimator's
# targets for the same rows, with the shipped conspo_rcc recipe's settings.
_VERL_CONSPO = r"""
import sys, types, torch, yaml
from pathlib import Path
from contrastive_rlvr.integrations.verl.advantages import ESTIMATORS
from contrastive_rlvr.integrations.verl.config import CrlvrPolicyLossConfig
from contrastive_rlvr.integrations.verl.trainer import CrlvrTrainer
recipe = yaml.safe_load(Path(sys.argv[1]).read_text())
opts = recipe["actor_rollout_ref"]["actor"]["policy_loss"]
opts = CrlvrPolicyLossConfig(**{k: v for k, v in opts.items() if not k.startswith("_")})
spec = ESTIMATORS[recipe["algorithm"]["adv_estimator"]]
pad = lambda rows: torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
for path in sys.argv[2:]:
    d = torch.load(path)
    padded = {"old_log_probs": pad(d["old_log_probs"]).float(),
              "ref_log_prob": pad(d["ref_log_prob"]).float()}
    # the trainer's own keyword arguments, at the saved step's progress
    driver = types.SimpleNamespace(crlvr=opts, _progress=lambda: d["progress"])
    kwargs = CrlvrTrainer._estimator_kwargs(driver, spec, padded)
    adv, _ = spec.fn(token_level_rewards=pad(d["rm_scores"]).float(),
                     response_mask=pad(d["response_mask"]).float(), index=d["index"], **kwargs)
    torch.save(adv[:, 0].clone(), path.replace(".pt", ".conspo.pt"))
"""


def verl_conspo_targets(dumps: list[Path]) -> None:
    """verl's ConSPO targets (B,) of each saved batch, next to it as ``*.conspo.pt``."""
    recipe = ROOT / "recipes" / "verl" / "conspo_rcc.yaml"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [str(VERL_PYTHON), "-c", _VERL_CONSPO, str(recipe), *map(str, dumps)]
    subprocess.run(cmd, env=env, check=True)


# ----------------------------------------------------------------------------- comparison


def _padded(rows: list, value: float = 0.0):
    import torch

    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=value)


def trl_config(run: Path, unset: tuple[str, ...] = (), **changes: Any):
    """The TRL run's resolved config (its config.yaml), as an RLVRConfig, with ``changes``
    and the fields ``unset`` left to their defaults."""
    import dataclasses

    import yaml

    from contrastive_rlvr import RLVRConfig

    values = yaml.safe_load((run / "config.yaml").read_text())
    values.pop("generation_batch_size", None)  # derived by TRL from steps_per_generation
    for name in unset:
        values.pop(name, None)
    values.update(changes)
    names = {f.name for f in dataclasses.fields(RLVRConfig) if f.init}
    return RLVRConfig(**{k: v for k, v in values.items() if k in names})


def trl_stages(cfg, tokenizer):
    """The TRL path's log-prob pass and advantage stage, built as its trainer builds them."""
    from contrastive_rlvr.trainer.stages.build import RunFacts, build_stages

    facts = RunFacts(tokenizer=tokenizer, group_size=GROUP, has_reference=True)
    pipeline = build_stages(cfg, facts)["train"]
    return {s.name: s for s in pipeline.stages if s.name in ("logprobs", "advantages")}


def trl_on_verl_batch(stages, d: dict, order: list[int]) -> dict[str, Any]:
    """Run the TRL path's stages on a verl batch, its rows in group order; the sampler's
    and the reference's log-probs are verl's own (the policy and reference passes)."""
    import torch

    from contrastive_rlvr.trainer.stages.base import Batch, StageContext

    def pick(rows: list) -> list:
        return [rows[i] for i in order]

    mask = _padded(pick(d["response_mask"])).long()
    old = _padded(pick(d["old_log_probs"]))  # in the dtype verl computed them in
    ref = _padded(pick(d["ref_log_prob"]))
    rewards = torch.stack([r.float().sum() for r in pick(d["rm_scores"])])
    prompts = _padded(pick(d["prompts"]))
    # The ids only give the passes their shapes: the passes answer with verl's log-probs.
    data = {
        "prompt_ids": prompts,
        "prompt_mask": torch.ones_like(prompts),
        "completion_ids": _padded(pick(d["responses"])),
        "completion_mask": mask,
    }
    ctx = StageContext(
        group_size=GROUP,
        gather=lambda t: t,
        gather_object=lambda x: x,
        log=lambda k, v: None,
        policy_logps=lambda *a, **k: old,
        reference_logps=lambda *a, **k: ref,
    )
    batch = Batch(data=data, rewards=rewards)
    for name in ("logprobs", "advantages"):
        batch = stages[name](batch, ctx)
    return {"rewards": rewards, "delta": batch.shared["delta"], **batch.data}


def step_one_logprobs(model_dir: Path, d: dict, dtype: str = "float32") -> tuple[float, float]:
    """Max and mean |verl's log-prob - the TRL path's| over step 1's response tokens,
    both engines at the warm start (the TRL side's forward in ``dtype``; verl's actor
    computes in the recipe's bf16 mixed precision)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    diffs = []
    with torch.no_grad():
        for p, r, m, lp in zip(
            d["prompts"], d["responses"], d["response_mask"], d["old_log_probs"], strict=True
        ):
            n = int(m.sum())
            ids = torch.cat([p, r[:n]]).unsqueeze(0)
            logits = model(ids).logits[0, len(p) - 1 : -1].float()
            ours = torch.log_softmax(logits, -1).gather(-1, r[:n, None]).squeeze(-1)
            diffs.append((ours - lp[:n].float()).abs())
    flat = torch.cat(diffs)
    return float(flat.max()), float(flat.mean())


def agreement(task: dict[str, Any], run_trl: Path, dumps: list[Path], verl_metrics: dict):
    """Per step: the TRL path's quantities on verl's batch against verl's own."""
    import torch
    from transformers import AutoTokenizer

    from contrastive_rlvr.algorithms import conspo_margin
    from contrastive_rlvr.embedded.task import arithmetic_reward

    tokenizer = AutoTokenizer.from_pretrained(task["model"])
    cfg = trl_config(run_trl)
    grpo = trl_stages(cfg, tokenizer)
    # the same run as ConSPO + RCC: no clip range, no KL term (ConSPO has neither)
    conspo_cfg = trl_config(
        run_trl,
        unset=("epsilon", "epsilon_high", "clip_low", "clip_high", "loss_type"),
        recipe="conspo",
        bicc=False,
        beta=0.0,
    )
    conspo = trl_stages(conspo_cfg, tokenizer)
    gold = {
        r["prompt"][0]["content"]: r["answer"]
        for r in map(json.loads, task["jsonl"].read_text().splitlines())
    }
    rows = []
    for path in dumps:
        d = torch.load(path)
        order = sorted(range(len(d["index"])), key=lambda i: d["index"][i])  # groups together
        step = d["step"]
        verl_adv = torch.stack([a[0].float() for a in d["advantages"]])[order]
        ours = trl_on_verl_batch(grpo, d, order)
        # the reward: the TRL path's reward function on verl's decoded samples
        text = [
            tokenizer.decode(r[: int(m.sum())], skip_special_tokens=True)
            for r, m in zip(d["responses"], d["response_mask"], strict=True)
        ]
        asked = [tokenizer.decode(p, skip_special_tokens=True) for p in d["prompts"]]
        scores = arithmetic_reward(asked, text, [gold[a] for a in asked])
        trl_rewards = torch.tensor(scores)[order]
        # RCC's baseline b* (TRL's ConSPO stage writes it per row) and its shift off the mean
        cons = trl_on_verl_batch(conspo, d, order)
        rewards = ours["rewards"]
        means = rewards.view(-1, GROUP).mean(-1).repeat_interleave(GROUP)
        shift = cons["conspo_baseline"] - means
        verl_targets = torch.load(str(path).replace(".pt", ".conspo.pt"))[order]
        positive = verl_targets > 0
        trl_positive = rewards > cons["conspo_baseline"]
        groups = len(rewards) // GROUP
        trl_scale = groups / max(float(cons["conspo_groups"]), 1.0)
        margin = conspo_margin(
            d["progress"], max_margin=cfg.conspo_max_margin, warmup=cfg.conspo_warmup
        )
        m = verl_metrics.get(step, {})
        rows.append(
            {
                "step": step,
                "reward_mean": float(rewards.mean()),
                "reward_mismatches": int((trl_rewards != rewards).sum()),
                "advantage_max_abs_diff": float((ours["advantages"] - verl_adv).abs().max()),
                "delta_mean_trl": float(ours["delta"].float().mean()),
                "delta_mean_verl": m.get("crlvr/rcc/delta_mean"),
                "baseline_shift_mean_trl": float(shift.mean()),
                "baseline_shift_mean_verl": m.get("crlvr/rcc/baseline_shift_mean"),
                "baseline_shift_max_abs_trl": float(shift.abs().max()),
                "baseline_shift_max_abs_verl": m.get("crlvr/rcc/baseline_shift_max_abs"),
                "conspo_label_mismatches": int((positive != trl_positive).sum()),
                "conspo_margin_diff": (
                    abs(float(verl_targets[positive].mean()) - 1.0 - margin)
                    if bool(positive.any())
                    else 0.0
                ),
                "conspo_scale_diff": (
                    abs(float(-verl_targets[~positive].mean()) - trl_scale)
                    if bool((~positive).any())
                    else 0.0
                ),
            }
        )
    return rows


# ----------------------------------------------------------------------------- report


def rise(per_step: list[float], window: int) -> dict[str, float]:
    """Mean training reward of the first and last ``window`` steps and a 95% interval of
    the difference (Welch, the steps as the units: a step's 32 samples are correlated)."""
    first, last = per_step[:window], per_step[-window:]

    def mean_var(xs: list[float]) -> tuple[float, float]:
        m = sum(xs) / len(xs)
        return m, sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)

    (m0, v0), (m1, v1) = mean_var(first), mean_var(last)
    half = 1.96 * math.sqrt(v0 / len(first) + v1 / len(last))
    return {"first": m0, "last": m1, "diff": m1 - m0, "low": m1 - m0 - half, "high": m1 - m0 + half}


def trend(per_step: list[float]) -> dict[str, float]:
    """The least-squares slope of the training reward over the steps, as the change over
    the whole run, with a 95% interval (the steps' residuals as independent)."""
    n = len(per_step)
    xs = range(1, n + 1)
    mx, my = (n + 1) / 2, sum(per_step) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, per_step, strict=True)) / sxx
    resid = [y - my - slope * (x - mx) for x, y in zip(xs, per_step, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / max(n - 2, 1) / sxx)
    return {"change": slope * n, "low": (slope - 1.96 * se) * n, "high": (slope + 1.96 * se) * n}


def trl_curve(run: Path) -> list[float]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["reward"] for r in records if "reward" in r and "step" in r]


def read_verl_metrics(path: Path) -> dict[int, dict]:
    """verl's file logger output: the metrics of each step."""
    steps: dict[int, dict] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        steps.setdefault(int(record["step"]), {}).update(record["data"])
    return steps


def verl_heldout(metrics: dict[int, dict]) -> dict[str, float]:
    """verl's validation (avg@4 at temperature 1): before training and at the last step."""
    found = {}
    for step, m in sorted(metrics.items()):
        for key, value in m.items():
            if key.startswith("val-core/") and "/mean@4" in key:
                found[step] = value
    steps = sorted(found)
    return {"before": found[steps[0]], "after": found[steps[-1]]} if len(steps) > 1 else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/two-engines"))
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--window", type=int, default=10, help="steps at each end of the curve")
    ap.add_argument(
        "--bicc",
        choices=("true", "false"),
        default="true",
        help="false: the same recipe with BiCC off on both engines (GRPO + RCC)",
    )
    ap.add_argument(
        "--compare_only",
        action="store_true",
        help="no training: compare the runs already in --out (checks 1 and 2 again)",
    )
    args = ap.parse_args()
    args.out = args.out.resolve()  # verl runs in its own folder
    if not VERL_PYTHON.exists():
        sys.exit(f"{VERL_PYTHON} not found: build it with `make .venv-verl/.installed`")
    if args.compare_only:
        sys.path.insert(0, str(TESTS))
        task = {"model": args.out / "model", "jsonl": args.out / "task.jsonl"}
        run_trl = args.out / "trl"
        verl_metrics = read_verl_metrics(args.out / "verl" / "run.jsonl")
        # what the runs were: their own records, not this command line's defaults
        args.steps = max(s for s, m in verl_metrics.items() if "critic/score/mean" in m)
        args.bicc = str(trl_config(run_trl).bicc).lower()
    else:
        if args.out.exists() and any(args.out.iterdir()):
            sys.exit(f"{args.out} is not empty: give a new --out, or --compare_only")
        args.out.mkdir(parents=True, exist_ok=True)
        task = build(args.out)
        run_trl = trl_arm(task, args.out, args.steps, bicc=args.bicc)
        verl_metrics = verl_arm(task, heldout_ids(run_trl), args.out, args.steps, bicc=args.bicc)
    dumps = sorted(
        (args.out / "verl" / "dumps").glob("step_*[0-9].pt"),
        key=lambda p: int(p.stem.split("_")[1]),
    )
    # A run that stopped short (an epoch limit, a crash after a checkpoint) must not be
    # reported as the run asked for.
    counts = {
        "TRL steps logged": len(trl_curve(run_trl)),
        "verl steps logged": sum("critic/score/mean" in m for m in verl_metrics.values()),
        "verl batches saved": len(dumps),
    }
    short = {what: n for what, n in counts.items() if n != args.steps}
    if short:
        sys.exit(f"expected {args.steps} steps on both engines, found {short}: see {args.out}")
    verl_conspo_targets(dumps)
    import torch

    first = torch.load(dumps[0])
    logprobs = {dt: step_one_logprobs(task["model"], first, dt) for dt in ("float32", "bfloat16")}
    rows = agreement(task, run_trl, dumps, verl_metrics)
    summary = json.loads((run_trl / "summary.json").read_text())
    verl_curve = [verl_metrics[s]["critic/score/mean"] for s in sorted(verl_metrics)
                  if "critic/score/mean" in verl_metrics[s]]  # fmt: skip
    report = {
        "steps": args.steps,
        "bicc": args.bicc,
        "trl": {
            "reward": rise(trl_curve(run_trl), args.window),
            "trend": trend(trl_curve(run_trl)),
            "heldout": {
                "before": summary["heldout_avg@n_before"],
                "after": summary["heldout_avg@n_after"],
            },
        },
        "verl": {
            "reward": rise(verl_curve, args.window),
            "trend": trend(verl_curve),
            "heldout": verl_heldout(verl_metrics),
        },
        "step1_logprob_abs_diff": {
            dt: {"max": worst, "mean": mean} for dt, (worst, mean) in logprobs.items()
        },
        "per_step": rows,
    }
    (args.out / "two_engines.json").write_text(json.dumps(report, indent=1))
    for engine in ("trl", "verl"):
        r, h = report[engine]["reward"], report[engine]["heldout"]
        print(
            f"{engine:4s} training reward, first {args.window} steps {r['first']:.3f} -> last "
            f"{args.window} {r['last']:.3f} (diff {r['diff']:+.3f}, 95% CI {r['low']:+.3f} to "
            f"{r['high']:+.3f}); held-out avg@4 {h.get('before', float('nan')):.3f} -> "
            f"{h.get('after', float('nan')):.3f}"
        )
        t = report[engine]["trend"]
        print(
            f"{engine:4s} training reward trend over the run {t['change']:+.3f} (95% CI "
            f"{t['low']:+.3f} to {t['high']:+.3f})"
        )
    for dt, (worst, mean) in logprobs.items():
        print(f"step 1 log-probs, verl vs a {dt} forward: max |diff| {worst:.2e}, mean {mean:.2e}")
    keys = (
        "reward_mismatches", "advantage_max_abs_diff", "conspo_label_mismatches",
        "conspo_margin_diff", "conspo_scale_diff",
    )  # fmt: skip
    for key in keys:
        print(f"{key}: worst over {len(rows)} steps {max(r[key] for r in rows):.3g}")
    shift = max(
        abs(r["baseline_shift_mean_trl"] - r["baseline_shift_mean_verl"])
        for r in rows
        if r["baseline_shift_mean_verl"] is not None
    )
    print(f"RCC baseline shift (mean of b* - group mean), |TRL - verl| worst: {shift:.3g}")
    print(f"written: {args.out / 'two_engines.json'}")


if __name__ == "__main__":
    main()
