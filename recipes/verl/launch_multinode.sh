#!/usr/bin/env bash
# Multi-node verl run of recipes/verl/grpo_bicc_rcc.yaml (2 nodes x 8 GPUs, vLLM rollouts).
#
# Every node needs the same environment: verl 0.9.1 with its vLLM extra, this package
# (`pip install --no-deps -e .`, or from a wheel) and math-verify; see docs/scale-out.md.
# Usage:
#   on the head node:    bash recipes/verl/launch_multinode.sh head
#   on each other node:  HEAD_IP=<head address> bash recipes/verl/launch_multinode.sh worker
#   then on the head:    bash recipes/verl/launch_multinode.sh train [extra hydra overrides]
set -euo pipefail

RAY_PORT=${RAY_PORT:-6379}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
NNODES=${NNODES:-2}
CONFIG_NAME=${CONFIG_NAME:-grpo_bicc_rcc}
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

case "${1:-}" in
  head)
    ray start --head --port="$RAY_PORT" --num-gpus="$GPUS_PER_NODE"
    ;;
  worker)
    : "${HEAD_IP:?set HEAD_IP to the address of the head node}"
    ray start --address="$HEAD_IP:$RAY_PORT" --num-gpus="$GPUS_PER_NODE"
    ;;
  train)
    shift
    # main_ppo joins the running cluster (ray.init() finds it); the crlvr_* names come from
    # the verl.plugins entry point, loaded by `import verl` in every Ray worker.
    python -m verl.trainer.main_ppo \
      --config-path="$RECIPE_DIR" --config-name="$CONFIG_NAME" \
      trainer.nnodes="$NNODES" trainer.n_gpus_per_node="$GPUS_PER_NODE" "$@"
    ;;
  *)
    echo "usage: $0 head | worker | train [hydra overrides]" >&2
    exit 2
    ;;
esac
