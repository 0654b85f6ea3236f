#!/usr/bin/env bash
# Copy the checkout's files (tracked, and untracked ones git does not ignore) into DEST: what a
# clean clone of this working tree would hold, without .venv, build outputs or caches.
#   bash scripts/copy_checkout.sh DEST
set -euo pipefail
dest=$1
cd "$(dirname "$0")/.."
mkdir -p "$dest"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
  [ -e "$f" ] && printf '%s\0' "$f"
done | xargs -0 cp --parents -t "$dest"
