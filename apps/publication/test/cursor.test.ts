import { describe, expect, it } from '@jest/globals';
import { judgeCursor, runIdOfSubject } from '@runplane/app-publication';

// the stream's last position is 10; run-1 has messages at 1 and 2, run-2 at 3
const own = { runId: 'run-1' };
const other = { runId: 'run-2' };

describe("an observer cursor is 0 or a position in the Run's own log (K4)", () => {
  it('given 0, the stream replays from the start', () => {
    expect(judgeCursor('run-1', 0, null, 10)).toBeNull();
  });

  it("given a position of the Run's own (its first, its last, a non-fact on its subject), the stream replays after it", () => {
    expect(judgeCursor('run-1', 1, own, 10)).toBeNull();
    expect(judgeCursor('run-1', 2, own, 10)).toBeNull();
  });

  it("given another Run's position, the cursor is refused as other-run, naming it", () => {
    expect(judgeCursor('run-1', 3, other, 10)).toMatchObject({ reason: 'other-run', detail: expect.stringContaining('Last-Event-ID 3') });
  });

  it('given a position past the end of the log (one above, far above), it is refused as beyond-end, naming it', () => {
    expect(judgeCursor('run-1', 11, null, 10)).toMatchObject({ reason: 'beyond-end', detail: expect.stringContaining('Last-Event-ID 11') });
    expect(judgeCursor('run-1', 999_999_999_999_999, null, 10)?.reason).toBe('beyond-end');
  });

  it('given a position inside the log where nothing is stored (at the end, or before it), it is refused as not-an-event', () => {
    expect(judgeCursor('run-1', 10, null, 10)?.reason).toBe('not-an-event');
    expect(judgeCursor('run-1', 5, null, 10)?.reason).toBe('not-an-event');
  });

  it('given any refused cursor of a caller who is not an admin, the refusal says only that it is not a position of this Run (not the log length, not whose it is)', () => {
    for (const [cursor, at] of [
      [3, other],
      [11, null],
      [5, null],
    ] as const) {
      const refusal = judgeCursor('run-1', cursor, at, 10, false);
      expect(refusal).toEqual({ reason: 'not-this-run', detail: `Last-Event-ID ${cursor} is not a position of run run-1` });
    }
    expect(judgeCursor('run-1', 1, own, 10, false)).toBeNull();
  });

  it('reads the Run id of a Run subject only', () => {
    expect(runIdOfSubject('rp', 'rp.run.run-1.lifecycle.3')).toBe('run-1');
    expect(runIdOfSubject('rp', 'other.run.run-1.lifecycle.3')).toBeNull();
    // the subject layout before partitions (no partition token) is no Run subject any more
    expect(runIdOfSubject('rp', 'rp.run.run-1.lifecycle')).toBeNull();
    expect(runIdOfSubject('rp', 'rp.live.run-1.delta')).toBeNull();
  });
});
