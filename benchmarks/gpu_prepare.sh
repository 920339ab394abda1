#!/usr/bin/env bash
# Build what a device call carries into .gpu/ (ignored by git): platformdirs and the problem
# corpus. The plugins run from their source folders (benchmarks/gpu_device_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "$(dirname "$(git rev-parse --git-path info/exclude)")"
grep -qx "/.gpu/" "$(git rev-parse --git-path info/exclude)" 2>/dev/null || echo "/.gpu/" >> "$(git rev-parse --git-path info/exclude)"
rm -rf .gpu && mkdir -p .gpu/whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp -d .gpu/whl "platformdirs==4.3.6"
cp "${MIOCORE_CORPUS:-../shared/corpus/miopen_problems.jsonl.gz}" .gpu/
ls -la .gpu .gpu/whl
