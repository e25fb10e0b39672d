#!/usr/bin/env bash
# The loss-overhead benchmark on a CUDA machine with PyTorch and no internet (issue 13, item 5).
# Run from the folder benchmarks/gpu_prepare.sh filled (gpu_bundle/): it installs the carried
# wheels into a virtual environment that sees the machine's PyTorch (--system-site-packages),
# then runs loss_overhead.py in bfloat16 with SDPA on CUDA, every arm with gradient
# checkpointing off and on, and prints the ratios and the absolute phase times. Budget:
# under 8 minutes on one H200 (the run is stopped at 7.5 minutes).
#
#   bash gpu_check.sh                       # CUDA, bfloat16
#   bash gpu_check.sh --device cpu --quick  # a smoke run of this script without a GPU
# Environment: PYTHON (default python3), VENV (default ./.venv, made from PYTHON with
# --system-site-packages; VENV=none installs into PYTHON's own environment), TIMEOUT_S
# (default 450). pip installs nothing that is already there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
venv="${VENV:-$here/.venv}"
timeout_s="${TIMEOUT_S:-450}"
device=cuda
args=()
while (( $# )); do
  case "$1" in
    --device) device="$2"; args+=(--device "$2"); shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ "$device" == cuda ]]; then
  args=(--device cuda --dtype bfloat16 --all-arms --repeats 5 "${args[@]}")
fi

started=$(date +%s)
if [[ "$venv" != none ]]; then
  if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv --system-site-packages "$venv"
  fi
  python="$venv/bin/python"
fi
"$python" -m pip install -q --no-index --find-links "$here/wheels" transformers==5.24.0
"$python" - "$device" <<'PY'
import sys
import torch
import transformers
print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"python {sys.version.split()[0]}")
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    sys.exit("gpu_check: torch.cuda.is_available() is False; use --device cpu for a smoke run")
PY
echo "bundle commit: $(cat "$here/COMMIT" 2>/dev/null || echo unknown); $(date -u +%FT%TZ)"
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
timeout "$timeout_s" "$python" "$here/loss_overhead.py" "${args[@]}"
echo "gpu_check: done in $(( $(date +%s) - started )) s"
