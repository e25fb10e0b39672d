#!/usr/bin/env bash
# Fill benchmarks/gpu_bundle/ (gitignored; BUNDLE=DIR for another folder) with what
# benchmarks/gpu_check.sh needs on a CUDA machine that has PyTorch (and numpy) but no internet
# and none of this project's dependencies, in at most 64 MiB:
#   wheels/      for each Python version in PY_VERSIONS: transformers==5.24.0, accelerate==1.15.0,
#                rich, pyyaml, psutil, jinja2 and their dependencies (numpy, torch and torch's
#                own dependencies excluded: a PyTorch machine has them), gguf (to read
#                SmolLM2's .gguf in part 3, the file itself not carried), and trl==1.16.0
#                without its dependencies: its hard ones datasets, pandas and pyarrow are over
#                the size budget (pyarrow 26.0.1 alone is 52 MiB for one Python version);
#   stand_ins/   benchmarks/gpu_stand_ins: importable stand-ins for datasets (an in-memory
#                Dataset), pandas and pyarrow, which gpu_check.sh puts on the path only for
#                those the machine lacks (TRL imports them; a GRPO run uses only the Dataset);
#   src/         the whole contrastive_rlvr package (the training steps run RLVRTrainer);
#   loss_overhead.py, gpu_train_steps.py, gpu_probe_check.py, gpu_check.sh, COMMIT.
# Run here (it needs PyPI), then copy the folder to the GPU machine and run gpu_check.sh there.
#
#   benchmarks/gpu_prepare.sh                  # Python 3.11, 3.12 and 3.13 wheels (transformers
#                                              # 5.24 needs Python >= 3.11)
#   PY_VERSIONS="3.11" BUNDLE=/tmp/b benchmarks/gpu_prepare.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bundle="${BUNDLE:-$here/gpu_bundle}"
python="${PYTHON:-python3}"
py_versions="${PY_VERSIONS:-3.11 3.12 3.13}"
limit_mib=64

rm -rf "$bundle"
mkdir -p "$bundle/wheels" "$bundle/src"
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_28_x86_64 --only-binary=:all:)
for v in $py_versions; do
  "$python" -m pip download -q -d "$bundle/wheels" --python-version "$v" "${platforms[@]}" \
    transformers==5.24.0 rich==15.0.0 pyyaml psutil jinja2 gguf==0.19.0
  # Without dependencies: trl's include datasets / pandas / pyarrow, accelerate's torch.
  "$python" -m pip download -q -d "$bundle/wheels" --python-version "$v" "${platforms[@]}" \
    --no-deps trl==1.16.0 accelerate==1.15.0
done
rm -f "$bundle"/wheels/numpy-*.whl

cp -r "$root/src/contrastive_rlvr" "$bundle/src/"
cp -r "$here/gpu_stand_ins" "$bundle/stand_ins"
find "$bundle/src" "$bundle/stand_ins" -name __pycache__ -prune -exec rm -rf {} +
cp "$here/loss_overhead.py" "$here/gpu_train_steps.py" "$here/gpu_probe_check.py" \
  "$here/gpu_check.sh" "$bundle/"
(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown) > "$bundle/COMMIT"

size_kib=$(du -sk "$bundle" | cut -f1)
echo "gpu_bundle: $((size_kib / 1024)) MiB ($size_kib KiB) in $bundle" \
     "($(ls "$bundle/wheels" | wc -l) wheels)"
if (( size_kib > limit_mib * 1024 )); then
  echo "gpu_bundle is over ${limit_mib} MiB: set PY_VERSIONS to the GPU machine's Python only" >&2
  exit 1
fi
