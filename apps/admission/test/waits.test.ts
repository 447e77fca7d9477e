/**
 * Admission's rules for waits and child Runs (K1, K7, K10): an answer is recorded once and only
 * while its wait is pending; a repeat appends nothing; a child is admitted once, linked to its
 * parent, with the grant its parent's runtime carved.
 */
import { describe, expect, it } from '@jest/globals';
import { admissionIds, childClientMessageId, PostMessageBody, waitIdOf } from '@runplane/contracts';
import { decide, RunNotFound, WaitConflict, WaitNotFound, WaitNotPending } from '../src/decide.js';
import { NOW, spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const admission = spec(decide);
const answer = (toolCallId: string, text: string, runId = 'run-1') =>
  ({ type: 'AnswerWait', principal: null, waitId: waitIdOf(runId, toolCallId), answer: text, answeredBy: 'ana', requestId: 'req-9' }) as const;
const parked = () =>
  new History()
    .admitted({ tools: ['list_funds', 'ask_human'] })
    .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which class?"}' }] })
    .waitOpened(1, 'q', 'Which class?', '2026-01-01T01:00:00.000Z');

describe('admission decide, AnswerWait: the wake is accepted once (K10)', () => {
  it('given a pending wait, when answered, then wait.answered records the answer, who and the request', () => {
    admission
      .given(parked())
      .when(answer('q', 'Class A'))
      .then([
        {
          type: 'wait.answered',
          data: { waitId: waitIdOf('run-1', 'q'), toolCallId: 'q', answer: 'Class A', answeredBy: 'ana', requestId: 'req-9' },
        },
      ]);
  });

  it('given it answered, when the same answer comes again (even after the settlement), then nothing; another answer is a conflict', () => {
    const h = parked().waitAnswered('q', 'Class A');
    admission.given(h).when(answer('q', 'Class A')).thenNothing();
    admission.given(h).when(answer('q', 'Class B')).thenThrows(WaitConflict);
  });

  it('a wait that is not pending appends nothing: expired, Run settled, stopped, or being canceled', () => {
    admission.given(parked()).when(answer('q', 'Class A'), new Date('2026-01-01T01:00:00.000Z')).thenThrows(WaitNotPending);
    const settled = parked().settled('failed', 'x');
    admission
      .given(settled)
      .when(answer('q', 'Class A'))
      .thenThrows(/settled/);
    const canceled = parked().add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    admission
      .given(canceled)
      .when(answer('q', 'Class A'))
      .thenThrows(/canceled/);
    try {
      decide(parked().facts, answer('q', 'x'), new Date('2026-02-01T00:00:00.000Z'));
    } catch (e) {
      expect(e).toBeInstanceOf(WaitNotPending);
      expect((e as WaitNotPending).reason).toBe('expired');
    }
    expect(NOW.toISOString() < '2026-01-01T01:00:00.000Z').toBe(true);
  });

  it('an unknown wait or Run is not found', () => {
    admission.given(parked()).when(answer('nope', 'x')).thenThrows(WaitNotFound);
    admission.given(new History()).when(answer('q', 'x')).thenThrows(RunNotFound);
  });
});

describe('admission decide, AdmitChild: one link model, one admission per child (K1, K7)', () => {
  const request = (parentRunId: string) => {
    const clientMessageId = childClientMessageId(parentRunId, 's');
    const childRunId = admissionIds('conv-1', clientMessageId).runId;
    return {
      childRunId,
      clientMessageId,
      toolCallId: 's',
      turn: 1,
      question: 'What does DIA hold?',
      grant: { tools: ['list_funds'], model: 'scripted' },
      limits: { maxModelRequests: 3, maxToolCalls: 7, deadlineAt: '2026-01-01T00:05:00.000Z' },
    };
  };
  const admit = (parentActive = true) =>
    ({ type: 'AdmitChild', parentRunId: 'run-1', conversationId: 'conv-1', request: request('run-1'), causationId: 'ev-1', parentActive }) as const;

  it('given nothing admitted under the child id, when the parent requests it, then run.admitted with the carved grant and limits and the link to the parent', () => {
    const childRunId = request('run-1').childRunId;
    const [e] = admission
      .given(new History(childRunId))
      .when(admit())
      .then([
        {
          type: 'run.admitted',
          data: {
            message: {
              messageId: admissionIds('conv-1', childClientMessageId('run-1', 's')).messageId,
              clientMessageId: childClientMessageId('run-1', 's'),
              content: 'What does DIA hold?',
              contentSha256: expect.any(String) as never,
            },
            grant: { tools: ['list_funds'], model: 'scripted' },
            limits: { maxModelRequests: 3, maxToolCalls: 7, deadlineAt: '2026-01-01T00:05:00.000Z' },
            link: { parentRunId: 'run-1', relation: 'child' },
          },
        },
      ]);
    expect(e!.runId).toBe(childRunId);
    expect(e!.conversationId).toBe('conv-1');
  });

  it("a user's message cannot take a child's id (the `child.` prefix is reserved)", () => {
    expect(PostMessageBody.safeParse({ clientMessageId: childClientMessageId('run-1', 's'), content: 'hi' }).success).toBe(false);
    expect(PostMessageBody.safeParse({ clientMessageId: 'children.1', content: 'hi' }).success).toBe(true);
  });

  it('given the child admitted, when the request is delivered again, then nothing; a parent no longer active admits no child', () => {
    const childRunId = request('run-1').childRunId;
    const h = new History(childRunId).admitted();
    admission.given(h).when(admit()).thenNothing();
    admission.given(new History(childRunId)).when(admit(false)).thenNothing();
  });
});
