/**
 * Admission's side of a wait's expiry (K10, `RUNPLANE_WAIT_TTL_SECONDS`): an answer is accepted
 * until 1 ms before `expiresAt` and refused `expired` from that instant on, the same instant from
 * which recovery fences the Run (apps/recovery/test/limits.test.ts): never accepted and expired.
 */
import { describe, expect, it } from '@jest/globals';
import { waitIdOf } from '@runplane/contracts';
import { decide, WaitNotPending } from '../src/decide.js';
import { userOf } from '../src/admission.controller.js';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const admission = spec(decide);
const expiresAt = '2026-01-01T01:00:00.000Z';
const answer = {
  type: 'AnswerWait',
  principal: null,
  waitId: waitIdOf('run-1', 'q'),
  answer: 'Class A',
  answeredBy: 'ana',
  requestId: 'req-1',
} as const;
const parked = () =>
  new History()
    .admitted({ tools: ['list_funds', 'ask_human'] })
    .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which class?"}' }] })
    .waitOpened(1, 'q', 'Which class?', expiresAt);

describe("a wait's answer at the edge of its expiry", () => {
  it('1 ms before expiresAt: recorded', () => {
    admission
      .given(parked())
      .when(answer, new Date(Date.parse(expiresAt) - 1))
      .then([{ type: 'wait.answered', data: { waitId: answer.waitId, toolCallId: 'q', answer: 'Class A', answeredBy: 'ana', requestId: 'req-1' } }]);
  });
  it('at expiresAt and 1 ms after: refused expired, nothing appended', () => {
    admission.given(parked()).when(answer, new Date(expiresAt)).thenThrows(WaitNotPending);
    admission
      .given(parked())
      .when(answer, new Date(Date.parse(expiresAt) + 1))
      .thenThrows(WaitNotPending);
  });
});

describe('X-Runplane-User (who cancels or answers, recorded in the log): at most 200 characters, never cut', () => {
  it('199 and 200 are kept whole; 201 is refused 400 naming the header', () => {
    expect(userOf('u'.repeat(199))).toBe('u'.repeat(199));
    expect(userOf('u'.repeat(200))).toBe('u'.repeat(200));
    expect(() => userOf('u'.repeat(201))).toThrow(/X-Runplane-User is 201 characters long; at most 200/);
  });
});
