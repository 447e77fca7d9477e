/**
 * RenewalSlots (K6, K10): one renewal at a time per key, unless the one in flight went stale or
 * the connection came back; a stale renewal answered late does not free its successor's slot.
 */
import { describe, expect, it } from '@jest/globals';
import { RenewalSlots } from '@runplane/kit';

describe('RenewalSlots', () => {
  it('given a renewal in flight, when another is asked within the interval, then it may not start; another key may', () => {
    const slots = new RenewalSlots<string>(1_000);
    expect(slots.begin('a', false, 0)).not.toBeNull();
    expect(slots.begin('a', false, 999)).toBeNull();
    expect(slots.begin('b', false, 999)).not.toBeNull();
  });

  it('given a renewal answered, when the next is asked, then it may start at once', () => {
    const slots = new RenewalSlots<string>(1_000);
    slots.begin('a', false, 0)!();
    expect(slots.busy('a')).toBe(false);
    expect(slots.begin('a', false, 1)).not.toBeNull();
  });

  it('given a renewal in flight a whole interval, or a reconnection, then another may start beside it', () => {
    const slots = new RenewalSlots<string>(1_000);
    expect(slots.begin('a', false, 0)).not.toBeNull();
    expect(slots.begin('a', false, 1_000)).not.toBeNull(); // waited a whole interval
    expect(slots.begin('a', true, 1_001)).not.toBeNull(); // NATS reconnected: at once
  });

  it('given a stale renewal superseded, when it is answered late, then the newer keeps the slot until it is answered', () => {
    const slots = new RenewalSlots<string>(1_000);
    const stale = slots.begin('a', false, 0)!;
    const newer = slots.begin('a', true, 10)!;
    stale();
    expect(slots.busy('a')).toBe(true);
    expect(slots.begin('a', false, 20)).toBeNull();
    newer();
    expect(slots.busy('a')).toBe(false);
  });
});
