import { describe, expect, it } from '@jest/globals';
import { judgeCursor } from '@runplane/app-publication';
import { History } from '../../../test/support/history.js';

// run-1's log: admitted at 1, turn requested at 2 (the stream's last position is 10: other Runs wrote after)
const own = new History('run-1').admitted().add('model.turn.requested', 1, { turn: 1, model: 'scripted' }).events;
const other = new History('run-2').admitted().events[0]!;

describe("an observer cursor is 0 or the position of one of the Run's own events (K4)", () => {
  it('given 0, the stream replays from the start', () => {
    expect(judgeCursor('run-1', 0, null, 10)).toBeNull();
  });

  it("given the position of the Run's first and last events, the stream replays after it", () => {
    expect(judgeCursor('run-1', 1, own[0]!, 10)).toBeNull();
    expect(judgeCursor('run-1', 2, own[1]!, 10)).toBeNull();
  });

  it("given another Run's event, the cursor is refused as other-run", () => {
    expect(judgeCursor('run-1', 1, other, 10)).toMatchObject({ reason: 'other-run', detail: expect.stringContaining('1') });
  });

  it('given a position past the end of the log (one above, far above), it is refused as beyond-end', () => {
    expect(judgeCursor('run-1', 11, null, 10)).toMatchObject({ reason: 'beyond-end', detail: expect.stringContaining('11') });
    expect(judgeCursor('run-1', 999_999_999_999_999, null, 10)?.reason).toBe('beyond-end');
  });

  it('given a position inside the log that holds no fact (garbage on a subject), it is refused as not-an-event', () => {
    expect(judgeCursor('run-1', 10, null, 10)?.reason).toBe('not-an-event');
    expect(judgeCursor('run-1', 5, null, 10)?.reason).toBe('not-an-event');
  });
});
