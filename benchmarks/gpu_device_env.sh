#!/usr/bin/env bash
# Source this on the device machine (repo root, carry [".gpu"]): installs the carried wheels
# (platformdirs), registers the plugins from their source folders (no build needed) and points
# miocore at the carried corpus. Prepare .gpu/ here with benchmarks/gpu_prepare.sh.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .gpu/whl/*.whl || return 3
python3 benchmarks/gpu_source_site.py --site /tmp/site >/dev/null || return 3
PYTHONPATH="$PWD:/tmp/site:$(python3 benchmarks/gpu_source_site.py --print-path)"
export PYTHONPATH
export MIOCORE_CORPUS="$PWD/.gpu/miopen_problems.jsonl.gz"
export PYTHONUNBUFFERED=1
