"""Time the embedded default's build + SFT warm start and its held-out avg@n.

Optionally follows with plain TRL GRPO (stock ``GRPOTrainer``, the project's
trainer not involved) to check the premise of the default: RL with the
task's checker raises held-out accuracy over the noisy-SFT start.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/embedded_warm_start.py \\
        --seed 0 [--terms 4] [--sft-steps 800] [--grpo-steps 300]

Prints one JSON line: wall and CPU seconds of build + SFT, held-out avg@n
after SFT (and after GRPO). CPU seconds are the better measure on a shared
machine: wall time grows with other users' load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time

import torch

from contrastive_rlvr.embedded import (
    EmbeddedSettings,
    TaskConfig,
    arithmetic_reward,
    build_embedded_default,
    heldout_accuracy,
    max_completion_tokens,
)


def grpo(model, tokenizer, train, *, steps: int, seed: int):
    """Stock TRL GRPO as the notes' probe ran it: 4 prompts x 8 samples, lr 1e-4, beta 0."""
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="embedded-grpo-"),
        per_device_train_batch_size=32,
        num_generations=8,
        max_completion_length=max_completion_tokens(train, tokenizer),
        temperature=1.0,
        beta=0.0,
        learning_rate=1e-4,
        lr_scheduler_type="constant",
        max_steps=steps,
        logging_steps=max(steps // 6, 1),
        save_strategy="no",
        report_to="none",
        seed=seed,
        disable_tqdm=True,
        use_cpu=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[arithmetic_reward],
        args=args,
        train_dataset=train,
        processing_class=tokenizer,
    )
    trainer.train()
    return trainer.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--terms", type=int, default=3)
    parser.add_argument("--sft-steps", type=int, default=None, help="default: the settings'")
    parser.add_argument("--n", type=int, default=4, help="samples per held-out problem")
    parser.add_argument("--grpo-steps", type=int, default=0, help="0: no GRPO check")
    parser.add_argument("--threads", type=int, default=1)
    a = parser.parse_args()
    torch.set_num_threads(a.threads)

    settings = EmbeddedSettings(seed=a.seed, task=TaskConfig(terms=a.terms))
    wall, cpu = time.perf_counter(), time.process_time()
    model, tokenizer, train, heldout = build_embedded_default(
        settings=settings, sft_steps=a.sft_steps
    )
    result = {
        "settings": dataclasses.asdict(settings),
        "sft_steps": a.sft_steps or settings.sft.steps,
        "build_sft_wall_s": round(time.perf_counter() - wall, 1),
        "build_sft_cpu_s": round(time.process_time() - cpu, 1),
        "heldout_size": len(heldout),
        f"heldout_avg@{a.n}_sft": heldout_accuracy(model, tokenizer, heldout, n=a.n, seed=0),
    }
    if a.grpo_steps:
        wall = time.perf_counter()
        model = grpo(model, tokenizer, train, steps=a.grpo_steps, seed=a.seed)
        result["grpo_steps"] = a.grpo_steps
        result["grpo_wall_s"] = round(time.perf_counter() - wall, 1)
        result[f"heldout_avg@{a.n}_grpo"] = heldout_accuracy(
            model, tokenizer, heldout, n=a.n, seed=0
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
