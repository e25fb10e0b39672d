#!/usr/bin/env bash
# The documented real-model run (docs/real-model.md): SmolLM2-135M-Instruct on
# "What is a + b?" (operands 1..12), GRPO + BiCC + RCC, evaluated before and after.
# Usage: bash benchmarks/real_model_run.sh [OUT] [STEPS]   (from the repository root)
set -euo pipefail
OUT=${1:-runs/real-smollm2}
STEPS=${2:-24}
PY=${PY:-python}
mkdir -p "$OUT/data"
# 144 distinct sums, shuffled with seed 0: the first 40 held out, the other 104 train.
$PY benchmarks/word_problems.py --task sums --n 144 --seed 0 --out "$OUT/data/all.jsonl"
head -n 40 "$OUT/data/all.jsonl" > "$OUT/data/heldout.jsonl"
tail -n +41 "$OUT/data/all.jsonl" > "$OUT/data/train.jsonl"
EVAL=(--benchmarks "sums=$OUT/data/heldout.jsonl" --benchmark-fields prompt=question,answer=answer,id=id,format=gsm8k --n 2 --max-new-tokens 64
      --temperature 0.7 --top-p 1.0 --batch-size 40 --backend hf --last-number-fallback)
$PY -m contrastive_rlvr.cli eval --model smollm2-135m "${EVAL[@]}" --output-dir "$OUT/eval-before"
$PY -m contrastive_rlvr.cli train --model smollm2-135m --dataset "$OUT/data/train.jsonl" \
  --rewards benchmarks/word_problems.py:integer_reward --output_dir "$OUT/train" \
  --bicc true --bicc_mix 1.0 --rcc true --learning_rate 2e-5 --lr_scheduler_type constant --warmup_steps 0 \
  --max_steps "$STEPS" --num_generations 4 --per_device_train_batch_size 8 \
  --max_completion_length 64 --temperature 0.7 --heldout_size 8 --eval_n 1 \
  --report_to tensorboard --save_steps "$STEPS" --save_total_limit 1
$PY -m contrastive_rlvr.cli eval --model "$OUT/train/checkpoint-$STEPS" "${EVAL[@]}" \
  --output-dir "$OUT/eval-after"
