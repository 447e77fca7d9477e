#!/usr/bin/env bash
# `npm run runplane -- <command>`: brings the build up to date (quietly; its output is shown only
# when it fails), then runs the CLI, so a fresh clone needs no separate build step.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
if ! npm run build --silent >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "runplane: the build failed (output above)" >&2
  exit 1
fi
rm -f "$log"
exec node apps/cli/dist/main.js "$@"
