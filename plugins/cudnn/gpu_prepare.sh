#!/usr/bin/env bash
# Add NVIDIA's cuDNN frontend (the `cudnn` Python package that miocore-cudnn drives) to the
# wheels a device call carries: .gpu/whl (ignored by git). Run after benchmarks/gpu_prepare.sh,
# which empties .gpu/; this script only adds. The GPU machine has Python 3.12 on x86_64 and
# cuDNN 9 from PyTorch's wheels; the frontend loads that library at run time.
#   bash plugins/cudnn/gpu_prepare.sh [DEST]      (DEST defaults to .gpu/whl)
# benchmarks/gpu_device_env.sh installs every .gpu/whl/*.whl into /tmp/site on the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
# 1.23.0 has no hard dependencies (later releases require nvidia-cutlass-dsl and
# apache-tvm-ffi) and tries libcudart.so.13 as well as .12.
VERSION="${CUDNN_FRONTEND_VERSION:-1.23.0}"
DEST="${1:-.gpu/whl}"
mkdir -p "$DEST"
rm -f "$DEST"/nvidia_cudnn_frontend-*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 -d "$DEST" \
  "nvidia-cudnn-frontend==${VERSION}"
ls -la "$DEST"
