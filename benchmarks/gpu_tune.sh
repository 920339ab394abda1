#!/usr/bin/env bash
# The sm90 system database with `miocore tune`, ready for the GPU machine (docs/tuning.md).
#
# Here (dev machine), once:   bash benchmarks/gpu_tune.sh prepare
#   Downloads what must travel, into .gpu/ (ignored by git): Dask distributed and the few of
#   its dependencies the GPU image lacks, for CPython 3.12, into .gpu/whl_dask (the image has
#   PyTorch, cuda-python and CuPy but no Dask and no package index), platformdirs, the corpus.
# There (run tool, carry [".gpu"]):   bash benchmarks/gpu_tune.sh run [PER_DIRECTION]
#   Tunes a stratified corpus sample at full size (fp32, fp16, bf16; three directions; exact
#   math, MATH_MODES=exact,tf32 for both) plus the perf_models layers given in $DRIVER_FILES, one Dask worker per GPU,
#   then fits the WTI corrections on the device. Leaves in $OUT: the merged database
#   (<device>.db), <device>.wti.json, manifest.json, tune.log and a failures list.
# Back here:   miocore heuristic train --db <OUT>/sm90_*.db --out miocore/data/db
#   (scikit-learn is needed for training only; the model is evaluated with numpy alone).
set -euo pipefail
cd "$(dirname "$0")/.."
mode="${1:-run}"

if [[ "$mode" == prepare ]]; then
  bash benchmarks/gpu_prepare.sh
  # Only what the GPU image lacks, without dependencies: a second version of a package the
  # image has (msgpack, psutil, cloudpickle...) would shadow it for torch and the rest.
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 -d .gpu/whl_dask "dask==${DASK_VERSION:-2026.8.0}" \
    "distributed==${DASK_VERSION:-2026.8.0}" tornado tblib zict locket partd
  du -sh .gpu
  exit 0
fi

OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
RUN=/tmp/tune-sm90
PER_DIRECTION="${2:-40}"
# One run-tool command lasts at most 10 minutes: tune stops at TUNE_SECONDS and the same
# command again (machine still warm, $RUN kept in /tmp) resumes where it stopped.
TUNE_SECONDS="${TUNE_SECONDS:-480}"
# shellcheck source=/dev/null
source benchmarks/gpu_device_env.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl_dask/*.whl
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/gpus.csv"
driver_args=()
for f in ${DRIVER_FILES:-}; do driver_args+=(--driver-file "$f"); done
start=$(date +%s)
timeout --signal=INT "$TUNE_SECONDS" python3 -m miocore tune --device cuda \
  --corpus "$PER_DIRECTION" --full-size --dtypes float32,float16,bfloat16 \
  --math-modes "${MATH_MODES:-exact}" --time-limit "${TIME_LIMIT:-30}" \
  --merge-every 20 "${driver_args[@]}" --out "$RUN" 2>&1 | tail -n 400 > "$OUT/tune.log" || true
echo "wall $(( $(date +%s) - start )) s" >> "$OUT/tune.log"
db=$(ls "$RUN"/sm*.db | head -1)
python3 -m miocore heuristic train --db "$db" --out "$OUT" --wti-only --backend cuda \
  | tee -a "$OUT/tune.log"
cp "$db" "$RUN/manifest.json" "$OUT/"
cat "$RUN"/shards/*/log.jsonl | grep -v '"status": "ok"' > "$OUT/failures.jsonl" || true
ls -la "$OUT"
