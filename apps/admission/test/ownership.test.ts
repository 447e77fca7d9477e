/**
 * Who may act on a Run and in which Conversation, decided by admission's decider on the facts the
 * conditional append rests on (the HTTP API's tenancy, docs/guarantees.md "Who may do what"):
 * - a cancel or a wait's answer by another principal is RunNotFound, exactly as for an unknown
 *   Run, also when the Run was admitted after an earlier read said it did not exist (the decision
 *   is taken on the facts the append is conditional on, so that window is closed);
 * - conversation ids are per principal: the same conversation id and clientMessageId of two
 *   principals name two Runs, and another principal's Run is never a Continue parent or a
 *   clarification to answer, even under the same conversation id.
 */
import { describe, expect, it } from '@jest/globals';
import { admissionIds, clarificationIdOf, conversationKey, waitIdOf } from '@runplane/contracts';
import {
  clarificationReplyRunId,
  ClarificationNotFound,
  decide,
  ParentNotFound,
  RunNotFound,
  type AnswerWait,
  type CancelRun,
  type PostMessage,
} from '../src/decide.js';
import { emptyFacts } from '@runplane/run-facts';
import { NOW, spec } from '../../../test/support/decider-spec.js';
import { postMessage } from './commands.js';
import { History } from '../../../test/support/history.js';

const admission = spec(decide);
const cancel = (principal: string | null): CancelRun => ({
  type: 'CancelRun',
  principal,
  requestedBy: principal,
  reason: 'mine',
  requestId: 'req-1',
});
const answer = (principal: string | null, toolCallId = 'q'): AnswerWait => ({
  type: 'AnswerWait',
  principal,
  waitId: waitIdOf('run-1', toolCallId),
  answer: 'Class A',
  answeredBy: principal,
  requestId: 'req-2',
});
const parkedOf = (principal?: string) =>
  new History()
    .admitted({ tools: ['list_funds', 'ask_human'], ...(principal ? { principal } : {}) })
    .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which class?"}' }] })
    .waitOpened(1, 'q', 'Which class?', '2100-01-01T00:00:00.000Z');

describe('cancel and answer: only the Run owner (or an admin) acts, decided on the facts the append rests on', () => {
  it("given alice's Run, when bob cancels it, then RunNotFound (the 404 of an unknown Run) and nothing is appended", () => {
    admission
      .given(new History().admitted({ principal: 'alice' }))
      .when(cancel('bob'))
      .thenThrows(RunNotFound);
    admission
      .given(new History())
      .when(cancel('bob'))
      .thenThrows(/run run-1 not found/);
    admission
      .given(new History().admitted({ principal: 'alice' }))
      .when(cancel('bob'))
      .thenThrows(/run run-1 not found/);
  });

  it("given alice's Run, when alice or an admin (null) cancels it, then the cancel is recorded", () => {
    admission
      .given(new History().admitted({ principal: 'alice' }))
      .when(cancel('alice'))
      .then([{ type: 'run.cancel.requested', data: { requestedBy: 'alice', reason: 'mine' } }]);
    admission
      .given(new History().admitted({ principal: 'alice' }))
      .when(cancel(null))
      .then([{ type: 'run.cancel.requested', data: { requestedBy: null, reason: 'mine' } }]);
  });

  it("given a Run admitted without a principal (authentication was off), when a principal cancels it, then RunNotFound: it is an admin's only", () => {
    admission.given(new History().admitted()).when(cancel('bob')).thenThrows(RunNotFound);
  });

  it("given alice's parked Run, when bob answers its wait or a wait it does not have, then RunNotFound both times (nothing of her waits shows)", () => {
    admission.given(parkedOf('alice')).when(answer('bob')).thenThrows(RunNotFound);
    admission.given(parkedOf('alice')).when(answer('bob', 'no-such-call')).thenThrows(RunNotFound);
    admission
      .given(parkedOf('alice'))
      .when(answer('alice'))
      .then([
        {
          type: 'wait.answered',
          data: { waitId: waitIdOf('run-1', 'q'), toolCallId: 'q', answer: 'Class A', answeredBy: 'alice', requestId: 'req-2' },
        },
      ]);
  });
});

describe('conversation ids are per principal (nothing to squat, nothing leaks)', () => {
  const post = (principal: string | undefined, over: Partial<PostMessage> = {}): PostMessage =>
    postMessage({
      conversationId: 'shared',
      clientMessageId: 'm1',
      content: principal === 'alice' ? 'What does DIA hold?' : 'What does QQQ hold?',
      ...(principal ? { principal } : {}),
      ...over,
    });

  it('the same conversation id and clientMessageId of two principals are two Runs; without a principal the ids are as before', () => {
    const alice = admissionIds(conversationKey('shared', 'alice'), 'm1').runId;
    const bob = admissionIds(conversationKey('shared', 'bob'), 'm1').runId;
    expect(alice).not.toBe(bob);
    expect(conversationKey('shared', null)).toBe('shared');
    expect(conversationKey('shared', 'alice')).toBe(conversationKey('shared', 'alice'));
    // bob's message is decided on bob's own (empty) Run: admitted, never a conflict with alice's text
    const [e] = decide(emptyFacts(bob), post('bob'), NOW);
    expect(e).toMatchObject({ type: 'run.admitted', runId: bob, conversationId: 'shared', data: { principal: 'bob' } });
    const [anon] = decide(emptyFacts('x'), post(undefined), NOW);
    expect(anon!.runId).toBe(admissionIds('shared', 'm1').runId);
  });

  it("given alice's settled Run in her conversation 'shared', when bob continues it from his 'shared', then ParentNotFound (as for an unknown parent)", () => {
    const parent = new History('parent-1', 'shared')
      .admitted({ principal: 'alice' })
      .turn(1, { content: 'DIA holds 30 names.' })
      .closed()
      .settled('completed').facts;
    admission
      .given([])
      .when(post('bob', { continuation: { parentRunId: 'parent-1', parent } }))
      .thenThrows(ParentNotFound);
    admission
      .given([])
      .when(post('bob', { continuation: { parentRunId: 'parent-1', parent: null } }))
      .thenThrows(/run parent-1 not found in conversation shared/);
    // alice herself may
    const [e] = decide(emptyFacts('x'), post('alice', { continuation: { parentRunId: 'parent-1', parent } }), NOW);
    expect(e).toMatchObject({ type: 'run.admitted', data: { link: { parentRunId: 'parent-1', relation: 'continuation' } } });
  });

  it("given alice's clarification, when bob replies to it from his 'shared', then ClarificationNotFound; alice's reply Run id is hers", () => {
    const asker = new History('asker-1', 'shared')
      .admitted({ principal: 'alice' })
      .turn(1, { content: '' })
      .clarificationRequested(1, 'call-1', 'Which year?')
      .closed()
      .settled('completed').facts;
    const clarificationId = clarificationIdOf('asker-1', 'call-1');
    admission
      .given([])
      .when(post('bob', { reply: { runId: 'asker-1', clarificationId, parent: asker } }))
      .thenThrows(ClarificationNotFound);
    const [e] = decide(emptyFacts('x'), post('alice', { reply: { runId: 'asker-1', clarificationId, parent: asker } }), NOW);
    expect(e!.runId).toBe(clarificationReplyRunId(conversationKey('shared', 'alice'), clarificationId));
  });
});
