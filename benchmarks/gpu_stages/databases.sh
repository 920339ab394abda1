#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for
# issue 14: the sm90 system database (tuning, refreshes) and immediate mode's quality.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
#   scaling     issue 19 on a several-GPU kind: `miocore tune` over the full-size corpus sample
#               (batch cut to MAX_GFLOP) with one worker per GPU, a worker killed and the run
#               resumed, then 1 worker against N on the same problems (tune_scaling.py); needs
#               the Dask wheels in .gpu/whl_dask. The union of the runs' databases lands in
#               $OUT/db (the sm90 system database's source)
#   gpudb       the sm90 system database grown: `miocore tune` (WORKERS per GPU, 4 by default:
#               finds are host-bound, and 4 per GPU kept 99% of the winners of 1 per GPU)
#               over the full-size corpus sample and the MIOpenDriver files in
#               .gpu/perf_models_tune (batch cut to MAX_GFLOP) less the problems
#               of BASE_DB (the shipped one), for TUNE_SECONDS; then merged with it, the model
#               trained and the WTI table fitted here; all in $OUT/sm90.tgz and /tmp/sm90
#   tf32db      issue 14: the shipped sm90 database's fp32 problems tuned in the tf32 math mode
#               for TUNE_SECONDS (4 workers per GPU); the run's database in $OUT/tf32.db
#   tritondb    issue 14: the shipped sm90 database's problems (fp32 in the tf32 math mode) found
#               with one plugin's solvers alone (ONLY_PLUGIN, triton; igemm brings the wgmma
#               solvers' times) for TUNE_SECONDS (WORKERS per GPU, 6), the
#               run's database merged into a copy of the shipped one and the WTI table refitted
#               on it; back: $OUT/triton.db (the Triton records alone) and the refitted table
#   refreshdb   issue 14: the shipped sm90 database's problems whose records predate a solver
#               (build_system_db.py --stale-only) found again with one plugin of
#               REFRESH_PLUGINS (igemm direct gemm; triton in a second call) enabled at a
#               time, REFRESH_SECONDS (120) each; merged by solver into a copy of REFRESH_BASE
#               (the shipped file; REFRESH_SECONDS_<plugin> for one plugin's own time), WTI
#               fitted, model retrained (not while a plugin's run stopped short: call again;
#               REFRESH_TRAIN_PARTIAL=1 trains anyway); back in $OUT/refreshed.tgz (carry
#               .gpu/whl_dask)
#   nhwcdb      issue 14: the shipped sm90 database's problems channels-last that it lacks,
#               found with every plugin (fp32 in the tf32 math mode) for NHWC_SECONDS (240;
#               WORKERS per GPU, 6), merged into a copy of it, WTI fitted and model retrained
#               there; back in $OUT/nhwc.tgz (carry .gpu/whl_dask). NHWC_TRAIN=0 leaves
#               /tmp/nhwc-merged/sm90_132.db untrained, for REFRESH_BASE of refreshdb next
#   quality     issue 14 on the GPU: the shipped sm90 database's WTI table fitted on the device
#               (heuristic train --wti-only), then immediate mode against NORMAL find on
#               LIMIT held-out problems and the layers of the MIOpenDriver files carried in
#               .gpu/perf_models (find_quality.py, batch cut to MAX_GFLOP; the fitted WTI
#               table alone ranked too: the fallback's quality); MATH_MODE,
#               QDTYPE (one data type), MODEL_DIR (another model) and QTAG (output names);
#               one process a GPU, each every N-th problem (--shard), merged into one summary

# Dask for the tuning stages: the wheels carried in .gpu/whl_dask (the image has none)
use_dask() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site3 \
    .gpu/whl_dask/*.whl || exit 3
  export PYTHONPATH="/tmp/site3:$PYTHONPATH"
}
# A database file as plain SQLite: $1, or its packed twin ($1.xz, as miocore ships them)
# expanded into the cache (miocore.db.packed); for the stages that copy and write one
plain_db() {
  python3 -c "import sys; from miocore.db.packed import readable_db_file as r; print(r(sys.argv[1]))" "$1"
}
# The WTI table fitted and the model retrained (the shipped settings) on $1/sm90_132.db, both
# scored on its held-out records; all in $OUT/$2.tgz, and in /tmp/sm90 for `quality` next
train_sm90() {
  timeout 120 python3 -m miocore heuristic train --db "$1/sm90_132.db" --out "$1" \
    --wti-only --backend cuda 2>&1 | tail -3
  timeout 200 python3 -m miocore heuristic train --db "$1/sm90_132.db" --out "$1" \
    --trees 100 --depth 4 --learning-rate 0.1 --min-samples 5 --target relative 2>&1 | tail -3
  python3 -m miocore heuristic eval --db "$1/sm90_132.db" --backend cuda 2>&1 | tail -6
  tar czf "$OUT/$2.tgz" -C "$1" .
  rm -rf /tmp/sm90 && cp -r "$1" /tmp/sm90
}
# Every plugin but $1, comma-separated (MIOCORE_DISABLE_PLUGINS for a one-plugin find)
plugins_but() {
  echo cudnn direct fft gemm igemm triton winograd | tr ' ' '\n' | grep -v "^$1$" | paste -sd,
}

stage_scaling() {
  use_dask
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  timeout 580 python3 benchmarks/tune_scaling.py --device cuda --workers "$gpus" \
    --first-workers $((gpus * 4)) \
    --per-direction "${PER_DIRECTION:-140}" --full-size --max-gflop "${MAX_GFLOP:-20}" \
    --time-limit 20 --budget-s "${BUDGET_S:-540}" --out /tmp/scaling \
    --json "$OUT/scaling.json" --merged "$OUT/db" 2>&1 | grep -a -v Warning |
    tee "$OUT/scaling.log" | tail -60
  # One archive: the run tool brings back only a few files from $OUT.
  for run in /tmp/scaling/*/; do
    cat "$run"shards/*/log.jsonl > "$run/log.jsonl" 2>/dev/null
  done
  cp "$OUT/topo.txt" /tmp/scaling/ 2>/dev/null
  tar czf "$OUT/scaling.tgz" -C /tmp/scaling --exclude='shards' --exclude='claims' . &&
    rm -f "$OUT/topo.txt"
}

stage_gpudb() {
  use_dask
  sm=/tmp/sm90 && rm -rf "$sm" && mkdir -p "$sm"
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  # MIOpenDriver files in .gpu/perf_models_tune are tuned too; those in .gpu/perf_models
  # (the untuned layers `quality` measures on) are kept out.
  driver_args=()
  for f in .gpu/perf_models_tune/*.txt; do [[ -f "$f" ]] && driver_args+=(--driver-file "$f"); done
  for f in .gpu/perf_models/*.txt; do [[ -f "$f" ]] && driver_args+=(--skip-driver-file "$f"); done
  timeout 500 python3 benchmarks/build_system_db.py --device cuda "${driver_args[@]}" \
    --workers $((gpus * ${WORKERS:-4})) --per-direction "${PER_DIRECTION:-700}" --no-shrink \
    --max-gflop "${MAX_GFLOP:-20}" --time-limit 20 --skip-db "${BASE_DB:-miocore/data/db/sm90_132.db}" \
    --seconds "${TUNE_SECONDS:-400}" --out /tmp/gpudb 2>&1 | grep -a -v "distributed\." |
    tee "$OUT/gpudb.log" | tail -8
  python3 - <<'PY'
import os
from pathlib import Path
from miocore.db.finddb import FindDb
db = FindDb("sm90_132", user_dir=Path("/tmp/sm90"), system_dir=Path("/tmp/sm90/none"))
for src in (os.environ.get("BASE_DB", "miocore/data/db/sm90_132.db"), "/tmp/gpudb/sm90_132.db"):
    print(src, db.merge_from(src))
db.close()
PY
  python3 -m miocore heuristic train --db "$sm/sm90_132.db" --out "$sm" --trees 100 --depth 4 \
    --learning-rate 0.1 --min-samples 5 --target relative 2>&1 | tail -3
  python3 -m miocore heuristic eval --db "$sm/sm90_132.db" --backend cuda 2>&1 | tail -6
  cat /tmp/gpudb/shards/*/log.jsonl > "$sm/tune_log.jsonl"
  cp /tmp/gpudb/manifest.json "$sm/"
  tar czf "$OUT/sm90.tgz" -C "$sm" .
}

stage_tf32db() {
  # The shipped database's fp32 problems found again in the tf32 math mode (4 workers per
  # GPU, for TUNE_SECONDS, shuffled so that a cut run is a fair sample; Triton kept out as
  # for the rest of the file): the run's own database comes back as $OUT/tf32.db, to merge
  # into the shipped one and train on (docs/tuning.md).
  use_dask
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  MIOCORE_DISABLE_PLUGINS=triton timeout "${TUNE_TIMEOUT:-450}" python3 \
    benchmarks/build_system_db.py --device cuda --keys-of miocore/data/db/sm90_132.db \
    --keys-dtype float32 --math-modes tf32 --workers $((gpus * ${WORKERS:-4})) \
    --seconds "${TUNE_SECONDS:-360}" --out /tmp/tf32db 2>&1 | grep -a -v "distributed\." |
    tee "$OUT/tf32db.log" | tail -8
  cp /tmp/tf32db/sm90_132.db "$OUT/tf32.db"
  cat /tmp/tf32db/shards/*/log.jsonl > "$OUT/tf32_tune_log.jsonl"
  cp /tmp/tf32db/manifest.json "$OUT/tf32_manifest.json"
}

stage_tritondb() {
  # The system database was tuned with Triton kept out (its compiles): immediate mode and
  # DYNAMIC_HYBRID then judged Triton's kernels by raw WTI alone. Every other plugin is
  # disabled here, so each find measures the Triton solver of its direction only; records
  # merge by solver (FindDb's rule), so the other solvers' entries stay as measured.
  use_dask
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  # ONLY_PLUGIN (triton): the plugin measured; igemm adds the wgmma solvers' times
  only="${ONLY_PLUGIN:-triton}"
  disabled=$(plugins_but "$only")
  MIOCORE_DISABLE_PLUGINS="$disabled" timeout "${TUNE_TIMEOUT:-450}" \
    python3 benchmarks/build_system_db.py --device cuda --keys-of miocore/data/db/sm90_132.db \
    --groups-of-one --math-modes tf32 --workers $((gpus * ${WORKERS:-6})) --time-limit 20 \
    --seconds "${TUNE_SECONDS:-300}" --out /tmp/tritondb 2>&1 | grep -a -v "distributed\." |
    tee "$OUT/tritondb.log" | tail -8
  cp /tmp/tritondb/sm90_132.db "$OUT/triton.db"
  cat /tmp/tritondb/shards/*/log.jsonl > "$OUT/triton_tune_log.jsonl"
  cp /tmp/tritondb/manifest.json "$OUT/triton_manifest.json"
  mkdir -p /tmp/merged && cp "$(plain_db miocore/data/db/sm90_132.db)" /tmp/merged/
  python3 benchmarks/merge_db.py --existing-keys-only --into /tmp/merged/sm90_132.db \
    /tmp/tritondb/sm90_132.db |
    tee "$OUT/merge.log"
  timeout 240 python3 -m miocore heuristic train --db /tmp/merged/sm90_132.db --out /tmp/merged \
    --wti-only --backend cuda 2>&1 | tee "$OUT/wti.log" | tail -5
  cp /tmp/merged/sm90_132.wti.json "$OUT/"
}

stage_refreshdb() {
  # The shipped database's problems whose records predate a solver (no entry where it
  # applies, or one of an older revision: build_system_db.py --stale-only) found again, one
  # plugin of REFRESH_PLUGINS at a time with the others disabled, REFRESH_SECONDS each; the
  # runs merged into a copy of the shipped file by solver (records it lacked left out), the
  # WTI table fitted and the model retrained there; all in $OUT/refreshed.tgz
  use_dask
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  # REFRESH_BASE: the file refreshed (the shipped one; /tmp/refreshed/sm90_132.db goes on
  # from an earlier call on the same machine)
  base="${REFRESH_BASE:-miocore/data/db/sm90_132.db}"
  merged=/tmp/refreshed && mkdir -p "$merged"
  [[ "$base" -ef "$merged/sm90_132.db" ]] || cp "$(plain_db "$base")" "$merged/sm90_132.db"
  for only in ${REFRESH_PLUGINS:-igemm direct gemm}; do
    disabled=$(plugins_but "$only")
    seconds="REFRESH_SECONDS_$only"  # a plugin's own time, else REFRESH_SECONDS
    MIOCORE_DISABLE_PLUGINS="$disabled" timeout "${REFRESH_TIMEOUT:-200}" \
      python3 benchmarks/build_system_db.py --device cuda --keys-of "$merged/sm90_132.db" \
      --stale-only --math-modes exact,tf32 --workers $((gpus * ${WORKERS:-6})) --time-limit 20 \
      --seconds "${!seconds:-${REFRESH_SECONDS:-120}}" --out "/tmp/refresh-$only" 2>&1 |
      grep -a -v "distributed\." | tee "$OUT/refresh_$only.log" | grep -a -E "stale|problems/min|stopped" 
    python3 benchmarks/merge_db.py --existing-keys-only --into "$merged/sm90_132.db" \
      "/tmp/refresh-$only/sm90_132.db" | tee -a "$OUT/refresh_merge.log"
    grep -aq "stopped after" "$OUT/refresh_$only.log" && partial="$only"
  done
  if [[ -n "${partial:-}" && "${REFRESH_TRAIN_PARTIAL:-0}" != 1 ]]; then
    # A model trained on a file where one plugin's solvers have new times on some problems
    # and old ones on the rest learns two speeds for one kernel (thirty-sixth session: 89.0%
    # within 10% before a half-done Triton refresh, 85.4% after, 89.3% once it finished)
    echo "refresh of $partial stopped before the end: not trained; call again to resume"
    tar czf "$OUT/refreshed.tgz" -C "$merged" .
    exit 0
  fi
  train_sm90 "$merged" refreshed
}

stage_nhwcdb() {
  # The shipped database's problems channels-last (NHWC, NDHWC: what channels_last PyTorch
  # models run; the corpus is mostly channels-first), those it lacks, found with every
  # plugin (fp32 in the tf32 math mode, PyTorch's default) for NHWC_SECONDS, merged into a
  # copy of it, the model retrained there; all in $OUT/nhwc.tgz (carry .gpu/whl_dask)
  use_dask
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  merged=/tmp/nhwc-merged && mkdir -p "$merged"
  cp "$(plain_db miocore/data/db/sm90_132.db)" "$merged/sm90_132.db"
  timeout "${NHWC_TIMEOUT:-300}" python3 benchmarks/build_system_db.py --device cuda \
    --keys-of "$merged/sm90_132.db" --layouts NHWC --skip-db "$merged/sm90_132.db" \
    --math-modes exact,tf32 --fp32-modes tf32 --workers $((gpus * ${WORKERS:-6})) \
    --time-limit 20 --seconds "${NHWC_SECONDS:-240}" --out /tmp/nhwc 2>&1 |
    grep -a -v "distributed\." | tee "$OUT/nhwc_tune.log" | grep -a -E "problems|stopped|throughput" | tail -5
  python3 benchmarks/merge_db.py --into "$merged/sm90_132.db" /tmp/nhwc/sm90_132.db |
    tee "$OUT/nhwc_merge.log"
  [[ "${NHWC_TRAIN:-1}" == 0 ]] || train_sm90 "$merged" nhwc  # 0: refreshdb goes on from it
}

stage_quality() {
  sm=/tmp/sm90  # from `gpudb` on this machine, else the shipped files
  if [[ ! -f "$sm/sm90_132.heuristic.npz" ]]; then
    mkdir -p "$sm" && cp miocore/data/db/sm90_* "$sm/"
    [[ "${QUALITY_REFIT:-1}" == 0 ]] ||
    python3 -m miocore heuristic train --db "$sm/sm90_132.db" --out "$sm" --wti-only \
      --backend cuda 2>&1 | tee "$OUT/wti.log" | tail -5
    cp "$sm/sm90_132.wti.json" "$OUT/"  # the table fitted here, to ship
  fi
  db="$sm/sm90_132.db"
  driver_args=()
  for f in .gpu/perf_models/*.txt; do driver_args+=(--driver-file "$f"); done
  # one process per GPU, each measuring every N-th problem, then one summary of all
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  shards=()
  for ((g = 0; g < gpus; g++)); do
    CUDA_VISIBLE_DEVICES=$g timeout 560 python3 benchmarks/find_quality.py --db "$db" \
      --seconds "${QUALITY_SECONDS:-480}" --model-dir "${MODEL_DIR:-$sm}" --device cuda \
      --limit "${LIMIT:-100}" --max-gflop "${MAX_GFLOP:-20}" --math-mode "${MATH_MODE:-exact}" \
      ${QDTYPE:+--dtype "$QDTYPE"} --fitted-wti "${driver_args[@]}" --shard "$g/$gpus" \
      --json "$OUT/quality${QTAG:-}_shard$g.json" >"$OUT/quality${QTAG:-}_shard$g.log" 2>&1 &
    shards+=("$OUT/quality${QTAG:-}_shard$g.json")
  done
  wait
  grep -a -h "stopped after" "$OUT"/quality"${QTAG:-}"_shard*.log
  python3 benchmarks/find_quality.py --db "$db" --model-dir "$sm" --merge "${shards[@]}" \
    --json "$OUT/quality${QTAG:-}.json" | tee "$OUT/quality${QTAG:-}.log" | tail -60
}
