/**
 * The bench's `--repeat` (scripts/bench.js): a level driven N times is reported as the median of
 * each figure, failures and stalls summed, with every repeat's own figures kept for the spread.
 */
import { describe, expect, it } from '@jest/globals';
import { combineRepeats, median } from '../../scripts/bench/stats.js';

/** One repeat's row; `stalls` null: a system that does not count them (a peer). */
const row = (runsPerS: number, cpuMsPerRun: number, p50: number, failures = 0, stalls: number | null = 0) => ({
  c: 64,
  runs: 192,
  runsPerS,
  p50,
  p99: p50 * 3,
  cpuMsPerRun,
  failures,
  stalls: stalls ?? undefined,
  stalledIds: stalls ? [`run-${runsPerS}`] : [],
});

describe('bench --repeat', () => {
  it('the median is the middle value, or the mean of the two middle ones; NaN of nothing', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([])).toBeNaN();
  });

  it('given three repeats of a level, then each figure is their median, failures and stalls are summed, and every repeat is kept', () => {
    const combined = combineRepeats([row(11.5, 157.1, 206), row(9.6, 189.4, 215, 1, 1), row(12.1, 150.9, 205)]);
    expect(combined).toMatchObject({
      c: 64,
      runs: 192,
      runsPerS: 11.5,
      cpuMsPerRun: 157.1,
      p50: 206,
      p99: 618,
      failures: 1,
      stalls: 1,
      stalledIds: ['run-9.6'],
    });
    expect(combined.repeats).toEqual([
      { runsPerS: 11.5, p50: 206, cpuMsPerRun: 157.1 },
      { runsPerS: 9.6, p50: 215, cpuMsPerRun: 189.4 },
      { runsPerS: 12.1, p50: 205, cpuMsPerRun: 150.9 },
    ]);
  });

  it('given a system that does not count stalls (a peer), then the combined row does not either', () => {
    expect(combineRepeats([row(80, 17, 30, 0, null), row(82, 16, 31, 0, null)]).stalls).toBeUndefined();
  });
});
