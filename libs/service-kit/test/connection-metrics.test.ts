/**
 * `runplane_nats_connection_changes_total{change}` (docs/metrics.md): every change has its series
 * from the start, at 0, so `increase()` over a window sees a service's first change (a series that
 * appears with its first change at 1 is counted from there: a trial's first freeze showed nothing
 * on the services it moved).
 */
import { describe, expect, it } from '@jest/globals';
import { recordConnectionChange } from '@runplane/eventlog';
import { metricsRegistry } from '../src/metrics.js';

/** The counter's value per change, as a scrape reads it. */
async function scraped(): Promise<Record<string, number>> {
  const text = await metricsRegistry.getSingleMetricAsString('runplane_nats_connection_changes_total');
  return Object.fromEntries(
    [...text.matchAll(/^runplane_nats_connection_changes_total\{change="([^"]+)"\} (\d+)$/gm)].map((m) => [m[1]!, Number(m[2])]),
  );
}

describe('runplane_nats_connection_changes_total', () => {
  it('given no change yet, then every change has its series at 0; when one happens, then its series counts it', async () => {
    const before = await scraped();
    expect(Object.keys(before).sort()).toEqual(['attempt-failed', 'back', 'error', 'lost', 'stale']);
    recordConnectionChange('lost');
    recordConnectionChange('back');
    const after = await scraped();
    expect(after.lost).toBe(before.lost! + 1);
    expect(after.back).toBe(before.back! + 1);
    expect(after.stale).toBe(before.stale);
  });
});
