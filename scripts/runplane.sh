#!/usr/bin/env bash
# `npm run runplane -- <command>`: brings the build up to date (quietly; its output is shown only
# when it fails), then runs the CLI, so a fresh clone needs no separate build step. Builds are
# serialised by a lock, so several commands started at once do not compile the same projects side
# by side. With nothing changed, scripts/build.mjs writes nothing and returns without loading the
# compiler; when it does write, each output goes in by rename, so a command running meanwhile never
# finds a dist/ file missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .runplane
log="$(mktemp)"
if ! flock .runplane/build.lock node scripts/build.mjs >"$log" 2>&1; then
  cat "$log" >&2
  rm -f "$log"
  echo "runplane: the build failed (output above)" >&2
  exit 1
fi
rm -f "$log"
exec node apps/cli/dist/main.js "$@"
