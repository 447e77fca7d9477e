#!/usr/bin/env bash
# `npm test`: the whole suite as two Jest runs side by side, after one build: the projects' own
# tests (the `unit` set, 2 workers) and everything else (the `e2e` set: end-to-end, deploy, build and
# harness files, 4 workers). An end-to-end file spends much of its time waiting on timers, Runs and
# the processes it restarts, so on 2 cores the unit files fill that time instead of running first
# (docs/development.md, "Tests and static checks"). Each line of output is prefixed with its run's
# name (`[unit]`, `[e2e]`); both runs go on to the end even when the other fails, and the exit status
# is the unit run's when nonzero, else the end-to-end run's; the last lines are both runs' counts.
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

# each run's output is also kept, for the summary at the end (the unit run ends minutes before)
logs=$(mktemp -d "${TMPDIR:-/tmp}/runplane-npm-test-XXXXXX")
trap 'rm -rf "$logs"' EXIT

# one Jest run of a set, its lines prefixed; the status is Jest's (pipefail), not the prefixer's
run_set() {
  local set=$1 workers=$2
  (
    set -o pipefail
    RUNPLANE_TEST_SET=$set NODE_OPTIONS=--experimental-vm-modules npx jest --maxWorkers="$workers" 2>&1 | sed -u "s/^/[$set] /" | tee "$logs/$set.log"
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
# the status of a run once it has ended (a `wait` cut short by a trapped signal is waited again)
status_of() {
  local s
  while :; do
    wait "$1"
    s=$?
    kill -0 "$1" 2>/dev/null || return "$s"
  done
}
unit_status=0
e2e_status=0
status_of "$unit" || unit_status=$?
status_of "$e2e" || e2e_status=$?
echo
echo "npm test: both sets, the unit set's result first (exit status: unit $unit_status, e2e $e2e_status)"
grep -h -E '^\[(unit|e2e)\] (Test Suites|Tests):' "$logs/unit.log" "$logs/e2e.log" 2>/dev/null
[ "$unit_status" -ne 0 ] && exit "$unit_status"
exit "$e2e_status"
