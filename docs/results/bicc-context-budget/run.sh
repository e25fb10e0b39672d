#!/usr/bin/env bash
# One BiCC + RCC step of the documented SmolLM2 run (benchmarks/real_model_run.sh's
# train command, --max_steps 1), with the framing paid outside the budget (the default)
# and inside it (the earlier behaviour): what the conditioned prompts carried.
# Usage: bash docs/results/bicc-context-budget/run.sh OUT
set -euo pipefail
OUT=${1:-runs/bicc-context-budget}
PY=${PY:-python}
mkdir -p "$OUT/data"
$PY benchmarks/word_problems.py --task sums --n 144 --seed 0 --out "$OUT/data/all.jsonl"
tail -n +41 "$OUT/data/all.jsonl" > "$OUT/data/train.jsonl"
for framing in outside inside; do
  $PY -m contrastive_rlvr.cli train --model smollm2-135m --dataset "$OUT/data/train.jsonl" \
    --rewards benchmarks/word_problems.py:integer_reward --output_dir "$OUT/$framing" \
    --bicc true --bicc_mix 1.0 --rcc true --bicc_framing_budget "$framing" --learning_rate 2e-5 \
    --lr_scheduler_type constant --warmup_steps 0 --max_steps 1 --num_generations 4 \
    --per_device_train_batch_size 8 --max_completion_length 64 --temperature 0.7 \
    --heldout_size 8 --eval_n 1 --report_to none --save_strategy no --seed 0
done
