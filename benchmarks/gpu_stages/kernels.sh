#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for
# issue 13: the Triton and wgmma kernels' GPU tests and benches.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
#   spans       issue 13: igemm.gpu_wgmma_wrw's tiles over 2-4 taps (span key) checked by its GPU
#               tests, then every tile of backward weights (span or not) on SPAN_SUITES (vgg16
#               unet3d) in SPAN_DTYPES (float16) against cuDNN (gpu_wgmma_bench.py)
#   splits      issue 13: miocore-triton's split-K GPU tests, then every configuration of the
#               3-D U-Net's forward and backward-data layers in NCHW (SPLIT_DTYPES, fp16 by
#               default) against cuDNN, no find (benchmarks/triton_split_report.py reads it)
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

stage_spans() {
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
}

stage_splits() {
  timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    plugins/triton/tests/test_triton_gpu.py -k split 2>&1 | tee "$OUT/split_tests.log" | tail -8
  # shellcheck disable=SC2086
  MIOCORE_DISABLE_PLUGINS=cudnn timeout "${SPLIT_TIMEOUT:-330}" python3 \
    benchmarks/gpu_triton_bench.py --suites unet3d --dtypes ${SPLIT_DTYPES:-float16} \
    --directions forward backward_data --layout NCHW --no-find --out "$OUT/splits.json" 2>&1 |
    grep -a -v Warning | tee "$OUT/splits.log" | tail -20
}

stage_triton() {
  timeout "${TRITON_TEST_TIMEOUT:-200}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    plugins/triton/tests/test_triton_gpu.py ${TRITON_TEST_ARGS:-} 2>&1 | tee "$OUT/triton_tests.log" | tail -25
  # shellcheck disable=SC2086
  MIOCORE_DISABLE_PLUGINS=cudnn timeout "${TRITON_TIMEOUT:-380}" python3 \
    benchmarks/gpu_triton_bench.py --suites ${TRITON_SUITES:-resnet50} \
    --dtypes ${TRITON_DTYPES:-float16} ${TRITON_ARGS:-} --out "$OUT/triton.json" 2>&1 |
    grep -a -v Warning | tee "$OUT/triton.log" | tail -80
}

stage_wgmma3d() {
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
}

stage_wgmma() {
  timeout "${WGMMA_TEST_TIMEOUT:-200}" python3 -m pytest -q -p no:cacheprovider -rfE \
    ${WGMMA_TESTS:-tests/test_gpu_igemm_wgmma.py} 2>&1 | tee "$OUT/wgmma_tests.log" | tail -25
  # shellcheck disable=SC2086
  timeout "${WGMMA_TIMEOUT:-330}" python3 benchmarks/gpu_wgmma_bench.py \
    --suites ${WGMMA_SUITES:-resnet50 vgg16} --dtypes ${WGMMA_DTYPES:-float16 bfloat16} \
    --directions ${WGMMA_DIRECTIONS:-forward backward_data} \
    ${WGMMA_ARGS:-} \
    --out "$OUT/wgmma.json" 2>&1 | grep -a -v Warning | tee "$OUT/wgmma.log" | tail -80
}

stage_wgmmarace() {
  timeout 300 python3 benchmarks/gpu_wgmma_order_race.py 2>&1 | tee "$OUT/wgmma_race.log"
  timeout 240 python3 -m pytest -q -p no:cacheprovider -rfE tests/test_gpu_igemm_wgmma.py \
    2>&1 | tee "$OUT/wgmma_tests.log" | tail -5
}
