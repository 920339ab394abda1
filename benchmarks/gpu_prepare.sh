#!/usr/bin/env bash
# Build what a device call carries into .gpu/ (ignored by git): the plugin wheels (their entry
# points register the solvers and kernel folders), platformdirs, and the problem corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "$(dirname "$(git rev-parse --git-path info/exclude)")"
grep -qx "/.gpu/" "$(git rev-parse --git-path info/exclude)" 2>/dev/null || echo "/.gpu/" >> "$(git rev-parse --git-path info/exclude)"
rm -rf .gpu && mkdir -p .gpu/whl
for p in direct gemm igemm; do python3 -m pip wheel -q --no-deps -w .gpu/whl "plugins/$p"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp -d .gpu/whl "platformdirs==4.3.6"
cp "${MIOCORE_CORPUS:-../shared/corpus/miopen_problems.jsonl.gz}" .gpu/
ls -la .gpu .gpu/whl
