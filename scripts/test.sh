#!/usr/bin/env bash
# Install everything and run every test: the core, the contract suite over every backend
# (plugins run emulated on the host CPU through their real runtimes) and each plugin's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export NEURENIX_EMULATE=${NEURENIX_EMULATE:-cuda,tpu,npu,edgetpu}
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}
export XLA_FLAGS=${XLA_FLAGS:---xla_force_host_platform_device_count=4}
# A state folder of the run's own (crash journal, host-runtime choices, compile cache): nothing read
# from or left in the user's ~/.local/state/neurenix, every run starts cold.
if [ -z "${NEURENIX_STATE_DIR:-}" ]; then
  NEURENIX_STATE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/neurenix-test-state.XXXXXX")
  export NEURENIX_STATE_DIR
  trap 'rm -rf "$NEURENIX_STATE_DIR"' EXIT
fi
paths=(tests)
for dir in plugins/*/tests examples/neurenix-onnxruntime/tests; do
  [ -d "$dir" ] && paths+=("$dir")
done
# Two pytest-xdist workers: the suite is single-threaded CPU work (user time ~= wall time), so a
# 2-vCPU build machine runs it in about half the time (measured 23 -> 10 min). The tests keep
# their state per process; NEURENIX_TEST_WORKERS=0 runs them in one process.
workers=${NEURENIX_TEST_WORKERS:-2}
# Static checks (scripts/lint.sh): the generated stubs current, mypy on neurenix_core and neurenix
# at 0 errors (public API modules strict), ruff's rules at 0 (~1 min cold). NEURENIX_LINT=0 skips them.
# Release check (scripts/check_wheels.sh): every wheel and sdist built (from a copy of the checkout)
# and checked, installed non-editably in a fresh venv, then the CLI and a compiled model on the
# emulated npu (~2 min). NEURENIX_CHECK_WHEELS=0 skips it.
# These run beside the tests (the test workers leave a core idle while they wait on subprocesses);
# their output follows the tests', and any failing fails the run.
checks=()
if [ "${NEURENIX_LINT:-1}" != 0 ]; then
  checks+=(lint.sh)
fi
if [ "${NEURENIX_CHECK_WHEELS:-1}" != 0 ]; then
  checks+=(check_wheels.sh)
fi
# The main job as a new user meets it (scripts/check_main_job.sh): from a copy of the checkout, run
# twice; what it installs, the second run installing nothing, no other library's lines (~1.5 min).
# NEURENIX_CHECK_MAIN_JOB=0 skips it.
if [ "${NEURENIX_CHECK_MAIN_JOB:-1}" != 0 ]; then
  checks+=(check_main_job.sh)
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/neurenix-checks.XXXXXX")
pids=()
for check in "${checks[@]}"; do
  bash "scripts/$check" >"$logs/$check.log" 2>&1 &
  pids+=($!)
done
status=0
# --durations: the slowest tests in the log, so a run near the 25-minute budget says where the time went.
.venv/bin/python -m pytest -q -p no:cacheprovider -n "$workers" --durations=25 "${paths[@]}" "$@" || status=$?
for i in "${!checks[@]}"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  echo "== scripts/${checks[$i]} (exit $rc)"
  cat "$logs/${checks[$i]}.log"
  [ "$rc" = 0 ] || status=1
done
rm -rf "$logs"
exit "$status"
