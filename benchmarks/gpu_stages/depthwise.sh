#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for
# issue 13: direct.gpu_depthwise against cuDNN, its tile sweeps and switches.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
#   depthwise   direct.gpu_depthwise's default and DW_CONFIGS (1) neighbours of it against
#               cuDNN on ConvNeXt-T's, EfficientNet-B0's and MobileNetV2's depthwise layers
#               (gpu_depthwise_bench.py; DW_SUITES, DW_DIRECTIONS, DTYPES narrow it; DW_LAYOUTS,
#               NHWC by default; DW_BATCH, 32; DW_ARGS: more options, as in dwruns and dwwrw).
#               DW_CONFIGS=0 times the whole space: since the staged tiles' runs joined it,
#               thousands of configurations a layer, past any call's limit
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

# Every staged-tile config of direct.gpu_depthwise (gpu_depthwise_bench.py --configs 0
# --tile-only) beside the default against cuDNN, DW_SUITES ($3 by default) one bench run each,
# in directions $2, DW_TIMEOUT ($4) a run; $OUT/dw_$1_<suite>.json and its log
sweep_tiles() {
  # shellcheck disable=SC2086
  for suite in ${DW_SUITES:-$3}; do
    # the whole tile space compiles about a kernel a config: counted first
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

stage_depthwise() {
  # shellcheck disable=SC2086
  for suite in ${DW_SUITES:-convnext_t_dw efficientnet_b0_dw mobilenetv2}; do
    # shellcheck disable=SC2086
    timeout "${DW_TIMEOUT:-170}" python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch "${DW_BATCH:-32}" \
      --dtypes ${DTYPES} --layouts ${DW_LAYOUTS:-NHWC} --configs "${DW_CONFIGS:-1}" --runs 10 ${DW_ARGS:-} \
      --directions ${DW_DIRECTIONS:-forward backward_data backward_weights} \
      --out "$OUT/depthwise_$suite.json" 2>&1 | grep -a -v '^{' | tail -8
  done
}

stage_dwnchw() {
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_depthwise.py \
    -k "several or nchw" 2>&1 | tee "$OUT/dw_nchw_tests.log" | tail -5
  for suite in mobilenetv2 efficientnet_b0_dw convnext_t_dw; do
    timeout 120 python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch 64 \
      --dtypes float16 bfloat16 --layouts NCHW --configs 0 --runs 10 \
      --directions forward backward_data --out "$OUT/dw_nchw_$suite.json" 2>&1 |
      grep -a -v '^{' | tail -6
  done
}

stage_dwtiles() {
  timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE tests/test_gpu_depthwise.py \
    -k "staged or misaligned" 2>&1 | tee "$OUT/dw_tiles_tests.log" | tail -5
  for suite in mobilenetv2 efficientnet_b0_dw; do
    timeout 150 python3 benchmarks/gpu_depthwise_bench.py --suite "$suite" --batch 64 \
      --dtypes float16 bfloat16 --layouts NHWC --configs 1 --nhwc-tiles "${DW_TILES:-4}" \
      --tile-runs --runs 10 \
      --directions forward backward_data --out "$OUT/dw_tiles_$suite.json" 2>&1 |
      grep -a -v '^{' | tail -6
  done
}

stage_dwruns() {
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
}

stage_dwsweep() {
  # every staged-tile config (--configs 0 --tile-only) against cuDNN; DW_LAYERS narrows
  sweep_tiles sweep "${DW_DIRECTIONS:-forward backward_data}" convnext_t_dw 540
}

stage_dwvary() {
  # issue 13: at DW_BATCH (32), the default and the staged tiles that differ from the
  # batch-64 default tile only in DW_VARY's keys (run length, channel block), forward and
  # backward data, fp16, DW_SUITES; the kernels counted first (cold compiles decide the fit)
  # shellcheck disable=SC2086
  for suite in ${DW_SUITES:-mobilenetv3_large_dw efficientnet_b0_dw}; do
    # shellcheck disable=SC2206  # the lists split into words on purpose
    args=(--suite "$suite" --batch "${DW_BATCH:-32}" --dtypes ${DW_DTYPES:-float16}
      --layouts NHWC --configs 1 --vary ${DW_VARY:-nt ch} --ref-batch 64
      --directions ${DW_DIRECTIONS:-forward backward_data} ${DW_LAYERS:+--layers $DW_LAYERS})
    python3 benchmarks/gpu_depthwise_bench.py --count "${args[@]}" | tail -1
    timeout "${DW_TIMEOUT:-260}" python3 benchmarks/gpu_depthwise_bench.py "${args[@]}" \
      --runs 10 --out "$OUT/dw_vary_$suite.json" 2>&1 | tee "$OUT/dw_vary_$suite.log" |
      grep -a -v '^{' | tail -8
  done
}

stage_dwwrw() {
  # issue 13: dw_wrw_tile's TMA twins (and 2/4 channels a thread) checked by the depthwise
  # GPU tests, then every backward-weights tile config (staged through registers or by TMA)
  # beside the default against cuDNN, DW_DTYPES on DW_SUITES (MobileNetV2, EfficientNet-B0)
  [[ "${DW_TESTS:-1}" == 0 ]] ||
  timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    tests/test_gpu_depthwise.py 2>&1 | tee "$OUT/dw_tests.log" | tail -6
  sweep_tiles wrw backward_weights "mobilenetv2 efficientnet_b0_dw" 170
}

stage_dwab() {
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
}

stage_dwprofile() {
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
}
