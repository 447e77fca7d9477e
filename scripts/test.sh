#!/usr/bin/env bash
# `npm test`: the whole suite as two Jest runs, one after the other, each with the worker count
# that suits it on 2 cores: the projects' own tests (`npm run test:unit`, 6 workers: they wait on
# NATS, PostgreSQL, timers and the processes they start more than they compute), then everything
# else (`npm run test:e2e`: end-to-end, deploy, build and harness files, 3 workers: each starts a
# stack of services and waits on its Runs). The second runs even when the first failed, so one run
# reports every failure; the exit status is the first nonzero one.
# With arguments (`npm test -- <path> -t <name>`, `-o`, `-i`), one Jest run over every project
# with those arguments and the configuration's 2 workers, as a bare `npx jest` would run.
set -u
cd "$(dirname "$0")/.."
npm run --silent build || exit $?
if [ "$#" -gt 0 ]; then
  NODE_OPTIONS=--experimental-vm-modules exec npx jest "$@"
fi
status=0
npm run --silent test:unit || status=$?
npm run --silent test:e2e || { s=$?; [ "$status" -ne 0 ] || status=$s; }
exit "$status"
