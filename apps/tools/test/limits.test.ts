/**
 * The tools' advertised per-Run limits at their edges (K7): `RUNPLANE_MAX_TOOL_CALLS` (further
 * calls get a `denied` receipt) and the Run's deadline (nothing is dispatched at or after it):
 * one below, at and one above.
 */
import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-tools';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const tools = spec(decide);
const wake = { type: 'Wake' } as const;
const dispatched = (id: string) => ({ type: 'tool.call.dispatched', data: { toolCallId: id, name: 'list_funds' } }) as const;
const denied = (id: string, code: string) =>
  ({
    type: 'tool.call.receipt',
    data: expect.objectContaining({ toolCallId: id, status: 'denied', error: expect.objectContaining({ code }) }),
  }) as const;
/** `done` calls already executed in turn 1, then `next` calls proposed in turn 2. */
const history = (maxToolCalls: number, done: number, next: string[], deadlineAt?: string) => {
  const h = new History().admitted({ maxToolCalls, ...(deadlineAt ? { deadlineAt } : {}) });
  const first = Array.from({ length: done }, (_, i) => `d${i}`);
  if (done > 0) {
    h.turn(1, { calls: first.map((id) => ({ id, name: 'list_funds' })) });
    for (const id of first) h.proposed(1, id, 'list_funds').dispatched(id, 'list_funds').receipt(id, 'list_funds', 'succeeded');
  }
  h.turn(2, { calls: next.map((id) => ({ id, name: 'list_funds' })) });
  for (const id of next) h.proposed(2, id, 'list_funds');
  return h;
};

describe('RUNPLANE_MAX_TOOL_CALLS: M calls per Run are executed, the (M+1)th is denied', () => {
  it('given M-1 executed, when one more is proposed, then it is dispatched', () => {
    tools
      .given(history(3, 2, ['a']))
      .when(wake)
      .then([dispatched('a')]);
  });
  it('given M-1 executed, when two are proposed in one turn, then the Mth is dispatched and the (M+1)th denied', () => {
    tools
      .given(history(3, 2, ['a', 'b']))
      .when(wake)
      .then([dispatched('a'), denied('b', 'tool_call_limit')]);
  });
  it('given M executed, when one more is proposed, then it is denied', () => {
    tools
      .given(history(3, 3, ['a']))
      .when(wake)
      .then([denied('a', 'tool_call_limit')]);
  });
  it('given a limit of 0 (the smallest allowed), then every call is denied', () => {
    tools
      .given(history(0, 0, ['a']))
      .when(wake)
      .then([denied('a', 'tool_call_limit')]);
  });
});

describe('the Run deadline: no call is dispatched at or after it', () => {
  const deadlineAt = '2026-01-01T00:10:00.000Z';
  const h = () => history(16, 0, ['a'], deadlineAt);
  it('1 ms before: dispatched; at it and 1 ms after: denied (deadline)', () => {
    tools
      .given(h())
      .when(wake, new Date(Date.parse(deadlineAt) - 1))
      .then([dispatched('a')]);
    tools
      .given(h())
      .when(wake, new Date(deadlineAt))
      .then([denied('a', 'deadline')]);
    tools
      .given(h())
      .when(wake, new Date(Date.parse(deadlineAt) + 1))
      .then([denied('a', 'deadline')]);
  });
});
