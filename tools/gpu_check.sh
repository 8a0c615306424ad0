#!/usr/bin/env bash
# The GPU check, in one run on a machine with a CUDA GPU (a lent device machine, or your own):
#   1. the kernel tests, where the GPU-only ones (half precision, races between programs in the
#      parameter reductions, contention in the atomic scatter) run instead of skipping;
#   2. every `python -m kernels.bench` op: GB/s or TFLOP/s against PyTorch.
# Logs go to $OUT (the device tool's output folder) or ./gpu-check/. It needs only python3 with
# torch, triton and pytest (the device image has them; nbgrader and nbval are not needed), and
# it stops each part at a time limit so that the whole run ends inside ten minutes.
#
#   bash tools/gpu_check.sh            (from the repository root)
#
# Copy the figures into kernels/BENCHMARKS.md with the date, the device and this command.
set -uo pipefail

out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
PY=${PYTHON:-python3}

{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    $PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__,
            "cuda", torch.cuda.is_available() and torch.cuda.get_device_name())'
} 2>&1 | tee "$out/device.txt"

# The repository's pytest options name plugins (nbval) that a bare GPU image lacks: none here.
timeout 300 $PY -m pytest -q -o addopts="" -p no:cacheprovider -rs --timeout 120 tests/kernels 2>&1 \
    | tee "$out/kernel-tests.log"
tests_rc=${PIPESTATUS[0]}

for op in softmax cross_entropy layer_norm rms_norm attention fused_linear_cross_entropy linear; do
    echo "== python -m kernels.bench $op"
    timeout 75 $PY -m kernels.bench "$op" || echo "(kernels.bench $op: exit status $?)"
done 2>&1 | tee "$out/bench.log"

echo "kernel tests exit status: $tests_rc" | tee -a "$out/device.txt"
exit "$tests_rc"
