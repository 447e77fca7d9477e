#!/usr/bin/env bash
# `npm test`: the whole suite as two Jest runs, one after the other, each with the worker count
# that suits it on 2 cores: the projects' own tests (`npm run test:unit`, 6 workers: they wait on
# NATS, PostgreSQL, timers and the processes they start more than they compute), then everything
# else (`npm run test:e2e`: end-to-end, deploy, build and harness files, 3 workers: each starts a
# stack of services and waits on its Runs). The second runs even when the first failed, so one run
# reports every failure; the exit status is the first nonzero one. Each run also writes Jest's
# results to .runplane/test-results/, and the failures of both are printed once more at the very end
# (scripts/test-failures.js): a CI log's tail then shows them, not only the second run's summary.
# With arguments (`npm test -- <path> -t <name>`, `-o`, `-i`), one Jest run over every project
# with those arguments and the configuration's 2 workers, as a bare `npx jest` would run.
set -u
cd "$(dirname "$0")/.."
npm run --silent build || exit $?
if [ "$#" -gt 0 ]; then
  NODE_OPTIONS=--experimental-vm-modules exec npx jest "$@"
fi
results=.runplane/test-results
mkdir -p "$results" && rm -f "$results/unit.json" "$results/e2e.json"
status=0
npm run --silent test:unit -- --json --outputFile="$results/unit.json" || status=$?
npm run --silent test:e2e -- --json --outputFile="$results/e2e.json" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
if [ "$status" -ne 0 ]; then
  node scripts/test-failures.js "unit run=$results/unit.json" "e2e run=$results/e2e.json"
fi
exit "$status"
