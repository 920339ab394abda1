#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for the GPU test suite and chosen test files.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
#   suite       every GPU test file in two pytest runs side by side (on two GPUs where there
#               are): miocore-triton's 226 tests spread test by test over 10 processes (they
#               share nothing; one process took over 25 minutes for them), the rest file by
#               file over 10 (module fixtures reused); junit.xml and junit_triton.xml;
#               SUITE_PARTS=main or =triton runs one (on one GPU: a call each). The host-only
#               files among tests/test_gpu_* (*_cpu.py, *_host.py: CI runs them) are left out:
#               with them the main part reached 97% of its tests in the 560 s of one call
#               (forty-fourth and forty-fifth sessions)
#   tests       the GPU test files TESTS (TESTS_K: pytest's -k) over 8 processes, TESTS_TIMEOUT

stage_suite() {
  # SUITE_PARTS: "main triton" (both, side by side); on one GPU they do not finish in one
  # call together (2026-11-29: triton's 237 s, the rest 98% in 540 s): one part a call
  second=$(($(nvidia-smi -L | wc -l) > 1 ? 1 : 0))  # the second run's GPU
  parts=" ${SUITE_PARTS:-main triton} "
  mapfile -t device_files < <(ls tests/test_gpu_*.py | grep -v -e '_cpu\.py$' -e '_host\.py$')
  [[ "$parts" == *" main "* ]] &&
    CUDA_VISIBLE_DEVICES=0 timeout "${SUITE_TIMEOUT:-560}" python3 -m pytest -q -n 10 \
      --dist loadfile -p no:cacheprovider -rfE -p no:benchmark --junitxml="$OUT/junit.xml" \
      "${device_files[@]}" tests/test_torch_gpu.py tests/test_numerics_gpu.py \
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
}

stage_tests() {
  # any GPU test files (TESTS) over 8 processes, TESTS_K selecting tests by name
  # shellcheck disable=SC2086
  timeout "${TESTS_TIMEOUT:-240}" python3 -m pytest -q -n 8 -p no:cacheprovider -rfE \
    ${TESTS:?TESTS: test files} ${TESTS_K:+-k "$TESTS_K"} 2>&1 | tee "$OUT/tests.log" | tail -12
}
