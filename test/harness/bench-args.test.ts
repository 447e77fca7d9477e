/**
 * The bench's command line (scripts/bench/args.js): a value that would measure nothing, or name a
 * mode or system the bench does not have, is refused before anything starts, one line per problem
 * naming its option (the bench then exits 2). Given/when/then on the pure check.
 */
import { describe, expect, it } from '@jest/globals';
import { benchArgProblems } from '../../scripts/bench/args.js';

/** The bench's defaults, as `parseArgs` returns them (text). */
const defaults = {
  only: 'w1,demo,read-cost',
  systems: 'runplane,runplane-x3,dbos,restate',
  concurrency: '1,8,64',
  runs: '16,64,192',
  warmup: '4',
  repeat: '1',
  'demo-runs': '16',
  'demo-concurrency': '8',
  'read-others': '0,100000,1000000',
  reads: '200',
  'read-cap-s': '120',
  'raw-appends': '4000',
  minutes: '30',
  rate: '2',
  parked: '2000',
  'parked-concurrency': '16',
  'parked-cap-s': '1200',
  'parked-idle-s': '60',
  'audit-runs': '100000',
  'parked-heap': false,
  'nats-cluster': false,
  help: false,
};

describe('bench arguments', () => {
  it('given the defaults, or other usable values, then no problem', () => {
    expect(benchArgProblems(defaults)).toEqual([]);
    expect(
      benchArgProblems({ ...defaults, only: 'soak', systems: 'Runplane', concurrency: '64, 1', runs: '192,48', warmup: '0', rate: '0.5' }),
    ).toEqual([]);
  });

  it('given counts that measure nothing, then each is refused by its option', () => {
    expect(benchArgProblems({ ...defaults, concurrency: '1', runs: '0' })).toEqual(['--runs: must be at least 1 (item 1)']);
    expect(benchArgProblems({ ...defaults, concurrency: '0', runs: '3' })).toEqual(['--concurrency: must be at least 1 (item 1)']);
    expect(benchArgProblems({ ...defaults, concurrency: 'x', runs: '3' })).toEqual(['--concurrency: must be a whole number (item 1)']);
    expect(benchArgProblems({ ...defaults, warmup: 'x', rate: '0' })).toEqual(['--warmup: must be a whole number', '--rate: must be more than 0']);
    expect(benchArgProblems({ ...defaults, concurrency: '', runs: '' })).toEqual([
      '--concurrency: must name at least one',
      '--runs: must name at least one',
    ]);
  });

  it('given a mode or system the bench does not have, then it is named with what there is', () => {
    expect(benchArgProblems({ ...defaults, systems: 'runplane,nope' })).toEqual([
      '--systems: nope is not one of runplane, runplane-x3, dbos, restate (item 2)',
    ]);
    expect(benchArgProblems({ ...defaults, only: 'nope' })).toEqual(['--only: nope is not one of w1, demo, read-cost, soak, parked, audit (item 1)']);
  });

  it('given a different number of run counts and levels, then --runs says how many it needs', () => {
    expect(benchArgProblems({ ...defaults, concurrency: '1', runs: '24,32' })).toEqual([
      '--runs: needs one count per --concurrency level (1), got 2',
    ]);
  });
});
