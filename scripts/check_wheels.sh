#!/usr/bin/env bash
# Release check (issue #29): build the wheel and sdist of the core, the four plugins and the example
# onnxruntime plugin; twine check them; check LICENSE, py.typed and metadata inside each
# (scripts/check_dists.py); install the wheels NON-editably in a fresh venv and, from a folder
# outside the checkout, run `neurenix --version`, `neurenix doctor` and one compiled model on the
# emulated npu. Called by scripts/test.sh; ~1.5 min on 2 vCPUs (most of it pip installing openvino,
# jax, onnxruntime and LiteRT into the fresh venv).
#
# The builds use the project venv's setuptools (--no-isolation: no download per build; the
# pyproject files require setuptools>=77, which build checks). neurenix-cuda-tc's wheel is built
# and checked but not installed: it pulls torch (GBs), which the npu check does not need.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
py=.venv/bin/python
work=$(mktemp -d "${TMPDIR:-/tmp}/neurenix-wheels.XXXXXX")
trap 'rm -rf "$work"' EXIT
dist="$work/dist"

# Built from a copy of the checkout's files (tracked, and untracked ones git does not ignore): a
# build writes build/ and *.egg-info beside the sources, and scripts/test.sh runs this beside the
# tests, which read the checkout (entry points included).
src="$work/src"
bash scripts/copy_checkout.sh "$src"

echo "== build wheels and sdists into $dist"
for dir in . plugins/*/ examples/neurenix-onnxruntime/; do
  [ -f "$dir/pyproject.toml" ] || continue
  if ! "$py" -m build --no-isolation --outdir "$dist" "$src/$dir" >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    echo "check_wheels: building $dir failed" >&2
    exit 1
  fi
done

echo "== twine check"
"$py" -m twine check --strict "$dist"/*

echo "== LICENSE, py.typed and metadata"
"$py" scripts/check_dists.py "$dist"

echo "== fresh venv, wheels installed non-editably"
"${PYTHON:-python3}" -m venv "$work/venv"
wheels=()
for whl in "$dist"/*.whl; do
  case "$(basename "$whl")" in neurenix_cuda_tc-*) continue ;; esac
  wheels+=("$whl")
done
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check -c constraints.txt "${wheels[@]}"

cd "$work"  # nothing may come from the checkout: the imports below must find the installed wheels
export NEURENIX_EMULATE=npu JAX_PLATFORMS=cpu NEURENIX_STATE_DIR="$work/state"
echo "== neurenix --version"
venv/bin/neurenix --version
echo "== neurenix doctor"
COLUMNS=${COLUMNS:-100} venv/bin/neurenix doctor
echo "== a compiled model on the emulated npu:0"
venv/bin/python - "$root" <<'EOF'
import json
import sys
from importlib import metadata
from pathlib import Path

import numpy as np

import neurenix_core as nx

root = Path(sys.argv[1]).resolve()
for dist in ("neurenix-core", "neurenix-npu-openvino"):
    direct = json.loads(metadata.distribution(dist).read_text("direct_url.json") or "{}")
    assert not direct.get("dir_info", {}).get("editable", False), f"{dist} is installed editable: {direct}"
    assert direct.get("url", "").endswith(".whl"), f"{dist} was not installed from a wheel: {direct}"
assert root not in Path(nx.__file__).resolve().parents, f"neurenix_core imported from the checkout: {nx.__file__}"

model = nx.nn.Sequential(nx.nn.Linear(16, 32), nx.nn.ReLU(), nx.nn.Linear(32, 4))
compiled = nx.compile(model, device="npu:0")
x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
y = compiled(nx.asarray(x, device="npu:0"))
expected = model(nx.asarray(x)).numpy()  # the same model eagerly on cpu:0
err = float(np.max(np.abs(y.numpy() - expected)))
assert str(y.device) == "npu:0" and y.shape == (8, 4), (y.device, y.shape)
assert err < 1e-4, err
print(f"neurenix_core from {Path(nx.__file__).parent}")
print(f"compiled on {y.device}: output {y.shape}, max |error| vs cpu:0 = {err:.1e}")
print(f"  {compiled.summary}")
EOF
echo "check_wheels: ok"
