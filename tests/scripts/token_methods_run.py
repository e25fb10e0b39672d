"""Run 2 steps with each token-level method (VeriGate, ReCo, OC-GRPO) on fixed completions and dump,
per process, what each step's scored batch holds (used by
tests/trainer/test_token_methods_in_trainer.py, launched with one process or with
``torch.distributed.run --nproc_per_node 2``).
Arguments: model_dir out_dir plan (e.g. ``verigate:4,reco:4,oc_grpo:8``).

Writes ``<out_dir>/<method>_rank<i>.json``: per step, the local rows' prompts, rewards,
token advantages (trimmed to each completion), ReCo weights and OC-GRPO guided flags.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainer_utils import GROUP, make_config

from contrastive_rlvr.embedded import load_char_tokenizer
from contrastive_rlvr.trainer import RLVRTrainer
from contrastive_rlvr.trainer.batching import unpad

# "9+9=18" twice: every group holds a duplicate (ReCo weights 1/2), split across processes
# when a group is.
COMPLETIONS = ["12+3=15", "9+9=18", "9+9=18", "7+1=8"]


class FixedCompletionsTrainer(RLVRTrainer):
    """Generation replaced by a fixed function of the prompt and the row's place in its
    group, counted over all processes (rows are laid out group by group across them), so
    one and two processes see the same batch even when a group is split between them."""

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations):
        tok = self.processing_class
        first = self.accelerator.process_index * len(prompt_ids)
        completions = []
        for j, ids in enumerate(prompt_ids):
            text = COMPLETIONS[((first + j) % GROUP + sum(ids)) % len(COMPLETIONS)]
            completions.append(
                tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            )
        return completions, None


SWITCHES = {
    "verigate": dict(
        verigate=True,
        verigate_scorer="__main__:digit_scorer",
        verigate_step_rule="regex",
        verigate_step_pattern=r"[\s\S]",
    ),
    "reco": dict(reco=True),
    "oc_grpo": dict(oc_grpo=True),
}


def digit_scorer(prompt: str, steps: list[str]) -> list[float]:
    """Each step (one character) scores 1 if it is a digit."""
    return [1.0 if s.isdigit() else 0.0 for s in steps]


def hint_reward(prompts, completions, completion_ids, **kwargs) -> list[float]:
    """Plain prompts always fail (VeriGate gates every group, OC-GRPO guides every group);
    with the hint, '9+9=18' is right (one row of every guided group)."""
    return [
        float(p.startswith("Hint: ") and c == "9+9=18")
        for p, c in zip(prompts, completions, strict=True)
    ]


def ends_in_eight(prompts, completions, completion_ids, **kwargs) -> list[float]:
    return [float(c.endswith("8")) for c in completions]


REWARDS = {"verigate": hint_reward, "reco": ends_in_eight, "oc_grpo": hint_reward}


def dataset(n: int = 16) -> Dataset:
    prompts = [f"{i}+{i + 3}+{i + 5}=" for i in range(n)]
    return Dataset.from_dict({"prompt": prompts, "answer": ["1"] * n, "solution": ["12+5=17"] * n})


def run(method: str, model_dir: Path, out_dir: Path, per_device: int) -> None:
    config = make_config(
        out_dir / method,
        max_steps=2,
        per_device_train_batch_size=per_device,
        shuffle_dataset=False,
        use_cpu=True,
        **SWITCHES[method],
    )
    tokenizer = load_char_tokenizer(model_dir)
    trainer = FixedCompletionsTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        reward_funcs=[REWARDS[method]],
        args=config,
        train_dataset=dataset(),
        processing_class=tokenizer,
    )
    steps = []
    original = trainer._generate_and_score_completions

    def record(inputs):
        out = original(inputs)
        lengths = out["completion_mask"].sum(1).tolist()
        adv = out["advantages"]
        steps.append(
            {
                "prompts": tokenizer.batch_decode(
                    unpad(out["prompt_ids"], out["prompt_mask"]), skip_special_tokens=True
                ),
                "rewards": out["rewards"].tolist(),
                "advantages": [
                    (adv[i, :n] if adv.dim() == 2 else adv[i].expand(n)).tolist()
                    for i, n in enumerate(lengths)
                ],
                "reco_weights": out["reco_weights"].tolist() if "reco_weights" in out else None,
                "oc_guided": out["oc_guided"].tolist() if "oc_guided" in out else None,
            }
        )
        return out

    trainer._generate_and_score_completions = record
    trainer.train()
    assert trainer.nonfinite_losses == 0
    rank = trainer.accelerator.process_index
    (out_dir / f"{method}_rank{rank}.json").write_text(json.dumps(steps))


def main(model_dir: str, out_dir: str, plan: str) -> None:
    """``plan``: comma-separated ``method:per_device_train_batch_size`` items."""
    torch.set_num_threads(1)
    for item in plan.split(","):
        method, per_device = item.split(":")
        run(method, Path(model_dir), Path(out_dir), int(per_device))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
