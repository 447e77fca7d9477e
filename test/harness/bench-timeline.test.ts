/**
 * The bench's c=1 timeline (scripts/bench/timeline.js): where a Run's time goes, from the stored
 * times of its events alone. Given/when/then on the pure parts; the read is exercised by the bench.
 */
import { describe, expect, it } from '@jest/globals';
import { storedMs, timelineOf } from '../../scripts/bench/timeline.js';

describe('bench timeline', () => {
  it('a stored timestamp keeps its microseconds (Date alone would cut them)', () => {
    expect(storedMs('2026-12-07T03:35:12.123456789Z') - Date.parse('2026-12-07T03:35:12Z')).toBeCloseTo(123.456, 3);
    expect(storedMs('2026-12-07T03:35:12Z')).toBe(Date.parse('2026-12-07T03:35:12Z'));
    expect(storedMs('2026-12-07T03:35:12.5Z') - Date.parse('2026-12-07T03:35:12Z')).toBeCloseTo(500, 3);
  });

  it('given two Runs, then each pair of consecutive types has its count per Run, median gap and share of the summed spans, largest share first', () => {
    const run = (gapA: number, gapB: number) => [
      { type: 'run.admitted', ms: 0 },
      { type: 'model.turn.requested', ms: gapA },
      { type: 'model.turn.completed', ms: gapA + gapB },
    ];
    const t = timelineOf([run(10, 30), run(20, 40)]);
    // spans 40 and 60: median (nearest rank) 40; summed 100
    expect(t.spanMs).toBe(40);
    expect(t.rows).toEqual([
      { from: 'model.turn.requested', to: 'model.turn.completed', perRun: 1, medianMs: 30, share: 0.7 },
      { from: 'run.admitted', to: 'model.turn.requested', perRun: 1, medianMs: 10, share: 0.3 },
    ]);
  });

  it('given no Runs or one event each, then no rows and no span', () => {
    expect(timelineOf([])).toEqual({ spanMs: NaN, rows: [] });
    expect(timelineOf([[{ type: 'run.admitted', ms: 5 }]])).toEqual({ spanMs: NaN, rows: [] });
  });
});
