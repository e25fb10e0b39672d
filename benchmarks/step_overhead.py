"""Step-time overhead of this trainer and of BiCC and RCC, measured in one run.

Arms, on one model and config (the embedded task, G = 8, 4 prompts a step):

- ``trl``: stock ``trl.GRPOTrainer`` (loss_type grpo, beta 0, clip 0.2);
- ``grpo``: ``RLVRTrainer`` with the same settings (no BiCC, no RCC, no delta log);
- ``bicc``: as ``grpo`` with BiCC on (context ratio 0.4);
- ``rcc``: as ``grpo`` with RCC on (frozen reference);
- ``bicc_noshare``: BiCC with ``share_prefix`` off; ``bicc_consistent``: BiCC in
  the consistent ratio mode (no plain-prompt old log-probs to compute on-policy).

The arms alternate round by round, so a slow spell of the shared machine hits
all of them; each round trains every arm for ``--steps`` steps and keeps TRL's
per-step ``step_time`` (generation + loss + optimizer), dropping each run's
first step (warm-up). Printed: the median step time of each arm and the ratios
grpo/trl, bicc/grpo and rcc/grpo, with the targets 1.05, 1.30 and 1.05.

    python benchmarks/step_overhead.py --rounds 5 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from contrastive_rlvr.embedded import (
    arithmetic_reward,
    build_embedded_default,
    load_char_tokenizer,
    make_datasets,
)
from contrastive_rlvr.trainer import RLVRConfig, RLVRTrainer

TARGETS = {"grpo/trl": 1.05, "bicc/grpo": 1.30, "rcc/grpo": 1.05}


def common_args(out: Path, steps: int, group: int, prompts: int, max_len: int) -> dict:
    return dict(
        output_dir=str(out),
        num_generations=group,
        per_device_train_batch_size=group * prompts,
        max_completion_length=max_len,
        max_steps=steps,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=0,
        gradient_checkpointing=False,
        disable_tqdm=True,
        bf16=False,
        beta=0.0,
        temperature=1.0,
    )


def run_arm(arm: str, model_dir: Path, out: Path, args: dict, train) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = load_char_tokenizer(model_dir)
    if arm == "trl":
        config = GRPOConfig(**args, loss_type="grpo", epsilon=0.2, scale_rewards="group")
        cls = GRPOTrainer
    else:
        switches = {
            "grpo": {},
            "bicc": {"bicc": True},
            "bicc_noshare": {"bicc": True, "share_prefix": False},
            "bicc_consistent": {"bicc": True, "bicc_ratio_mode": "consistent"},
            "rcc": {"rcc": True},
        }[arm]
        config = RLVRConfig(
            **args, recipe="grpo", log_delta=False, bicc_context_ratio=0.4, **switches
        )
        cls = RLVRTrainer
    trainer = cls(
        model=model,
        reward_funcs=[arithmetic_reward],
        args=config,
        train_dataset=train,
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    times = [h["step_time"] for h in trainer.state.log_history if "step_time" in h]
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per arm per round")
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=16)
    parser.add_argument("--terms", type=int, default=3, help="embedded task operands")
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="a warm-started embedded model (default: build one, 300 SFT steps)",
    )
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)

    from contrastive_rlvr.embedded import EmbeddedSettings, TaskConfig

    tmp = Path(tempfile.mkdtemp(prefix="step_overhead_"))
    task = TaskConfig(terms=opts.terms)
    model_dir = opts.model_dir
    if model_dir is None:
        model_dir = tmp / "model"
        build_embedded_default(model_dir, settings=EmbeddedSettings(task=task), sft_steps=300)
    train, _ = make_datasets(task)
    args = common_args(
        tmp / "out", opts.steps, opts.group, opts.prompts, opts.max_completion_length
    )

    arms = ["trl", "grpo", "bicc", "bicc_noshare", "bicc_consistent", "rcc"]
    times: dict[str, list[float]] = {a: [] for a in arms}
    started = time.perf_counter()
    for r in range(opts.rounds):
        order = arms if r % 2 == 0 else arms[::-1]
        for arm in order:
            times[arm] += run_arm(arm, model_dir, tmp / "out", args, train)
        print(
            f"round {r + 1}/{opts.rounds} done ({time.perf_counter() - started:.0f} s)", flush=True
        )

    median = {a: statistics.median(t) for a, t in times.items()}
    print(
        f"\nmedian step time over {len(times['trl'])} steps per arm "
        f"(G={opts.group}, {opts.prompts} prompts, max {opts.max_completion_length} tokens, "
        f"{opts.threads} thread(s)):"
    )
    for arm in arms:
        print(f"  {arm:12s} {median[arm] * 1000:8.1f} ms")
    ratios = {
        "grpo/trl": median["grpo"] / median["trl"],
        "bicc/grpo": median["bicc"] / median["grpo"],
        "rcc/grpo": median["rcc"] / median["grpo"],
    }
    print(
        f"  bicc/grpo without the shared prefix: {median['bicc_noshare'] / median['grpo']:.3f}; "
        f"in the consistent ratio mode: {median['bicc_consistent'] / median['grpo']:.3f}"
    )
    for name, value in ratios.items():
        verdict = "ok" if value <= TARGETS[name] else "ABOVE TARGET"
        print(f"  {name:10s} {value:.3f}  (target <= {TARGETS[name]:.2f}: {verdict})")


if __name__ == "__main__":
    main()
