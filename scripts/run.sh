#!/usr/bin/env bash
# The main job: install, show the discovered backends, run a real model on the best device.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/neurenix doctor
.venv/bin/python examples/quickstart.py
