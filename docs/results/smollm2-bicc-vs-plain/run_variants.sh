#!/usr/bin/env bash
# SmolLM2-135M-Instruct, sums task: the authors'-code BiCC variants on the settings of
# docs/results/smollm2-bicc-vs-plain/run.sh (same data, split, steps, budget), BiCC arm only;
# the plain and default-BiCC arms of the same seeds are that run's.
# Usage: PY=.venv/bin/python bash docs/results/smollm2-bicc-vs-plain/run_variants.sh OUT DATA [SEEDS] [STEPS]
#   DATA: the all.jsonl the plain-vs-BiCC run wrote (OUT_of_that_run/data/all.jsonl)
set -euo pipefail
OUT=${1:?output folder}
DATA=${2:?the plain-vs-BiCC run\'s data/all.jsonl}
SEEDS=${3:-0}
STEPS=${4:-8}
PY=${PY:-python}
ARGS=(--model smollm2-135m --recipes grpo --arms bicc
  --dataset "$DATA" --rewards benchmarks/word_problems.py:integer_reward
  --heldout_size 32 --eval_n 2
  --learning_rate 2e-5 --lr_scheduler_type constant --warmup_steps 0
  --max_steps "$STEPS" --num_generations 4 --per_device_train_batch_size 8
  --max_completion_length 64 --temperature 0.7
  --bicc_max_seq_len 400 --save_strategy no)
for s in ${SEEDS//,/ }; do
  # paper.yaml's bicc_mix is 1 already, which conditioned_old requires
  $PY -m contrastive_rlvr.cli compare --output_dir "$OUT/one_opposite" "${ARGS[@]}" --seeds "$s" \
    --bicc_pairing one_opposite
  $PY -m contrastive_rlvr.cli compare --output_dir "$OUT/conditioned_old" "${ARGS[@]}" --seeds "$s" \
    --bicc_ratio_mode conditioned_old
done
