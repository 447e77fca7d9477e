/**
 * Nothing is dropped for its size (K9, K11): a tool's result goes inline up to the inline limit
 * and by digest above it (whatever its size), and a tool's error message is recorded cut, saying
 * so; every receipt fits the broker's message size.
 */
import { describe, expect, it } from '@jest/globals';
import { decide, INLINE_RESULT_LIMIT, type ToolOutcome } from '@runplane/app-tools';
import { BROKER_MAX_PAYLOAD_BYTES, REPORTED_TEXT_MAX_CHARS, type EventData, type RunEvent } from '@runplane/contracts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const tools = spec(decide);
const executed = (outcome: ToolOutcome) => ({ type: 'ToolExecuted', toolCallId: 'a', outcome, durationMs: 12, resultBucket: 'rp_results' }) as const;
const dispatched = () =>
  new History()
    .admitted()
    .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
    .proposed(1, 'a', 'list_funds')
    .dispatched('a', 'list_funds');
/** Result JSON of exactly `bytes` bytes. */
const resultOf = (bytes: number) => JSON.stringify({ rows: 'x'.repeat(bytes - '{"rows":""}'.length) });
const receiptOf = (events: RunEvent[]) => events[0]!.data as EventData<'tool.call.receipt'>;
const wire = (e: RunEvent) => Buffer.byteLength(JSON.stringify(e), 'utf8');

describe('tools decide, ToolExecuted: a result of any size is recorded (K9, K11)', () => {
  it('one below and at the inline limit: inline; one above and far above (8 MiB): by digest, the receipt small', () => {
    for (const [bytes, inline] of [
      [INLINE_RESULT_LIMIT - 1, true],
      [INLINE_RESULT_LIMIT, true],
      [INLINE_RESULT_LIMIT + 1, false],
      [8 * BROKER_MAX_PAYLOAD_BYTES, false],
    ] as const) {
      const json = resultOf(bytes);
      const events = tools
        .given(dispatched())
        .when(executed({ kind: 'returned', json }))
        .then([{ type: 'tool.call.receipt', data: expect.anything() }]);
      const r = receiptOf(events);
      expect(r.resultRef === undefined).toBe(inline);
      if (!inline) expect(r.resultRef).toMatchObject({ bytes });
      expect(wire(events[0]!)).toBeLessThan(INLINE_RESULT_LIMIT + 2_000);
    }
  });

  it('an error message at its limit is recorded whole; one above and far above, cut and marked', () => {
    for (const [length, whole] of [
      [REPORTED_TEXT_MAX_CHARS, true],
      [REPORTED_TEXT_MAX_CHARS + 1, false],
      [4 * BROKER_MAX_PAYLOAD_BYTES, false],
    ] as const) {
      const message = 'e'.repeat(length);
      const events = tools
        .given(dispatched())
        .when(executed({ kind: 'failed', code: 'unreadable', message }))
        .then([{ type: 'tool.call.receipt', data: expect.objectContaining({ status: 'failed' }) }]);
      const recorded = receiptOf(events).error!.message;
      if (whole) expect(recorded).toBe(message);
      else
        expect(recorded).toBe(
          `${message.slice(0, REPORTED_TEXT_MAX_CHARS)}... [cut for its size: ${length - REPORTED_TEXT_MAX_CHARS} more characters]`,
        );
      expect(wire(events[0]!)).toBeLessThan(REPORTED_TEXT_MAX_CHARS + 2_000);
    }
  });
});
