#!/usr/bin/env bash
# BiCC variants on the reading warm start (docs/results/bicc-variants/README.md).
#
#   docs/results/bicc-variants/run.sh OUT [SEEDS...]      (default seeds 0 1 2 3 4)
#
# Runs a frozen copy of the code (`git archive HEAD src` into OUT/code) so that later
# edits of the clone cannot reach a running arm. Per seed, one process at a time:
#   OUT/default          compare --arms plain,bicc   (builds the seed's warm start)
#   OUT/one_opposite     compare --arms bicc --bicc_pairing one_opposite
#   OUT/conditioned_old  compare --arms bicc --bicc_ratio_mode conditioned_old --bicc_mix 1
#   OUT/paper_mix1       compare --arms bicc --bicc_mix 1   (conditioned_old's control:
#                        conditioned_old refuses bicc_mix < 1, embedded.yaml has 0.5)
# The warm start is built once per seed in OUT/default and copied into the others:
# compare's cache key (_sft_key) holds neither bicc_pairing, bicc_ratio_mode nor
# bicc_mix, and the warm start's reading demonstrations never use them.
# Then each folder's table over all seeds (finished runs skipped).
set -euo pipefail
OUT=${1:?usage: run.sh OUT [SEEDS...]}
shift
if [ $# -eq 0 ]; then SEEDS=(0 1 2 3 4); else SEEDS=("$@"); fi
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
PY=${PY:-$REPO/.venv/bin/python}
EXTRA=${EXTRA:-}   # e.g. EXTRA="--max_steps 2" for a sanity run

mkdir -p "$OUT"
if [ ! -d "$OUT/code" ]; then
  mkdir -p "$OUT/code"
  git -C "$REPO" archive HEAD src | tar -x -C "$OUT/code"
  git -C "$REPO" rev-parse HEAD >"$OUT/code/COMMIT"
fi
export PYTHONPATH=$OUT/code/src OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# The reading warm start of docs/results/reading-warm-start (same options).
OPTS=(--embedded_sft_context_frac 0.5 --embedded_sft_context_target reference
  --embedded_sft_context_attempts sampled --embedded_bicc_phrases true
  --bicc_placement before_prompt)
# shellcheck disable=SC2206
EXTRA_ARGS=($EXTRA)

compare() {  # compare FOLDER ARMS SEEDS [OVERRIDES...]
  local folder=$1 arms=$2 seeds=$3
  shift 3
  nice -n 10 "$PY" -m contrastive_rlvr.cli compare --out "$OUT/$folder" --recipes grpo \
    --arms "$arms" --seeds "$seeds" "${OPTS[@]}" "${EXTRA_ARGS[@]}" "$@"
}

variant() {  # variant FOLDER SEED OVERRIDES...
  local folder=$1 s=$2
  shift 2
  mkdir -p "$OUT/$folder/sft-cache"
  if [ ! -d "$OUT/$folder/sft-cache/seed$s" ]; then
    cp -r "$OUT/default/sft-cache/seed$s" "$OUT/$folder/sft-cache/"
  fi
  compare "$folder" bicc "$s" "$@"
}

for s in "${SEEDS[@]}"; do
  echo "=== seed $s $(date -u +%FT%TZ)"
  compare default plain,bicc "$s" || true
  variant one_opposite "$s" --bicc_pairing one_opposite || true
  variant conditioned_old "$s" --bicc_ratio_mode conditioned_old --bicc_mix 1 || true
  variant paper_mix1 "$s" --bicc_mix 1 || true
done
ALL=$(IFS=,; echo "${SEEDS[*]}")
echo "=== tables $(date -u +%FT%TZ)"
compare default plain,bicc "$ALL" || true
compare one_opposite bicc "$ALL" --bicc_pairing one_opposite || true
compare conditioned_old bicc "$ALL" --bicc_ratio_mode conditioned_old --bicc_mix 1 || true
compare paper_mix1 bicc "$ALL" --bicc_mix 1 || true
echo "=== done $(date -u +%FT%TZ)"
