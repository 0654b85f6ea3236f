#!/usr/bin/env bash
# Create .venv (if missing) and install the core with every plugin of this repository, editable.
# Every install goes through constraints.txt (it pins torch to the CPU wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
pkgs=(-e ".[test]")
for dir in plugins/*/ examples/neurenix-onnxruntime/; do
  [ -f "$dir/pyproject.toml" ] && pkgs+=(-e "$dir")
done
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints.txt "${pkgs[@]}"
