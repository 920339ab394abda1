#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for
# issue 13's table: gpu_vs_cudnn.py runs, alone or one job list per GPU.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
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

stage_vscudnn() {
  # shellcheck disable=SC2086
  MIOCORE_DISABLE_PLUGINS=cudnn timeout "${VS_TIMEOUT:-560}" python3 benchmarks/gpu_vs_cudnn.py \
    --suites ${VS_SUITES:-resnet50} --dtypes ${VS_DTYPES:-float16} \
    --directions ${VS_DIRECTIONS:-forward backward_data backward_weights} \
    --layout "${VS_LAYOUT:-NCHW}" --skip-extras ${VS_ARGS:-} --out "$OUT/vs_cudnn.json" 2>&1 |
    grep -a -v Warning > "$OUT/vs_cudnn.log"
  grep -a "cuDNN/miocore" "$OUT/vs_cudnn.log"
}

stage_vstable() {
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
}

stage_parallel() {
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
}
