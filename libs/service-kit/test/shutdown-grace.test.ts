/**
 * The HTTP grace of a shutdown (service-kit shutdown.ts): connections still open are closed
 * HTTP_SHUTDOWN_GRACE_MS (5 s) after the first signal, or a third of the shutdown bound when that
 * is less. The spawned-process case in shutdown.test.ts runs under a 6 s bound (grace 2 s); this
 * keeps the default bound's side checked.
 */
import { describe, expect, it } from '@jest/globals';
import { HTTP_SHUTDOWN_GRACE_MS, httpShutdownGraceMs } from '../src/shutdown.js';

describe('the HTTP grace of a shutdown', () => {
  it('given the default bound (25 s) or any of 15 s or more, then connections get the full 5 s', () => {
    expect(HTTP_SHUTDOWN_GRACE_MS).toBe(5_000);
    expect(httpShutdownGraceMs(25_000)).toBe(5_000);
    expect(httpShutdownGraceMs(15_000)).toBe(5_000);
  });
  it('given a bound under 15 s, then a third of it, leaving the rest for the app to close', () => {
    expect(httpShutdownGraceMs(6_000)).toBe(2_000);
    expect(httpShutdownGraceMs(3_000)).toBe(1_000);
  });
});
