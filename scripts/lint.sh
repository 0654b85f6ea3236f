#!/usr/bin/env bash
# Static checks: the generated stubs current (scripts/gen_ops.py --check); mypy on neurenix_core
# and neurenix with [tool.mypy] in pyproject.toml (0 errors; the public API modules held to
# --strict's per-module checks); then ruff's rules over the repository.
# mypy's cache lives in a temporary directory (not the tree): a warm run takes seconds, a cold
# one about 45 s (2 vCPUs). NEURENIX_MYPY_CACHE overrides where.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${NEURENIX_MYPY_CACHE:-${TMPDIR:-/tmp}/neurenix-mypy-cache}
status=0
# The generated namespace module and its typed stubs match the signature table (scripts/gen_ops.py).
.venv/bin/python scripts/gen_ops.py --check || status=1
start=$(date +%s)
.venv/bin/python -m mypy --cache-dir "$cache" "$@" || status=1
echo "mypy: $(( $(date +%s) - start )) s wall (cache $cache)"
.venv/bin/python -m ruff check . || status=1
exit "$status"
