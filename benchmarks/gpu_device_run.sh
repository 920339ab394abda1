#!/usr/bin/env bash
# One device call: set up the plugins from source (gpu_device_env.sh), check the GPU path, run the GPU tests and the
# benchmark; logs and JSON land in $OUT. Prepare on the dev machine with
#   benchmarks/gpu_prepare.sh   (builds .gpu/ : platformdirs, the corpus)
# and call the device with carry [".gpu"] and command "bash benchmarks/gpu_device_run.sh [stage]".
set -uo pipefail
STAGE="${1:-all}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source benchmarks/gpu_device_env.sh || exit 3
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, cupy, cuda.bindings as cb; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'cupy', cupy.__version__, 'cuda.bindings', cb.__version__)"
  python3 -c "import miocore, miocore.backends.cuda as c; h = miocore.Handle('cuda'); print(h, h.device, h.backend.driver.compiler_version()); print([s.name for s in h.registry.solvers if 'gpu' in s.name])"
} 2>&1 | tee "$OUT/env.log"
if [[ "$STAGE" == all || "$STAGE" == tests ]]; then
  timeout 420 python3 -m pytest -q -p no:cacheprovider -rs -m gpu -o addopts="" \
    tests/test_gpu_*.py 2>&1 | tee "$OUT/tests.log" | tail -60
fi
if [[ "$STAGE" == all || "$STAGE" == bench ]]; then
  timeout "${BENCH_TIMEOUT:-500}" python3 benchmarks/gpu_vs_cudnn.py --out "$OUT/bench.json" \
    ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -40
fi
