#!/usr/bin/env bash
# SmolLM2-135M-Instruct, sums task: plain GRPO vs GRPO + BiCC, 3 seeds, same steps,
# with a BiCC context large enough to carry whole attempts.
# Usage: PY=.venv/bin/python bash docs/results/smollm2-bicc-vs-plain/run.sh OUT [STEPS]
set -euo pipefail
OUT=${1:?output folder}
STEPS=${2:-8}
PY=${PY:-python}
mkdir -p "$OUT/data"
# The real-model run's 144 distinct sums (benchmarks/real_model_run.sh); here the held-out
# 40 are drawn by the run's own seeded split (heldout_size), the same for both arms of a seed.
$PY benchmarks/word_problems.py --task sums --n 144 --seed 0 --out "$OUT/data/all.jsonl"
# bicc_max_seq_len 400 with the paper's ratio 0.4: a 160-token context, room for two whole
# 64-token attempts plus their framing (paid outside the budget, the default); on the
# documented run's own lengths (ratio x (prompt + 64)) no attempt was whole
# (docs/results/bicc-context-budget).
ARGS=(--output_dir "$OUT/compare" --model smollm2-135m --recipes grpo --arms plain,bicc
  --dataset "$OUT/data/all.jsonl" --rewards benchmarks/word_problems.py:integer_reward
  --heldout_size 32 --eval_n 2
  --learning_rate 2e-5 --lr_scheduler_type constant --warmup_steps 0
  --max_steps "$STEPS" --num_generations 4 --per_device_train_batch_size 8
  --max_completion_length 64 --temperature 0.7
  --bicc_max_seq_len 400 --bicc_mix 1.0 --save_strategy no)
# One seed per call, so that each seed's pair finishes before the next seed starts; the
# last call finds every run finished and writes the table over the three seeds.
for s in 0 1 2; do
  $PY -m contrastive_rlvr.cli compare "${ARGS[@]}" --seeds "$s"
done
$PY -m contrastive_rlvr.cli compare "${ARGS[@]}" --seeds 0,1,2
