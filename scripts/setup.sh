#!/usr/bin/env bash
# Create .venv (if missing) and install what a job needs, editable, through constraints.txt.
#
#   bash scripts/setup.sh        # main job: the core and the first-party plugins with their runtimes
#   bash scripts/setup.sh test   # the tests: the above, neurenix-cuda-tc (PyTorch) always, the test
#                                # extra (pytest, mypy, ruff, ray, transformers...) and the example
#                                # third-party plugin examples/neurenix-onnxruntime
#
# The main job installs neurenix-cuda-tc only where an NVIDIA driver is present: it pulls PyTorch
# (~1 GB) and serves nothing without a GPU. A second run with nothing to install returns in well
# under a second: the install is skipped while the stamp in .venv matches the inputs (the mode, the
# Python, this script, constraints.txt and every pyproject.toml; the code is installed editable, so
# editing it needs no reinstall).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-main}
case "$mode" in
  main | test) ;;
  *) echo "usage: bash scripts/setup.sh [main|test]" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi

# An NVIDIA driver: the library the cuda-tc plugin's probe loads (ldconfig's cache or the usual folders).
has_nvidia_driver() {
  { command -v ldconfig >/dev/null && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; } && return 0
  local dir
  for dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64; do
    [ -e "$dir/libcuda.so.1" ] && return 0
  done
  return 1
}

pkgs=()
skipped=""
if [ "$mode" = test ]; then
  pkgs+=(-e ".[test]")
else
  pkgs+=(-e ".")
fi
for dir in plugins/*/; do
  [ -f "$dir/pyproject.toml" ] || continue
  if [ "$mode" = main ] && [ "$dir" = plugins/neurenix-cuda-tc/ ] && ! has_nvidia_driver; then
    skipped="setup: not installing neurenix-cuda-tc: no NVIDIA driver (libcuda.so.1) here, and it pulls PyTorch (~1 GB); bash scripts/setup.sh test installs it"
    continue
  fi
  pkgs+=(-e "$dir")
done
if [ "$mode" = test ]; then
  pkgs+=(-e examples/neurenix-onnxruntime/)
fi

# The stamp: what was installed, from which inputs. A test install covers the main job's.
inputs=$( { .venv/bin/python -VV; cat scripts/setup.sh constraints.txt pyproject.toml plugins/*/pyproject.toml \
  examples/neurenix-onnxruntime/pyproject.toml; } | sha256sum | cut -d' ' -f1)
want="$mode $inputs ${pkgs[*]}"
stamp=.venv/.neurenix-setup
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" = "$want" ] || { [ "$mode" = main ] && [[ "$have" == "test $inputs "* ]]; }; then
  echo "setup: .venv is up to date (${have%% *} install; delete $stamp to reinstall)" >&2
  exit 0
fi
echo "setup: installing into .venv for the $mode job (pip install ${pkgs[*]}); a first install takes minutes" >&2
[ -z "$skipped" ] || echo "$skipped" >&2
rm -f "$stamp"
# -qq: pip's errors only (its warnings about this machine's index configuration are not the job's output).
.venv/bin/python -m pip install -qq --disable-pip-version-check -c constraints.txt "${pkgs[@]}"
echo "$want" >"$stamp"
