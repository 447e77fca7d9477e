/** The lifecycle's rules for parked Runs (K9, K10): a child's settlement recorded on its parent once; an expired wait settles `failed`. */
import { describe, expect, it } from '@jest/globals';
import { admissionIds, CHILD_ANSWER_MAX_BYTES, childClientMessageId, jsonBytes, sha256Hex, type EventData } from '@runplane/contracts';
import { History } from '../../../test/support/history.js';
import { lifecycle, settles } from './lifecycle-spec.js';

const childRunId = admissionIds('conv-1', childClientMessageId('run-1', 's')).runId;
const parent = () =>
  new History()
    .admitted({ tools: ['list_funds', 'spawn_subagent'] })
    .turn(1, { calls: [{ id: 's', name: 'spawn_subagent', args: '{"question":"sub"}' }] })
    .childRequested(1, 's', 'sub');
const childSettled = {
  type: 'ChildSettled',
  childRunId,
  outcome: 'completed',
  reason: 'answer committed in 1 passage(s)',
  answer: 'DIA holds 30.',
} as const;

describe('lifecycle decide, ChildSettled: the parent is woken exactly once (K10)', () => {
  it("given the parent waiting on the child, when the child settles, then child.run.settled with the child's outcome and answer", () => {
    lifecycle
      .given(parent())
      .when(childSettled)
      .then([
        {
          type: 'child.run.settled',
          data: { childRunId, toolCallId: 's', outcome: 'completed', reason: 'answer committed in 1 passage(s)', answer: 'DIA holds 30.' },
        },
      ]);
  });

  it("a child's answer at its size limit is recorded whole; one above and far above, cut with answerCut (K9, K11)", () => {
    for (const bytes of [CHILD_ANSWER_MAX_BYTES, CHILD_ANSWER_MAX_BYTES + 1, 4 * CHILD_ANSWER_MAX_BYTES]) {
      const answer = 'a'.repeat(bytes - 2);
      const [e] = lifecycle
        .given(parent())
        .when({ ...childSettled, answer })
        .then([{ type: 'child.run.settled', data: expect.objectContaining({ childRunId }) }]);
      const data = e!.data as EventData<'child.run.settled'>;
      if (bytes <= CHILD_ANSWER_MAX_BYTES) {
        expect(data.answer).toBe(answer);
        expect(data.answerCut).toBeUndefined();
      } else {
        expect(jsonBytes(data.answer)).toBeLessThanOrEqual(CHILD_ANSWER_MAX_BYTES);
        expect(answer.startsWith(data.answer)).toBe(true);
        expect(data.answerCut).toEqual({
          reason: 'size-limit',
          bytes,
          sha256: sha256Hex(answer),
          keptCharacters: data.answer.length,
          limitBytes: CHILD_ANSWER_MAX_BYTES,
        });
      }
    }
  });

  it('given the result recorded already, an unknown child, or a settled parent, then nothing', () => {
    lifecycle
      .given(parent().childSettled(childRunId, 's', 'completed'))
      .when(childSettled)
      .thenNothing();
    lifecycle
      .given(parent())
      .when({ ...childSettled, childRunId: 'other' })
      .thenNothing();
    const settled = parent().settled('canceled', 'x');
    lifecycle.given(settled).when(childSettled).thenNothing();
  });

  it('given a parent canceled while its child runs, when its execution is fenced, then the settlement names the child still running, for admission to cancel without reading the parent', () => {
    const canceledAndFenced = (h: History) =>
      h.add('run.cancel.requested', 'cancel', { requestedBy: 'u1', reason: 'no longer needed' }).fenced('canceled');
    settles(canceledAndFenced(parent()), expect.objectContaining({ outcome: 'canceled', pendingChildRunIds: [childRunId] }));
    // a child whose result is recorded is not running any more
    settles(
      canceledAndFenced(parent().childSettled(childRunId, 's', 'completed')),
      expect.objectContaining({ outcome: 'canceled', pendingChildRunIds: [] }),
    );
  });

  it('a parked parent settles nothing by itself: no finish, no fence, no settlement', () => {
    lifecycle.given(parent()).when({ type: 'Wake' }).thenNothing();
  });
});

describe('lifecycle decide: a wait that expired unanswered settles the Run failed (K9, K10)', () => {
  it('given the fence wait-expired, when woken, then settled failed with the reason', () => {
    const h = new History()
      .admitted({ tools: ['ask_human'] })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
      .waitOpened(1, 'q', 'Which?')
      .fenced('wait-expired', 1, { detail: 'wait w expired unanswered at 2026-01-01T00:00:00.000Z', subjects: ['runtime', 'tools'] });
    settles(h, {
      outcome: 'failed',
      reason: 'wait-expired: the question for a human was not answered in time: wait w expired unanswered at 2026-01-01T00:00:00.000Z',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 10, completionTokens: 5, unknownUsageTurns: 0 },
      unanswered: [],
      pendingChildRunIds: [],
    });
  });
});
