#!/usr/bin/env bash
# One device call per stage of a GPU session (repo root, carry [".gpu"]); each fits the run
# tool's 10-minute limit and leaves logs and JSON in $OUT. Prepare .gpu/ here first:
#   bash benchmarks/gpu_prepare.sh && bash plugins/cudnn/gpu_prepare.sh
#   python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 -d .gpu/nvmath nvmath-python==1.0.0
#   python3 -m pip download -q --no-deps -d .gpu/whl pytest-xdist execnet
# and send a clean tree (git archive HEAD into .gpu/tree, .gpu/whl, .gpu/nvmath and the
# corpus copied into .gpu/tree/.gpu) so edits in progress do not travel; then, per call:
#   cd .gpu/tree && bash benchmarks/gpu_session.sh STAGE
# Stages, one function each in benchmarks/gpu_stages/<concept>.sh (the options of each are
# documented there):
#   tests.sh      suite tests
#   networks.sh   models models-own modes cost plugin findreport frontend eager launch firstfind findprofile findab findenv rtcprobe
#   depthwise.sh  depthwise dwnchw dwtiles dwruns dwsweep dwvary dwwrw dwab dwprofile
#   kernels.sh    spans splits triton wgmma3d wgmma wgmmarace
#   tables.sh     vscudnn vstable parallel
#   databases.sh  scaling gpudb tf32db tritondb refreshdb nhwcdb quality
set -uo pipefail
STAGE="${1:?stage: suite|tests|models|models-own|modes|cost|plugin|findreport|frontend|eager|launch|firstfind|findprofile|findab|findenv|rtcprobe|depthwise|dwnchw|dwtiles|dwruns|dwsweep|dwvary|dwwrw|dwab|dwprofile|spans|splits|triton|wgmma3d|wgmma|wgmmarace|vscudnn|vstable|parallel|scaling|gpudb|tf32db|tritondb|refreshdb|nhwcdb|quality}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=/dev/null
source benchmarks/gpu_device_env.sh || exit 3
python3 -m pip install -q --no-index --no-deps --target /tmp/site2 .gpu/nvmath/*.whl
export PYTHONPATH="/tmp/site2:$PYTHONPATH"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.csv"
MODELS="${MODELS:-resnet50 efficientnet_b0 mobilenet_v3_large convnext_tiny unet}"
DTYPES="${DTYPES:-float16 bfloat16 float32}"
for stages in benchmarks/gpu_stages/*.sh; do
  # shellcheck source=/dev/null
  source "$stages"
done
run_stage="stage_${STAGE//-/_}"
if ! declare -F "$run_stage" >/dev/null; then
  echo "unknown stage $STAGE" >&2
  exit 2
fi
"$run_stage"
