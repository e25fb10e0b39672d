"""Run 2 steps of GRPO + BiCC + RCC with deterministic completions and dump the group
statistics of every step (used by tests/trainer/test_multiprocess.py, launched with
one process or with ``accelerate launch --num_processes 2``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_utils import GROUP, make_config, make_trainer

from contrastive_rlvr.trainer import RLVRTrainer

COMPLETIONS = ["12+3=15", "12+3=16", "9+9=18", "7+1=8"]


class FixedCompletionsTrainer(RLVRTrainer):
    """Generation replaced by a fixed function of the prompt and the row's place in its
    group, so that one and two processes see exactly the same batch."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations):
        tok = self.processing_class
        seen: dict[tuple, int] = {}
        completions = []
        for ids in prompt_ids:
            k = seen.get(tuple(ids), 0)
            seen[tuple(ids)] = k + 1
            text = COMPLETIONS[(k + sum(ids)) % len(COMPLETIONS)]
            completions.append(
                tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            )
        return completions, None


def main(model_dir: str, out_dir: str, per_device: int) -> None:
    torch.set_num_threads(1)
    config = make_config(
        Path(out_dir),
        bicc=True,
        rcc=True,
        max_steps=2,
        per_device_train_batch_size=per_device,
        learning_rate=1e-2,
        shuffle_dataset=False,
        use_cpu=True,
    )
    trainer = make_trainer(Path(model_dir), config, trainer_cls=FixedCompletionsTrainer)
    stats = []
    original = trainer._generate_and_score_completions

    def record(inputs):
        out = original(inputs)
        s = trainer.last_batch_stats
        stats.append({k: v.tolist() for k, v in s.items()})
        stats[-1]["context_tokens_local"] = trainer._metrics["train"]["bicc/context_tokens"][-1]
        return out

    trainer._generate_and_score_completions = record
    trainer.train()
    if trainer.accelerator.is_main_process:
        Path(out_dir, "group_stats.json").write_text(json.dumps(stats))
    assert GROUP == 4


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
