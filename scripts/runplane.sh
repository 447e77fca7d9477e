#!/usr/bin/env bash
# `npm run runplane -- <command>`: brings the build up to date (quietly; its output is shown only
# when it fails), then runs the CLI, so a fresh clone needs no separate build step. Builds are
# serialised by a lock: several commands started at once must not rewrite dist/ under each other
# (one would load a module another is replacing); once up to date, nx leaves the outputs as they are.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .runplane
log="$(mktemp)"
if ! flock .runplane/build.lock npm run build --silent >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "runplane: the build failed (output above)" >&2
  exit 1
fi
rm -f "$log"
exec node apps/cli/dist/main.js "$@"
