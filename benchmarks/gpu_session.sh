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
# Stages:
#   suite       every GPU test file in two pytest runs side by side (on two GPUs where there
#               are): miocore-triton's 226 tests spread test by test over 10 processes (they
#               share nothing; one process took over 25 minutes for them), the rest file by
#               file over 10 (module fixtures reused); junit.xml and junit_triton.xml;
#               SUITE_PARTS=main or =triton runs one (on one GPU: a call each)
#   models      benchmarks/gpu_models.py, every plugin (cuDNN's engines included), eager;
#               MODELS / DTYPES narrow it, MODES widens it (eager graph compile); finds are
#               kept in /tmp/mdb-models for later stages
#   models-own  the same with MIOCORE_DISABLE_PLUGINS=cudnn (miocore's own kernels)
#   modes       torch.compile and CUDA-graph modes on the finds kept by `models`
#   cost        per-call host cost per solver and ResNet-50's pass (gpu_call_cost.py;
#               COST_ARGS passes its options, COST_TAG names the output files, COST_BASE
#               a folder whose miocore package runs instead of this tree's)
#   plugin      ResNet-50 per layer: all plugins, own kernels, PyTorch (gpu_cudnn_plugin.py)
#   findreport  why finds chose what they chose on the layers models lost on, under each
#               combination of miocore-cudnn's opt-in switches (gpu_find_report.py)
#   frontend    a network's host time through miocore.torch, peeled and profiled
#               (gpu_front_end_cost.py; FRONTEND_ARGS passes its options)
#   eager       whole networks eager, cuDNN and miocore alternating in one process
#               (gpu_eager_ratio.py; MODELS, DTYPES)
#   launch      each step of one convolution call and the driver calls under it, through
#               cuda-bindings and ctypes (gpu_launch_cost.py)
#   depthwise   direct.gpu_depthwise's default and DW_CONFIGS (1) neighbours of it against
#               cuDNN on ConvNeXt-T's, EfficientNet-B0's and MobileNetV2's depthwise layers
#               (gpu_depthwise_bench.py; DW_SUITES, DW_DIRECTIONS, DTYPES narrow it; DW_LAYOUTS,
#               NHWC by default; DW_BATCH, 32; DW_ARGS: more options, as in dwruns and dwwrw).
#               DW_CONFIGS=0 times the whole space: since the staged tiles' runs joined it,
#               thousands of configurations a layer, past any call's limit
#   tests       the GPU test files TESTS (TESTS_K: pytest's -k) over 8 processes, TESTS_TIMEOUT
#   dwnchw      issue 13: direct.gpu_depthwise's NCHW tests (the several-plane and register-row
#               configs among them), then its whole NCHW space against cuDNN, fp16 and bf16,
#               forward and backward data, on the three networks' depthwise layers (the data
#               its NCHW default is fitted on: benchmarks/depthwise_defaults_report.py)
#   dwtiles     issue 13: dw_nhwc_tile (NHWC 3x3 depthwise from staged tiles) checked by its GPU
#               tests, then its first DW_TILES tiles (4; capped and not, each also in runs of
#               2/4/8 tiles a block) beside dw_nhwc's default against cuDNN, fp16 and bf16,
#               forward and backward data, MobileNetV2 and EfficientNet-B0
#   dwruns      issue 13: every run of staged depthwise tiles in direct.gpu_depthwise's space
#               beside its default against cuDNN, fp16 and bf16 (DW_DTYPES), forward and
#               backward data, on DW_SUITES (MobileNetV2, EfficientNet-B0) at DW_BATCH (64)
#   dwsweep     issue 13: every staged-tile config of direct.gpu_depthwise (TMA twins, runs,
#               strips; the 7x7 tiles) beside the default against cuDNN, on DW_SUITES
#               (convnext_t_dw; convnext_bl_dw: ConvNeXt-B/L, held out of the 7x7 fit), DW_LAYERS
#               (all), DW_DTYPES (float16), DW_BATCH (64), DW_DIRECTIONS (forward
#               backward_data); a config is a kernel, and cold compiles ran under 7 a second
#               (3x3 layers: 250-500 configs a layer and direction; MobileNetV3-L's whole
#               space, 3,572 kernels, did not compile in 530 s): the log's first line counts
#               them; DW_TIMEOUT (540) a suite, the binary cache kept between calls
#   dwvary      issue 13: at DW_BATCH (32) the default and the tiles that differ from the
#               batch-64 default tile only in DW_VARY's keys (nt ch), DW_SUITES (MobileNetV3-L,
#               EfficientNet-B0: ~290 kernels), results written after every row
#   dwwrw       issue 13: the depthwise GPU tests, then every backward-weights tile config
#               (TMA twins and channels a thread included) against cuDNN (DW_DTYPES, DW_SUITES)
#   dwab        issue 13: the depthwise switches (narrow TMA L2 promotion, channel blocks
#               first; on as shipped) A/B on the defaults and their TMA twins against cuDNN
#               (DWAB_SETTINGS, DWAB_SUITES, DWAB_DTYPES, DWAB_DIRECTIONS);
#               depthwise_switch_report.py sums it up
#   dwprofile   issue 13: Nsight Compute on direct.gpu_depthwise's default and cuDNN, one call
#               each on DWP_LAYERS (MobileNetV2, batch 64, DWP_DTYPE fp16, DWP_DIRECTION
#               forward); the report in $OUT/dw_profile.txt (DWP_CONFIG, DWP_NO_CUDNN, DWP_SET,
#               DWP_TAG: one config, ours alone, every section, the report's name; DWP_ARGS:
#               more options, e.g. --tma-l2 wide, --channel-blocks-first off)
#   spans       issue 13: igemm.gpu_wgmma_wrw's tiles over 2-4 taps (span key) checked by its GPU
#               tests, then every tile of backward weights (span or not) on SPAN_SUITES (vgg16
#               unet3d) in SPAN_DTYPES (float16) against cuDNN (gpu_wgmma_bench.py)
#   splits      issue 13: miocore-triton's split-K GPU tests, then every configuration of the
#               3-D U-Net's forward and backward-data layers in NCHW (SPLIT_DTYPES, fp16 by
#               default) against cuDNN, no find (benchmarks/triton_split_report.py reads it)
#   firstfind   the first find of MODELS twice in one machine session: with a cold binary
#               cache, then with an empty database and the binary cache kept
#   findprofile where a first find's time goes, per phase and solver family, with a cold
#               and a warm binary cache (gpu_find_profile.py; PROFILE_MODELS, DTYPES)
#   findab      the first find with a warm binary cache, this tree against .old (a
#               `git archive` of another commit), alternating (gpu_find_profile.py)
#   findenv     the first find under several settings of this tree (FENV_PASSES), their
#               choices judged by one pass that measured everything (find_choice_compare.py)
#   rtcprobe    cuDNN's run-time compiled configurations built plain and in dynamic-shape
#               graphs sharing a kernel cache (gpu_find_profile.py --rtc-probe)
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
#   triton      issue 13: the miocore-triton tests on the GPU (TRITON_TEST_ARGS narrows them), then
#               gpu_triton_bench.py (Triton's default and best configurations, own-kernel find, cuDNN) on TRITON_SUITES
#               (resnet50) in TRITON_DTYPES (float16); TRITON_ARGS passes more options
#   wgmma3d     issue 13: the 3-D wgmma kernels' GPU tests (forward, backward data, backward
#               weights), then the 3-D U-Net through them against cuDNN (W3D_LAYOUT NCHW,
#               W3D_DTYPES float16 float32)
#   wgmma       issue 13: igemm.gpu_wgmma's GPU tests, then gpu_wgmma_bench.py (the default and
#               more configurations against cuDNN, forward and backward data) on WGMMA_SUITES
#               (resnet50 vgg16) in WGMMA_DTYPES (float16 bfloat16) and WGMMA_DIRECTIONS
#               (forward backward_data; backward_weights: igemm.gpu_wgmma_wrw); WGMMA_TESTS
#               names the test files; WGMMA_ARGS passes more options (--layers, --configs 0
#               for the defaults alone)
#   wgmmarace   igemm.gpu_wgmma's ping-pong order barriers under a provoked race, as they are
#               and with the first protocol (gpu_wgmma_order_race.py), then the wgmma tests
#   vscudnn     issue 13's table: gpu_vs_cudnn.py, own kernels (MIOCORE_DISABLE_PLUGINS=cudnn),
#               VS_SUITES (resnet50) x VS_DTYPES (float16) x VS_DIRECTIONS (all three) in
#               VS_LAYOUT (NCHW); VS_ARGS passes more options (--layers)
#   vstable     issue 13's table on a several-GPU kind: one gpu_vs_cudnn.py job list per GPU, run
#               side by side (each GPU times only its own jobs), every job's JSON in
#               $OUT/vstable.tgz. VS_JOBS: one list per GPU, separated by ';', of jobs
#               LAYOUT:DTYPE:PLUGINS:SUITE[,SUITE] separated by spaces (PLUGINS: own or all);
#               VS_DEADLINE: seconds until every job is stopped (each writes after every suite);
#               VS_DIRECTIONS narrows every job; each GPU's find records (every candidate's
#               time at today's revisions) in db_gpu<i>/sm90_132.db of the tarball, to merge
#               into the sm90 system database (benchmarks/merge_db.py) and retrain on
#   parallel    any commands side by side on a several-GPU kind: PAR_CMDS, one command per GPU
#               separated by ';' (each sees only its own GPU, its output in /tmp/par/gpu<i>.log,
#               files it writes under /tmp/par kept); PAR_DEADLINE seconds for them all;
#               everything in $OUT/parallel.tgz
#   quality     issue 14 on the GPU: the shipped sm90 database's WTI table fitted on the device
#               (heuristic train --wti-only), then immediate mode against NORMAL find on
#               LIMIT held-out problems and the layers of the MIOpenDriver files carried in
#               .gpu/perf_models (find_quality.py, batch cut to MAX_GFLOP; the fitted WTI
#               table alone ranked too: the fallback's quality); MATH_MODE,
#               QDTYPE (one data type), MODEL_DIR (another model) and QTAG (output names);
#               one process a GPU, each every N-th problem (--shard), merged into one summary
set -uo pipefail
STAGE="${1:?stage: suite|models|models-own|modes|cost|plugin|findreport|frontend|eager|launch|depthwise|firstfind|findprofile|findab|findenv|rtcprobe|scaling|gpudb|tf32db|tritondb|triton|wgmma|wgmmarace|vscudnn|quality|dwnchw|splits|wgmma3d|vstable|parallel|tests|dwtiles|dwruns|dwsweep|dwvary|dwwrw|dwab|dwprofile|spans|refreshdb|nhwcdb}"
OUT="${OUT:-/tmp/out}"
mkdir -p "$OUT"
# shellcheck source=/dev/null
source benchmarks/gpu_device_env.sh || exit 3
python3 -m pip install -q --no-index --no-deps --target /tmp/site2 .gpu/nvmath/*.whl
export PYTHONPATH="/tmp/site2:$PYTHONPATH"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.csv"
MODELS="${MODELS:-resnet50 efficientnet_b0 mobilenet_v3_large convnext_tiny unet}"
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
# Every staged-tile config of direct.gpu_depthwise (gpu_depthwise_bench.py --configs 0
# --tile-only) beside the default against cuDNN, DW_SUITES ($3 by default) one bench run each,
# in directions $2, DW_TIMEOUT ($4) a run; $OUT/dw_$1_<suite>.json and its log
sweep_tiles() {
  # shellcheck disable=SC2086
  for suite in ${DW_SUITES:-$3}; do
    # the whole tile space compiles about a kernel a config, ~1 s each cold: counted first
    python3 benchmarks/gpu_depthwise_bench.py --count --suite "$suite" --batch "${DW_BATCH:-64}" \
      --dtypes ${DW_DTYPES:-float16} --layouts NHWC --configs 0 --tile-only --directions $2 \
      ${DW_LAYERS:+--layers $DW_LAYERS} ${DW_ARGS:-} | tail -1
    timeout "${DW_TIMEOUT:-$4}" python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" \
      --batch "${DW_BATCH:-64}" --dtypes ${DW_DTYPES:-float16} --layouts NHWC --configs 0 \
      --tile-only --runs 10 --directions $2 ${DW_LAYERS:+--layers $DW_LAYERS} ${DW_ARGS:-} \
      --out "$OUT/dw_$1_$suite.json" 2>&1 | tee "$OUT/dw_$1_$suite.log" | grep -a -v '^{' |
      tail -8
  done
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
DTYPES="${DTYPES:-float16 bfloat16 float32}"
case "$STAGE" in
  suite)
    # SUITE_PARTS: "main triton" (both, side by side); on one GPU they do not finish in one
    # call together (2026-11-29: triton's 237 s, the rest 98% in 540 s): one part a call
    second=$(($(nvidia-smi -L | wc -l) > 1 ? 1 : 0))  # the second run's GPU
    parts=" ${SUITE_PARTS:-main triton} "
    [[ "$parts" == *" main "* ]] &&
      CUDA_VISIBLE_DEVICES=0 timeout "${SUITE_TIMEOUT:-560}" python3 -m pytest -q -n 10 \
        --dist loadfile -p no:cacheprovider -rfE -p no:benchmark --junitxml="$OUT/junit.xml" \
        tests/test_gpu_*.py tests/test_torch_gpu.py tests/test_numerics_gpu.py \
        plugins/cudnn/tests/test_cudnn_gpu.py >"$OUT/suite.log" 2>&1 &
    [[ "$parts" == *" triton "* ]] &&
      CUDA_VISIBLE_DEVICES=$second timeout "${SUITE_TIMEOUT:-560}" python3 -m pytest -q -n 10 \
        --dist load -p no:cacheprovider -rfE -p no:benchmark --junitxml="$OUT/junit_triton.xml" \
        plugins/triton/tests/test_triton_gpu.py >"$OUT/suite_triton.log" 2>&1 &
    wait
    for log in "$OUT/suite.log" "$OUT/suite_triton.log"; do
      [[ -f "$log" ]] || continue
      echo "== $log"
      grep -a -v Warning "$log" | tail -20
    done
    ;;
  models | models-own)
    [[ "$STAGE" == models-own ]] && export MIOCORE_DISABLE_PLUGINS=cudnn
    # shellcheck disable=SC2086
    timeout 560 python3 benchmarks/gpu_models.py --models $MODELS --dtypes $DTYPES \
      --modes ${MODES:-eager} --db "/tmp/mdb-$STAGE" --out "$OUT/$STAGE.json" 2>&1 |
      grep -a -v Warning | tee "$OUT/$STAGE.log" | tail -40
    ;;
  modes)
    # shellcheck disable=SC2086
    timeout 560 python3 benchmarks/gpu_models.py --models $MODELS --dtypes $DTYPES \
      --modes compile graph --db /tmp/mdb-models --out "$OUT/modes.json" 2>&1 |
      grep -a -v Warning | tee "$OUT/modes.log" | tail -40
    ;;
  cost)
    # COST_BASE: a folder holding another tree's miocore package, imported instead of this one
    # shellcheck disable=SC2086
    PYTHONPATH="${COST_BASE:+$COST_BASE:}$PYTHONPATH" \
      timeout "${COST_TIMEOUT:-560}" python3 benchmarks/gpu_call_cost.py ${COST_ARGS:-} \
      --out "$OUT/call_cost${COST_TAG:-}.json" 2>&1 | tee "$OUT/cost${COST_TAG:-}.log" | tail -40
    ;;
  plugin)
    timeout 560 python3 benchmarks/gpu_cudnn_plugin.py --out "$OUT/cudnn_plugin.json" \
      ${PLUGIN_ARGS:---dtypes float16 --directions forward backward_data backward_weights} 2>&1 |
      tee "$OUT/plugin.log" | tail -40
    ;;
  findreport)
    timeout 560 python3 benchmarks/gpu_find_report.py --switches none rc rp rc+rp \
      --policies default --out "$OUT/find_report.json" 2>&1 | grep -a -v Warning |
      tee "$OUT/find_report.log" | cut -c1-400
    ;;
  frontend)
    # shellcheck disable=SC2086
    timeout 560 python3 benchmarks/gpu_front_end_cost.py --out "$OUT/front_end.json" \
      ${FRONTEND_ARGS:-} 2>&1 | grep -a -v Warning | tee "$OUT/front_end.log" | tail -60
    ;;
  eager)
    # shellcheck disable=SC2086
    for dtype in $DTYPES; do
      timeout 500 python3 benchmarks/gpu_eager_ratio.py --models $MODELS --dtype "$dtype" \
        --out "$OUT/eager_ratio_$dtype.json" 2>&1 | grep -a '^[a-z_0-9]* {'
    done
    ;;
  launch)
    for dtype in float16 float32; do
      timeout 200 python3 benchmarks/gpu_launch_cost.py --dtype "$dtype" \
        --out "$OUT/launch_cost_$dtype.json" 2>&1 | grep -av Warning | tail -40
    done
    ;;
  depthwise)
    # shellcheck disable=SC2086
    for suite in ${DW_SUITES:-convnext_t_dw efficientnet_b0_dw mobilenetv2}; do
      # shellcheck disable=SC2086
      timeout "${DW_TIMEOUT:-170}" python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch "${DW_BATCH:-32}" \
        --dtypes ${DTYPES} --layouts ${DW_LAYOUTS:-NHWC} --configs "${DW_CONFIGS:-1}" --runs 10 ${DW_ARGS:-} \
        --directions ${DW_DIRECTIONS:-forward backward_data backward_weights} \
        --out "$OUT/depthwise_$suite.json" 2>&1 | grep -a -v '^{' | tail -8
    done
    ;;
  tests)
    # any GPU test files (TESTS) over 8 processes, TESTS_K selecting tests by name
    # shellcheck disable=SC2086
    timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      ${TESTS:?TESTS: test files} ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT/tests.log" | tail -12
    ;;
  dwnchw)
    timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_depthwise.py \
      -k "several or nchw" 2>&1 | tee "$OUT/dw_nchw_tests.log" | tail -5
    for suite in mobilenetv2 efficientnet_b0_dw convnext_t_dw; do
      timeout 120 python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch 64 \
        --dtypes float16 bfloat16 --layouts NCHW --configs 0 --runs 10 \
        --directions forward backward_data --out "$OUT/dw_nchw_$suite.json" 2>&1 |
        grep -a -v '^{' | tail -6
    done
    ;;
  dwtiles)
    timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/test_gpu_depthwise.py \
      -k "staged or misaligned" 2>&1 | tee "$OUT/dw_tiles_tests.log" | tail -5
    for suite in mobilenetv2 efficientnet_b0_dw; do
      timeout 150 python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch 64 \
        --dtypes float16 bfloat16 --layouts NHWC --configs 1 --nhwc-tiles "${DW_TILES:-4}" \
        --tile-runs --runs 10 \
        --directions forward backward_data --out "$OUT/dw_tiles_$suite.json" 2>&1 |
        grep -a -v '^{' | tail -6
    done
    ;;
  dwruns)
    # every run of staged tiles in direct.gpu_depthwise's space (each tile shape, channel block
    # and outputs a thread) beside the default, against cuDNN: the data to refit its default
    # shellcheck disable=SC2086
    for suite in ${DW_SUITES:-mobilenetv2 efficientnet_b0_dw}; do
      timeout "${DW_TIMEOUT:-270}" python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" \
        --batch "${DW_BATCH:-64}" --dtypes ${DW_DTYPES:-float16 bfloat16} --layouts NHWC \
        --configs 1 --space-runs --runs 10 --directions ${DW_DIRECTIONS:-forward backward_data} ${DW_ARGS:-} \
        --out "$OUT/dw_runs_$suite.json" 2>&1 | tee "$OUT/dw_runs_$suite.log" | grep -a -v '^{' |
        tail -6  # the log keeps each row as it is timed: a timeout loses only the last
    done
    ;;
  dwsweep)
    # every staged-tile config (--configs 0 --tile-only) against cuDNN; DW_LAYERS narrows
    sweep_tiles sweep "${DW_DIRECTIONS:-forward backward_data}" convnext_t_dw 540
    ;;
  dwvary)
    # issue 13: at DW_BATCH (32), the default and the staged tiles that differ from the
    # batch-64 default tile only in DW_VARY's keys (run length, channel block), forward and
    # backward data, fp16, DW_SUITES; the kernels counted first (cold compiles decide the fit)
    # shellcheck disable=SC2086
    for suite in ${DW_SUITES:-mobilenetv3_large_dw efficientnet_b0_dw}; do
      args=(--suite "$suite" --batch "${DW_BATCH:-32}" --dtypes ${DW_DTYPES:-float16}
        --layouts NHWC --configs 1 --vary ${DW_VARY:-nt ch} --ref-batch 64
        --directions ${DW_DIRECTIONS:-forward backward_data} ${DW_LAYERS:+--layers $DW_LAYERS})
      python3 benchmarks/gpu_depthwise_bench.py --count "${args[@]}" | tail -1
      timeout "${DW_TIMEOUT:-260}" python3 benchmarks/gpu_depthwise_bench.py "${args[@]}" \
        --runs 10 --out "$OUT/dw_vary_$suite.json" 2>&1 | tee "$OUT/dw_vary_$suite.log" |
        grep -a -v '^{' | tail -8
    done
    ;;
  dwwrw)
    # issue 13: dw_wrw_tile's TMA twins (and 2/4 channels a thread) checked by the depthwise
    # GPU tests, then every backward-weights tile config (staged through registers or by TMA)
    # beside the default against cuDNN, DW_DTYPES on DW_SUITES (MobileNetV2, EfficientNet-B0)
    [[ "${DW_TESTS:-1}" == 0 ]] ||
    timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      tests/test_gpu_depthwise.py 2>&1 | tee "$OUT/dw_tests.log" | tail -6
    sweep_tiles wrw backward_weights "mobilenetv2 efficientnet_b0_dw" 170
    ;;
  dwab)
    # issue 13: direct.gpu_depthwise's switches, as shipped and turned the other way, A/B on
    # its defaults (and each staged tile's TMA twin) against cuDNN, fp16 (DWAB_DTYPES), forward and
    # backward data (DWAB_DIRECTIONS; backward weights' tiles: dwwrw with DW_ARGS), batch 64,
    # DWAB_SUITES; one bench run per setting of DWAB_SETTINGS (';'-separated option lists, ""
    # the baseline); then benchmarks/depthwise_switch_report.py over the runs
    IFS=';' read -r -a settings <<<"${DWAB_SETTINGS:-;--tma-l2 wide;--channel-blocks-first off;--tma-l2 wide --channel-blocks-first off}"
    for i in "${!settings[@]}"; do
      for suite in ${DWAB_SUITES:-mobilenetv2 efficientnet_b0_dw mobilenetv3_large_dw}; do
        # shellcheck disable=SC2086
        timeout "${DWAB_TIMEOUT:-90}" python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" \
          --batch 64 --dtypes ${DWAB_DTYPES:-float16} --layouts NHWC --configs 1 --tma-twins \
          --directions ${DWAB_DIRECTIONS:-forward backward_data} --runs 10 ${settings[$i]} \
          --out "$OUT/dwab_${i}_$suite.json" 2>&1 |
          grep -a -E "geomean" | head -4
      done
    done
    python3 benchmarks/depthwise_switch_report.py "$OUT"/dwab_*.json | tee "$OUT/dwab_report.txt"
    ;;
  dwprofile)
    # Nsight Compute on direct.gpu_depthwise's default (the staged tiles' runs) and cuDNN, one
    # forward call each on DWP_LAYERS (MobileNetV2, batch 64, DWP_DTYPE): where the time goes
    # DWP_CONFIG: one perf config (JSON) instead of the default; DWP_NO_CUDNN=1: ours alone;
    # DWP_SET=full: every section; DWP_TAG names the report ($OUT/dw_profile$DWP_TAG.txt)
    sections=(--section SpeedOfLight --section Occupancy --section LaunchStats
      --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis)
    [[ -n "${DWP_SET:-}" ]] && sections=(--set "$DWP_SET")
    report="$OUT/dw_profile${DWP_TAG:-}.txt"
    # shellcheck disable=SC2086
    timeout "${DWP_TIMEOUT:-400}" ncu --clock-control none --profile-from-start off \
      -k regex:"dw_|grad|conv" "${sections[@]}" python3 benchmarks/gpu_dw_profile.py --direction \
      "${DWP_DIRECTION:-forward}" --batch 64 --dtype "${DWP_DTYPE:-float16}" \
      ${DWP_CONFIG:+--config "$DWP_CONFIG"} ${DWP_NO_CUDNN:+--no-cudnn} ${DWP_ARGS:-} \
      --layers ${DWP_LAYERS:-dw144s1@56 dw144s2@56 dw32s1@112 dw576s1@14} >"$report" 2>&1
    grep -a -E "^dw|  dw_|  [a-z_0-9]*conv|Duration|DRAM Throughput|Registers Per|Achieved Occ|Warp Cycles Per Issued|Executed Ipc A" \
      "$report" | head -80
    ;;
  spans)
    # igemm.gpu_wgmma_wrw's tiles over several taps: their GPU tests, then backward weights of
    # the suites (SPAN_SUITES; SPAN_DTYPES) with every tile once (span or not) against cuDNN
    [[ "${SPAN_TESTS:-1}" == 0 ]] ||  # SPAN_TESTS=0: the bench alone
    timeout "${SPAN_TEST_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      tests/test_gpu_igemm_wgmma_wrw.py -k "span or every_config" 2>&1 |
      tee "$OUT/span_tests.log" | tail -8
    # shellcheck disable=SC2086
    timeout "${SPAN_TIMEOUT:-300}" python3 benchmarks/gpu_wgmma_bench.py \
      --suites ${SPAN_SUITES:-vgg16 unet3d} --dtypes ${SPAN_DTYPES:-float16} \
      --directions backward_weights --configs "${SPAN_CONFIGS:-4}" --out "$OUT/spans.json" 2>&1 |
      grep -a -v Warning | tee "$OUT/spans.log" | tail -40
    ;;
  splits)
    timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      plugins/triton/tests/test_triton_gpu.py -k split 2>&1 | tee "$OUT/split_tests.log" | tail -8
    # shellcheck disable=SC2086
    MIOCORE_DISABLE_PLUGINS=cudnn timeout "${SPLIT_TIMEOUT:-330}" python3 \
      benchmarks/gpu_triton_bench.py --suites unet3d --dtypes ${SPLIT_DTYPES:-float16} \
      --directions forward backward_data --layout NCHW --no-find --out "$OUT/splits.json" 2>&1 |
      grep -a -v Warning | tee "$OUT/splits.log" | tail -20
    ;;
  firstfind)
    for cache in cold warm; do
      # shellcheck disable=SC2086
      timeout 270 python3 benchmarks/gpu_models.py --models $MODELS --dtypes ${DTYPES%% *} \
        --modes eager --iters 3 --db "/tmp/firstfind-$cache" --out "$OUT/firstfind_$cache.json" \
        >"$OUT/firstfind_$cache.log" 2>&1
      grep -a first_find "$OUT/firstfind_$cache.log" | cut -c1-160
    done
    ;;
  findprofile)
    # A first find split by phase (gpu_find_profile.py): per model a pass with a cold
    # binary cache, one with an empty database and the cache warm, one more under cProfile.
    for model in ${PROFILE_MODELS:-resnet50 efficientnet_b0}; do
      for pass in cold warm prof; do
        extra=""
        [ "$pass" = prof ] && extra="--profile /tmp/fprof/$model-prof.txt"
        mkdir -p /tmp/fprof
        # shellcheck disable=SC2086
        timeout 200 python3 benchmarks/gpu_find_profile.py --model "$model" \
          --dtype "${DTYPES%% *}" --db "/tmp/fprof-db-$model-$pass" \
          --out "/tmp/fprof/$model-$pass.json" $extra >"/tmp/fprof/$model-$pass.log" 2>&1
        grep -av Warning "/tmp/fprof/$model-$pass.log" | head -45
      done
    done
    tar -czf "$OUT/findprofile.tgz" -C /tmp fprof
    ;;
  findab)
    # The first find with a warm binary cache, this tree against the one in .old (a
    # `git archive` of the commit before), alternating, per model (gpu_find_profile.py).
    [ -e .old/miocore/data/db ] || cp -r miocore/data/db .old/miocore/data/
    old_path="$PWD/.old:/tmp/site:$(ls -d "$PWD"/.old/plugins/*/src | grep -v _template | paste -sd:)"
    new_path="$PYTHONPATH"
    mkdir -p /tmp/fab
    # FAB_PASSES: model:pass items (pass = old-cold, old-N or new-N), in order.
    for item in ${FAB_PASSES:-resnet50:old-cold resnet50:old-1 resnet50:new-1}; do
      model="${item%%:*}" pass="${item#*:}"
      tree="${pass%%-*}"
      if [ "$tree" = old ]; then export PYTHONPATH="$old_path"; else export PYTHONPATH="$new_path"; fi
      # shellcheck disable=SC2086
      timeout "${FAB_TIMEOUT:-150}" python3 benchmarks/gpu_find_profile.py --model "$model" \
        --dtype "${DTYPES%% *}" --db "/tmp/fab/db-$model-$pass" ${FAB_ARGS:-} \
        --out "/tmp/fab/$model-$pass.json" >"/tmp/fab/$model-$pass.log" 2>&1
      echo "$item rc=$?"; grep -av Warning "/tmp/fab/$model-$pass.log" | grep -a "finds in\|probe"
      tar -czf "$OUT/findab.tgz" -C /tmp fab
    done
    export PYTHONPATH="$new_path"
    tar -czf "$OUT/findab.tgz" -C /tmp fab
    ;;
  findenv)
    # The first find under different settings of this tree, per model, one process each
    # (gpu_find_profile.py): FENV_PASSES items are model:label[:VAR=VALUE[+VAR=VALUE]], in
    # order (the first pass of a model fills the binary cache). FENV_REFERENCE names the
    # label whose database judges the others' choices (find_choice_compare.py). FENV_HIDE=1:
    # each pass against a copy of the system databases without the model's own layers (the
    # sm90 database holds ResNet-50's, EfficientNet-B0's and MobileNetV3-L's fp16 ones).
    mkdir -p /tmp/fenv
    for item in ${FENV_PASSES:-resnet50:cold resnet50:on}; do
      IFS=: read -r model label settings <<<"$item"
      hide=""
      [ "${FENV_HIDE:-0}" = 1 ] && hide="--hide-from-system-db /tmp/fenv/sys-$model-$label"
      # shellcheck disable=SC2046,SC2086
      env $(tr '+' ' ' <<<"${settings:-}") timeout "${FENV_TIMEOUT:-150}" \
        python3 benchmarks/gpu_find_profile.py --model "$model" --dtype "${DTYPES%% *}" \
        --db "/tmp/fenv/db-$model-$label" --out "/tmp/fenv/$model-$label.json" $hide \
        >"/tmp/fenv/$model-$label.log" 2>&1
      echo "$item rc=$?"
      grep -a "finds in\|runs \|cudnn_heuristics\|  time \| find.time" "/tmp/fenv/$model-$label.log" | head -12
      tar -czf "$OUT/findenv.tgz" --exclude='sys-*' -C /tmp fenv
    done
    ref="${FENV_REFERENCE:-on}"
    for model in $(for i in ${FENV_PASSES:-}; do echo "${i%%:*}"; done | sort -u); do
      # shellcheck disable=SC2046
      python3 benchmarks/find_choice_compare.py --reference "/tmp/fenv/db-$model-$ref" \
        --db $(ls -d /tmp/fenv/db-"$model"-* | grep -v -- "-$ref\$\|-cold\$") \
        --out "/tmp/fenv/compare-$model.json"
    done
    tar -czf "$OUT/findenv.tgz" --exclude='sys-*' -C /tmp fenv
    ;;
  rtcprobe)
    # cuDNN's run-time compiled configurations: a find pass per model (a database of its
    # problems), then, each in a fresh process, their plain builds against builds in
    # dynamic-shape graphs sharing a kernel cache (gpu_find_profile.py --rtc-probe).
    mkdir -p /tmp/rtc
    for model in ${PROFILE_MODELS:-resnet50 efficientnet_b0}; do
      timeout 150 python3 benchmarks/gpu_find_profile.py --model "$model" --dtype "${DTYPES%% *}" \
        --db "/tmp/rtc/db-$model" --out "/tmp/rtc/$model-pass.json" >"/tmp/rtc/$model-pass.log" 2>&1
      grep -a "finds in" "/tmp/rtc/$model-pass.log"
      for mode in plain dynamic plain dynamic; do
        timeout 100 python3 benchmarks/gpu_find_profile.py --rtc-probe "$mode" \
          --rtc-count "${RTC_COUNT:-60}" --db "/tmp/rtc/db-$model" --out "/tmp/rtc/$model-$mode.json" \
          2>&1 | grep -a "rtc probe" | cut -c1-700
      done
      tar -czf "$OUT/rtcprobe.tgz" -C /tmp rtc
    done
    ;;
  scaling)
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
    ;;
  gpudb)
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
    ;;
  tf32db)
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
    ;;
  tritondb)
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
    ;;
  refreshdb)
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
    ;;
  nhwcdb)
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
    ;;
  triton)
    timeout "${TRITON_TEST_TIMEOUT:-200}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      plugins/triton/tests/test_triton_gpu.py ${TRITON_TEST_ARGS:-} 2>&1 | tee "$OUT/triton_tests.log" | tail -25
    # shellcheck disable=SC2086
    MIOCORE_DISABLE_PLUGINS=cudnn timeout "${TRITON_TIMEOUT:-380}" python3 \
      benchmarks/gpu_triton_bench.py --suites ${TRITON_SUITES:-resnet50} \
      --dtypes ${TRITON_DTYPES:-float16} ${TRITON_ARGS:-} --out "$OUT/triton.json" 2>&1 |
      grep -a -v Warning | tee "$OUT/triton.log" | tail -80
    ;;
  wgmma)
    timeout "${WGMMA_TEST_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -rfE \
      ${WGMMA_TESTS:-tests/test_gpu_igemm_wgmma.py} 2>&1 | tee "$OUT/wgmma_tests.log" | tail -25
    # shellcheck disable=SC2086
    timeout "${WGMMA_TIMEOUT:-330}" python3 benchmarks/gpu_wgmma_bench.py \
      --suites ${WGMMA_SUITES:-resnet50 vgg16} --dtypes ${WGMMA_DTYPES:-float16 bfloat16} \
      --directions ${WGMMA_DIRECTIONS:-forward backward_data} \
      ${WGMMA_ARGS:-} \
      --out "$OUT/wgmma.json" 2>&1 | grep -a -v Warning | tee "$OUT/wgmma.log" | tail -80
    ;;
  wgmma3d)
    # the 3-D wgmma kernels: their GPU tests, then the 3-D U-Net's layers through them
    # against cuDNN (W3D_LAYOUT, W3D_DTYPES)
    timeout "${W3D_TEST_TIMEOUT:-300}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
      tests/test_gpu_igemm_wgmma.py tests/test_gpu_igemm_wgmma_wrw.py -k 3d 2>&1 |
      tee "$OUT/wgmma3d_tests.log" | tail -15
    # shellcheck disable=SC2086
    timeout "${W3D_TIMEOUT:-240}" python3 benchmarks/gpu_wgmma_bench.py \
      --suites unet3d --dtypes ${W3D_DTYPES:-float16 float32} \
      --directions forward backward_data backward_weights --layout "${W3D_LAYOUT:-NCHW}" \
      --configs "${W3D_CONFIGS:-4}" --out "$OUT/wgmma3d.json" 2>&1 | grep -a -v Warning |
      tee "$OUT/wgmma3d.log" | tail -50
    ;;
  wgmmarace)
    timeout 300 python3 benchmarks/gpu_wgmma_order_race.py 2>&1 | tee "$OUT/wgmma_race.log"
    timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_igemm_wgmma.py \
      2>&1 | tee "$OUT/wgmma_tests.log" | tail -5
    ;;
  vscudnn)
    # shellcheck disable=SC2086
    MIOCORE_DISABLE_PLUGINS=cudnn timeout "${VS_TIMEOUT:-560}" python3 benchmarks/gpu_vs_cudnn.py \
      --suites ${VS_SUITES:-resnet50} --dtypes ${VS_DTYPES:-float16} \
      --directions ${VS_DIRECTIONS:-forward backward_data backward_weights} \
      --layout "${VS_LAYOUT:-NCHW}" --skip-extras ${VS_ARGS:-} --out "$OUT/vs_cudnn.json" 2>&1 |
      grep -a -v Warning > "$OUT/vs_cudnn.log"
    grep -a "cuDNN/miocore" "$OUT/vs_cudnn.log"
    ;;
  vstable)
    mkdir -p /tmp/vstable
    deadline=$(($(date +%s) + ${VS_DEADLINE:-540}))
    IFS=';' read -r -a lists <<<"${VS_JOBS:?VS_JOBS: job lists, one per GPU}"
    gpu=0
    for list in "${lists[@]}"; do
      (
        for job in $list; do
          IFS=: read -r layout dtype plugins suites <<<"$job"
          left=$((deadline - $(date +%s)))
          ((left > 20)) || break
          disable=cudnn
          [[ "$plugins" == all ]] && disable=""
          tag="${layout}_${dtype}_${plugins}_${suites//,/-}"
          # shellcheck disable=SC2046
          CUDA_VISIBLE_DEVICES=$gpu MIOCORE_DISABLE_PLUGINS="$disable" timeout "$left" \
            python3 benchmarks/gpu_vs_cudnn.py --suites $(tr ',' ' ' <<<"$suites") \
            --dtypes "$dtype" --layout "$layout" --skip-extras \
            --directions ${VS_DIRECTIONS:-forward backward_data backward_weights} \
            --out "/tmp/vstable/$tag.json" --db "/tmp/vstable/db_gpu$gpu" \
            >"/tmp/vstable/$tag.log" 2>&1
          echo "gpu $gpu $tag rc=$?"
          grep -a "cuDNN/miocore" "/tmp/vstable/$tag.log"
        done
      ) &
      gpu=$((gpu + 1))
    done
    wait
    tar -czf "$OUT/vstable.tgz" -C /tmp vstable
    ;;
  parallel)
    mkdir -p /tmp/par
    IFS=';' read -r -a commands <<<"${PAR_CMDS:?PAR_CMDS: commands, one per GPU}"
    gpu=0
    for command in "${commands[@]}"; do
      CUDA_VISIBLE_DEVICES=$gpu timeout "${PAR_DEADLINE:-540}" bash -c "$command" \
        >"/tmp/par/gpu$gpu.log" 2>&1 &
      gpu=$((gpu + 1))
    done
    wait
    for log in /tmp/par/gpu*.log; do
      echo "== $log"
      grep -a -v Warning "$log" | tail -15
    done
    tar -czf "$OUT/parallel.tgz" -C /tmp par
    ;;
  quality)
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
    ;;
  *)
    echo "unknown stage $STAGE" >&2
    exit 2
    ;;
esac
