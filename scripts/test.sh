#!/usr/bin/env bash
# `npm test`: the whole suite as two Jest runs side by side, after one build: the projects' own
# tests (the `unit` set, 2 workers) and everything else (the `e2e` set: end-to-end, deploy, build and
# harness files, 4 workers). An end-to-end file spends much of its time waiting on timers, Runs and
# the processes it restarts, so on 2 cores the unit files fill that time instead of running first
# (docs/development.md, "Tests and static checks"). Each line of output is prefixed with its run's
# name (`[unit]`, `[e2e]`); both runs go on to the end even when the other fails, and the exit status
# is the unit run's when nonzero, else the end-to-end run's.
# With arguments (`npm test -- <path> -t <name>`, `-o`, `-i`), one Jest run over every project
# with those arguments and the configuration's 2 workers, as a bare `npx jest` would run.
# `npm run test:unit` and `npm run test:e2e` run one half alone, with the worker count that suits
# it alone (6 and 3).
set -u
cd "$(dirname "$0")/.."
npm run --silent build || exit $?
if [ "$#" -gt 0 ]; then
  NODE_OPTIONS=--experimental-vm-modules exec npx jest "$@"
fi

# one Jest run of a set, its lines prefixed; the status is Jest's (pipefail), not the prefixer's
run_set() {
  local set=$1 workers=$2
  (
    set -o pipefail
    RUNPLANE_TEST_SET=$set NODE_OPTIONS=--experimental-vm-modules npx jest --maxWorkers="$workers" 2>&1 | sed -u "s/^/[$set] /"
  )
}

# each run in a process group of its own (job control), so that an interrupt of this script reaches
# both whole runs: without it, bash starts background commands with SIGINT ignored
set -m
run_set unit 2 &
unit=$!
run_set e2e 4 &
e2e=$!
trap 'kill -INT -- -"$unit" -"$e2e" 2>/dev/null' INT TERM
status=0
wait "$unit" || status=$?
wait "$e2e" || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
