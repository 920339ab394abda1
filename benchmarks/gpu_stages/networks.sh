#!/usr/bin/env bash
# benchmarks/gpu_session.sh's stages for
# issue 12: whole networks, per-call cost, the default find and first finds.
# Sourced by gpu_session.sh (its setup, OUT, MODELS and DTYPES in scope); one function
# per stage, stage_<name> ('-' as '_').
#
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

stage_models() {
  [[ "$STAGE" == models-own ]] && export MIOCORE_DISABLE_PLUGINS=cudnn
  # shellcheck disable=SC2086
  timeout 560 python3 benchmarks/gpu_models.py --models $MODELS --dtypes $DTYPES \
    --modes ${MODES:-eager} --db "/tmp/mdb-$STAGE" --out "$OUT/$STAGE.json" 2>&1 |
    grep -a -v Warning | tee "$OUT/$STAGE.log" | tail -40
}

stage_models_own() {
  stage_models
}

stage_modes() {
  # shellcheck disable=SC2086
  timeout 560 python3 benchmarks/gpu_models.py --models $MODELS --dtypes $DTYPES \
    --modes compile graph --db /tmp/mdb-models --out "$OUT/modes.json" 2>&1 |
    grep -a -v Warning | tee "$OUT/modes.log" | tail -40
}

stage_cost() {
  # COST_BASE: a folder holding another tree's miocore package, imported instead of this one
  # shellcheck disable=SC2086
  PYTHONPATH="${COST_BASE:+$COST_BASE:}$PYTHONPATH" \
    timeout "${COST_TIMEOUT:-560}" python3 benchmarks/gpu_call_cost.py ${COST_ARGS:-} \
    --out "$OUT/call_cost${COST_TAG:-}.json" 2>&1 | tee "$OUT/cost${COST_TAG:-}.log" | tail -40
}

stage_plugin() {
  timeout 560 python3 benchmarks/gpu_cudnn_plugin.py --out "$OUT/cudnn_plugin.json" \
    ${PLUGIN_ARGS:---dtypes float16 --directions forward backward_data backward_weights} 2>&1 |
    tee "$OUT/plugin.log" | tail -40
}

stage_findreport() {
  timeout 560 python3 benchmarks/gpu_find_report.py --switches none rc rp rc+rp \
    --policies default --out "$OUT/find_report.json" 2>&1 | grep -a -v Warning |
    tee "$OUT/find_report.log" | cut -c1-400
}

stage_frontend() {
  # shellcheck disable=SC2086
  timeout 560 python3 benchmarks/gpu_front_end_cost.py --out "$OUT/front_end.json" \
    ${FRONTEND_ARGS:-} 2>&1 | grep -a -v Warning | tee "$OUT/front_end.log" | tail -60
}

stage_eager() {
  # shellcheck disable=SC2086
  for dtype in $DTYPES; do
    timeout 500 python3 benchmarks/gpu_eager_ratio.py --models $MODELS --dtype "$dtype" \
      --out "$OUT/eager_ratio_$dtype.json" 2>&1 | grep -a '^[a-z_0-9]* {'
  done
}

stage_launch() {
  for dtype in float16 float32; do
    timeout 200 python3 benchmarks/gpu_launch_cost.py --dtype "$dtype" \
      --out "$OUT/launch_cost_$dtype.json" 2>&1 | grep -av Warning | tail -40
  done
}

stage_firstfind() {
  for cache in cold warm; do
    # shellcheck disable=SC2086
    timeout 270 python3 benchmarks/gpu_models.py --models $MODELS --dtypes ${DTYPES%% *} \
      --modes eager --iters 3 --db "/tmp/firstfind-$cache" --out "$OUT/firstfind_$cache.json" \
      >"$OUT/firstfind_$cache.log" 2>&1
    grep -a first_find "$OUT/firstfind_$cache.log" | cut -c1-160
  done
}

stage_findprofile() {
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
}

stage_findab() {
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
}

stage_findenv() {
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
}

stage_rtcprobe() {
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
}
