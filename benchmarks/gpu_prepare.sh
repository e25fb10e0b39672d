#!/usr/bin/env bash
# Fill benchmarks/gpu_bundle/ (gitignored) with what benchmarks/gpu_check.sh needs on a CUDA
# machine that has PyTorch but no internet and none of this project's dependencies:
#   wheels/  transformers==5.24.0 and its dependencies (numpy and torch excluded: a PyTorch
#            machine has them), for each Python version in PY_VERSIONS (TRL is not carried:
#            its trainer module needs datasets/pyarrow/pandas, over the size budget; the
#            benchmark then uses its own compact log-prob head, the same for every arm);
#   src/     the modules the benchmark imports (contrastive_rlvr.algorithms, and
#            trainer/prefix.py + trainer/packed_prefix.py under an empty trainer/__init__.py,
#            so that the TRL trainer and its dataset dependencies are not imported);
#   loss_overhead.py, gpu_check.sh.
# Run here (it needs PyPI), then copy the folder to the GPU machine and run gpu_check.sh there.
#
#   benchmarks/gpu_prepare.sh                  # Python 3.11, 3.12 and 3.13 wheels (transformers
#                                              # 5.24 needs Python >= 3.11)
#   PY_VERSIONS="3.11" benchmarks/gpu_prepare.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
bundle="$here/gpu_bundle"
python="${PYTHON:-python3}"
py_versions="${PY_VERSIONS:-3.11 3.12 3.13}"
limit_mib=64

rm -rf "$bundle"
mkdir -p "$bundle/wheels" "$bundle/src/contrastive_rlvr/trainer"
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_28_x86_64 --only-binary=:all:)
for v in $py_versions; do
  "$python" -m pip download -q -d "$bundle/wheels" --python-version "$v" "${platforms[@]}" \
    transformers==5.24.0
done
rm -f "$bundle"/wheels/numpy-*.whl

src="$root/src/contrastive_rlvr"
cp "$src/__init__.py" "$bundle/src/contrastive_rlvr/"
cp -r "$src/algorithms" "$bundle/src/contrastive_rlvr/"
cp "$src/trainer/prefix.py" "$src/trainer/packed_prefix.py" "$bundle/src/contrastive_rlvr/trainer/"
echo '"""The two forward modules the GPU check needs (bundle copy)."""' \
  > "$bundle/src/contrastive_rlvr/trainer/__init__.py"
find "$bundle/src" -name __pycache__ -prune -exec rm -rf {} +
cp "$here/loss_overhead.py" "$here/gpu_check.sh" "$bundle/"
(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown) > "$bundle/COMMIT"

size_kib=$(du -sk "$bundle" | cut -f1)
echo "gpu_bundle: $((size_kib / 1024)) MiB in $bundle ($(ls "$bundle/wheels" | wc -l) wheels)"
if (( size_kib > limit_mib * 1024 )); then
  echo "gpu_bundle is over ${limit_mib} MiB: set PY_VERSIONS to the GPU machine's Python only" >&2
  exit 1
fi
