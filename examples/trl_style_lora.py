"""A TRL-style training script on contrastive-rlvr: a local dataset in TRL's conversational
format, a reward that reads one of its extra columns, LoRA on SmolLM2-135M-Instruct.

It reads as a TRL GRPO script does (TrlParser, ``load_dataset``, the trainer, ``train``,
``save_model``), with ``RLVRConfig`` / ``RLVRTrainer`` in place of ``GRPOConfig`` /
``GRPOTrainer``: every TRL option works as it does there, and the project's (``--bicc``,
``--rcc``, ``--recipe``, ...) are added. From the repository root, offline::

    python examples/trl_style_lora.py \\
        --model_name_or_path smollm2-135m --dataset_name examples/data/word_problems.jsonl \\
        --output_dir runs/example-lora --use_peft true --lora_r 8 --lora_alpha 16 \\
        --lora_target_modules q_proj v_proj --learning_rate 1e-4 --max_steps 2 \\
        --num_generations 4 --per_device_train_batch_size 4 --max_completion_length 32 \\
        --bicc true --report_to none

The final adapter, its card and the config land in ``--output_dir``.
"""

from __future__ import annotations

import sys

from datasets import load_dataset
from trl import TrlParser, get_peft_config

from contrastive_rlvr import (
    MathVerifyReward,
    RLVRConfig,
    RLVRTrainer,
    load_model_and_tokenizer,
    model_load_kwargs,
)


def states_the_unit(completions, unit, **kwargs) -> list[float]:
    """0.2 when the reply names the row's unit (the dataset's extra ``unit`` column, which
    TRL passes to every reward function as a keyword argument)."""
    pairs = zip(completions, unit, strict=True)
    return [0.2 * float(u.lower() in c[-1]["content"].lower()) for c, u in pairs]


def main(argv: list[str] | None = None) -> None:
    (config,) = TrlParser(RLVRConfig).parse_args_and_config(argv)
    # Conversational rows: {"prompt": [system, user messages], "answer": ..., "unit": ...};
    # TRL applies the chat template once, system turn included.
    dataset = load_dataset("json", data_files=config.dataset, split="train")
    model, tokenizer = load_model_and_tokenizer(config.model, **model_load_kwargs(config))
    correct = MathVerifyReward(workers=1)  # 1.0 when the boxed answer equals "answer"
    try:
        trainer = RLVRTrainer(
            model=model,
            reward_funcs=[correct, states_the_unit],
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=get_peft_config(config),
        )
        trainer.train()
        trainer.create_model_card(dataset_name=config.dataset)
        trainer.save_model(config.output_dir)
    finally:
        correct.close()


if __name__ == "__main__":
    main(sys.argv[1:])
