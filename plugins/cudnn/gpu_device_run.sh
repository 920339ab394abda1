#!/usr/bin/env bash
# One device call for miocore-cudnn (repo root, carry [".gpu"]): what cuDNN offers, the GPU
# tests, then the ResNet-50 benchmark; logs and JSON land in $OUT. Prepare on the dev machine:
#   bash benchmarks/gpu_prepare.sh && bash plugins/cudnn/gpu_prepare.sh
# and call the device with command "bash plugins/cudnn/gpu_device_run.sh [diag|tests|bench|all]".
# The benchmark runs fp16 forward by default (a NORMAL find of every solver per layer and side
# is slow); BENCH_ARGS="--dtypes tf32 --directions backward_data" etc. for the rest.
set -uo pipefail
STAGE="${1:-all}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
source benchmarks/gpu_device_env.sh || exit 3
python3 -m miocore_cudnn.diagnose 2>&1 | tee "$OUT/cudnn_diagnose.log" | tail -40
if [[ "$STAGE" == all || "$STAGE" == tests ]]; then
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider -rs -m gpu \
    -o addopts="" plugins/cudnn/tests/test_cudnn_gpu.py 2>&1 | tee "$OUT/cudnn_tests.log" | tail -40
fi
if [[ "$STAGE" == all || "$STAGE" == bench ]]; then
  timeout "${BENCH_TIMEOUT:-240}" python3 benchmarks/gpu_cudnn_plugin.py \
    --out "$OUT/cudnn_plugin.json" ${BENCH_ARGS:---dtypes float16 --directions forward} 2>&1 | tee "$OUT/cudnn_bench.log" | tail -30
fi
