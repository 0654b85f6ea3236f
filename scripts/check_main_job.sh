#!/usr/bin/env bash
# The README's main job as a new user meets it (issue #43): from a copy of the checkout, with no
# .venv and no NEURENIX_* variables, run `bash scripts/run.sh` twice and check that
#   - the first run installs what the job runs and nothing else: no test tools, no example plugin,
#     and no PyTorch unless an NVIDIA driver is present (scripts/setup.sh);
#   - the second run installs nothing (setup.sh's stamp) and reruns the job;
#   - neither run prints a line from another library (pip's notices, absl/glog lines, Python
#     warnings in their file:line form, tracebacks, torchao's "Failed to load").
# Prints the first run's time and .venv size, and the second run's time. Called by scripts/test.sh
# beside the tests (~1 min on 2 vCPUs, most of it pip unpacking OpenVINO, JAX and LiteRT).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/neurenix-main-job.XXXXXX")
trap 'rm -rf "$work"' EXIT
bash scripts/copy_checkout.sh "$work/clone"
cd "$work/clone"
# A new user's environment: none of the test run's NEURENIX_*/JAX settings, a state folder of its own.
while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(NEURENIX_[A-Z_]*\)=.*/\1/p')
unset JAX_PLATFORMS XLA_FLAGS
export NEURENIX_STATE_DIR="$work/state"

run() {  # run N: the job, its output in $work/runN.log, its seconds in $work/runN.s
  local start
  start=$(date +%s%N)
  if ! bash scripts/run.sh >"$work/run$1.log" 2>&1; then
    cat "$work/run$1.log"
    echo "check_main_job: run $1 of bash scripts/run.sh failed" >&2
    exit 1
  fi
  echo $(( ($(date +%s%N) - start) / 1000000 )) >"$work/run$1.ms"
}

run 1
size=$(du -sm .venv | cut -f1)
dists=$(.venv/bin/python -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | wc -l)
run 2
ms1=$(cat "$work/run1.ms") ms2=$(cat "$work/run2.ms")
echo "main job: first run $((ms1 / 1000)) s (install, doctor, quickstart), .venv $size MB ($dists distributions);" \
  "second run $((ms2 / 1000)).$(( (ms2 % 1000) / 100 )) s"

status=0
unwanted=(pytest mypy ruff ray neurenix-onnxruntime transformers)
# Where setup.sh found no NVIDIA driver it said so and left cuda-tc out: then torch must be absent too.
if grep -q '^setup: not installing neurenix-cuda-tc' "$work/run1.log"; then unwanted+=(torch neurenix-cuda-tc); fi
installed=$(.venv/bin/python -m pip list --format=freeze --disable-pip-version-check 2>/dev/null | cut -d= -f1 | tr 'A-Z_' 'a-z-')
for dist in "${unwanted[@]}"; do
  if grep -qx "$dist" <<<"$installed"; then
    echo "check_main_job: the main job installed $dist, which it does not run" >&2
    status=1
  fi
done
if ! grep -q '^setup: .venv is up to date' "$work/run2.log"; then
  echo "check_main_job: the second run installed again:" >&2
  head -5 "$work/run2.log" >&2
  status=1
fi
# Lines from other libraries: pip's "WARNING:"/"ERROR:", absl/glog ("W1206 12:00:00.000 ..."),
# Python warnings ("file.py:12: SomeWarning: ..."), tracebacks, torchao's kernel-library notice.
foreign='^(WARNING|ERROR|DEPRECATION):|^[IWEF][0-9]{4} [0-9:.]+ |\.py:[0-9]+: [A-Za-z]*Warning|^Traceback |Failed to load'
for n in 1 2; do
  if grep -nE "$foreign" "$work/run$n.log" >"$work/foreign.txt"; then
    echo "check_main_job: run $n printed lines from another library:" >&2
    cat "$work/foreign.txt" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "main job: nothing but neurenix's own output, no test tools, no example plugin installed"
exit "$status"
