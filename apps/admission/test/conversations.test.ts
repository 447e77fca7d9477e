/**
 * Admission's conversation rules as decider specifications (K1, K2, K3): the conversation
 * history recorded at admission, explicit Continue and its eligibility read from the parent's
 * facts, clarification answers bound only to a registered clarification, and the conflicts of a
 * repeated clientMessageId.
 */
import { describe, expect, it } from '@jest/globals';
import {
  admissionIds,
  assertContinuable,
  clarificationReplyRunId,
  ClarificationAnswered,
  ClarificationNotFound,
  ContinuationNotEligible,
  decide,
  MessageConflict,
  ParentNotFound,
  type PostMessage,
} from '../src/decide.js';
import { clarificationIdOf, sha256Hex, type StoredEvent } from '@runplane/contracts';
import { emptyFacts, foldRun, type RunFacts } from '@runplane/run-facts';
import { History } from '../../../test/support/history.js';
import { NOW, spec } from '../../../test/support/decider-spec.js';
import { postMessage } from './commands.js';

const admission = spec(decide);
const CONV = 'conv-1';
const post = (over: Partial<PostMessage> = {}): PostMessage =>
  postMessage({ conversationId: CONV, clientMessageId: 'client-2', content: 'Now only the past year', ...over });
const { runId, messageId } = admissionIds(CONV, 'client-2');
/** The message, grant and limits of the `run.admitted` that {@link post} (at {@link NOW}) asks for. */
const posted = {
  message: { messageId, clientMessageId: 'client-2', content: 'Now only the past year', contentSha256: sha256Hex('Now only the past year') },
  grant: { tools: ['list_funds'], model: 'm' },
  limits: { maxModelRequests: 4, maxToolCalls: 4, deadlineAt: '2026-01-01T00:01:00.000Z' },
};
const ORIGINAL = 'Compare SPY and QQQ over three years';

/** A parent Run of `conv` that ran one model turn and settled as `outcome` (after a fence for `fence`, when given). */
function parent(
  outcome: 'completed' | 'partial' | 'failed' | 'canceled' | 'interrupted' | null,
  fence?: Parameters<History['fenced']>[0],
  conv = CONV,
) {
  const h = new History('parent-1', conv).admitted({ content: ORIGINAL }).turn(1, { content: 'SPY and QQQ overlap.' });
  if (fence) h.fenced(fence);
  else if (outcome) h.closed();
  if (outcome) h.settled(outcome);
  return h.facts;
}
const continuing = (p: RunFacts | null, over: Partial<PostMessage> = {}) => post({ continuation: { parentRunId: 'parent-1', parent: p }, ...over });

/** Stored events of the Run `decide` admits for `cmd` (to give as history of a repeat). */
function admittedBy(cmd: PostMessage, id = runId): StoredEvent[] {
  const [e] = decide(emptyFacts(id), cmd, NOW);
  return [{ seq: 1, subject: `rp.run.${id}.admission`, event: e! }];
}

describe('an ordinary message (K2): a new Run with the conversation history, no link', () => {
  it('given earlier Runs in the index, when a message arrives, then its admission lists them oldest first and has no link', () => {
    const [e] = admission
      .given([])
      .when(post({ history: ['run-a', 'run-b'] }))
      .then([
        {
          type: 'run.admitted',
          data: {
            ...posted,
            conversationHistory: { runIds: ['run-a', 'run-b'] },
          },
        },
      ]);
    expect(e!.data).not.toHaveProperty('link');
  });

  it('the Run itself is never listed in its own history (a repeat after the index was written)', () => {
    const [e] = decide(emptyFacts(runId), post({ history: ['run-a', runId] }), NOW);
    expect(e?.type === 'run.admitted' && e.data.conversationHistory).toEqual({ runIds: ['run-a'] });
  });

  it('ordinary text is never bound to a clarification, whatever it says: no replyTo, no link', () => {
    const [e] = decide(emptyFacts(runId), post({ content: 'Annualized, please (answering your question)' }), NOW);
    expect(e?.type === 'run.admitted' && e.data.link).toBeUndefined();
    expect(e?.type === 'run.admitted' && e.data.clarification).toBeUndefined();
  });

  it('given the id was used for a clarification answer (index), when posted as an ordinary message, then a replyTo conflict', () => {
    admission
      .given([])
      .when(post({ messageRunElsewhere: 'reply-run' }))
      .thenThrows(MessageConflict);
    admission
      .given([])
      .when(post({ messageRunElsewhere: 'reply-run' }))
      .thenThrows(/different replyTo/);
  });
});

describe('explicit Continue (K3): eligibility from the parent log', () => {
  it.each([
    ['completed', parent('completed')],
    ['partial', parent('partial')],
    ['interrupted: lease expired (lost execution ownership)', parent('interrupted', 'lease-expired')],
    ['interrupted: runtime stopped (transport loss)', parent('interrupted', 'runtime-stopped')],
  ])('given a parent settled %s, then a new Run linked to it, with the parent request hash and a fresh grant and limits', (_name, p) => {
    admission
      .given([])
      .when(continuing(p, { history: ['parent-1'] }))
      .then([
        {
          type: 'run.admitted',
          data: {
            ...posted,
            link: { parentRunId: 'parent-1', relation: 'continuation' },
            parentRequestSha256: sha256Hex(ORIGINAL),
            conversationHistory: { runIds: ['parent-1'] },
          },
        },
      ]);
  });

  it.each([
    ['canceled', parent('canceled', 'canceled'), 'canceled'],
    ['failed for an ordinary reason', parent('failed'), 'failed'],
    ['failed at its deadline', parent('failed', 'deadline'), 'failed'],
    ['still running (not settled)', parent(null), 'running'],
    ['interrupted without a fence for a lost runtime', parent('interrupted'), 'interrupted'],
  ])('given a parent %s, then ContinuationNotEligible (%s) and nothing is appended', (_name, p, reason) => {
    admission.given([]).when(continuing(p)).thenThrows(ContinuationNotEligible);
    expect(() => assertContinuable(p)).toThrow(expect.objectContaining({ reason }));
  });

  it('given a settled parent that never ran a model turn, then not eligible (no-execution)', () => {
    const p = new History('parent-1', CONV).admitted({ content: ORIGINAL }).closed().settled('completed').facts;
    admission
      .given([])
      .when(continuing(p))
      .thenThrows(/never ran a model turn/);
    expect(() => assertContinuable(p)).toThrow(expect.objectContaining({ reason: 'no-execution' }));
  });

  it('given a child Run (a sub-agent of another Run) as the parent, then not eligible (child-run): its parent is what a user continues', () => {
    const h = new History('parent-1', CONV).add('run.admitted', 'admission', {
      message: { messageId: 'mc', clientMessageId: 'child.x.y', content: ORIGINAL, contentSha256: sha256Hex(ORIGINAL) },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests: 2, maxToolCalls: 2, deadlineAt: '2026-01-01T00:01:00.000Z' },
      link: { parentRunId: 'grand-1', relation: 'child' },
    });
    const p = h.turn(1, { content: 'x' }).closed().settled('completed').facts;
    admission.given([]).when(continuing(p)).thenThrows(ContinuationNotEligible);
    expect(() => assertContinuable(p)).toThrow(expect.objectContaining({ reason: 'child-run' }));
  });

  it('given a parent whose stored request no longer matches its admitted hash, then not eligible (request-mismatch)', () => {
    const h = new History('parent-1', CONV).admitted({ content: ORIGINAL }).turn(1, { content: 'x' }).closed().settled('completed');
    const admittedEvent = h.events[0]!.event;
    if (admittedEvent.type !== 'run.admitted') throw new Error('expected the admission first');
    const tampered = {
      ...admittedEvent,
      data: { ...admittedEvent.data, message: { ...admittedEvent.data.message, contentSha256: sha256Hex('another question') } },
    };
    const p = foldRun('parent-1', [{ ...h.events[0]!, event: tampered }, ...h.events.slice(1)]);
    expect(() => assertContinuable(p)).toThrow(expect.objectContaining({ reason: 'request-mismatch' }));
  });

  it('given an unknown parent, or a parent of another conversation, then ParentNotFound with the same words (nothing leaks)', () => {
    admission.given([]).when(continuing(null)).thenThrows(ParentNotFound);
    const other = parent('completed', undefined, 'conv-other');
    admission.given([]).when(continuing(other)).thenThrows(ParentNotFound);
    let unknownText = '';
    let otherText = '';
    try {
      decide(emptyFacts(runId), continuing(null), NOW);
    } catch (e) {
      unknownText = (e as Error).message;
    }
    try {
      decide(emptyFacts(runId), continuing(other), NOW);
    } catch (e) {
      otherText = (e as Error).message;
    }
    expect(otherText).toBe(unknownText);
    expect(otherText).not.toContain(ORIGINAL);
  });

  it('the parent is not judged again on a repeat: given the continuation admitted, the same message gets nothing new', () => {
    const first = continuing(parent('partial'));
    admission
      .given(admittedBy(first))
      .when(continuing(parent('partial'), { requestId: 'req-2' }))
      .thenNothing();
  });
});

describe('a repeated clientMessageId (K1): same message, or a conflict naming the field', () => {
  it('given an ordinary admission, when the same id comes with a continuationOfRunId, then a continuationOfRunId conflict', () => {
    admission
      .given(admittedBy(post()))
      .when(continuing(parent('completed')))
      .thenThrows(/different continuationOfRunId/);
  });

  it('given a continuation of parent-1, when the same id names another parent, then a continuationOfRunId conflict', () => {
    const p2 = new History('parent-2', CONV).admitted().turn(1, { content: 'y' }).closed().settled('completed').facts;
    admission
      .given(admittedBy(continuing(parent('completed'))))
      .when(post({ continuation: { parentRunId: 'parent-2', parent: p2 } }))
      .thenThrows(expect.objectContaining({ field: 'continuationOfRunId' }));
  });

  it('given a continuation, when the same id comes without the parent, then a conflict; with other text, a content conflict first', () => {
    const given = admittedBy(continuing(parent('completed')));
    admission
      .given(given)
      .when(post())
      .thenThrows(/different continuationOfRunId/);
    admission
      .given(given)
      .when(continuing(parent('completed'), { content: 'other' }))
      .thenThrows(/different content/);
  });
});

describe('clarification answers (K2): bound only to a registered, unanswered clarification', () => {
  const asked = () =>
    new History('asker-1', CONV)
      .admitted({ content: ORIGINAL })
      .turn(1, { content: '' })
      .clarificationRequested(1, 'call-1', 'Cumulative or annualized?');
  const clarificationId = clarificationIdOf('asker-1', 'call-1');
  const replyRunId = clarificationReplyRunId(CONV, clarificationId);
  const reply = (over: Partial<PostMessage> = {}, facts: RunFacts | null = asked().closed().settled('completed').facts) =>
    post({ content: 'Annualized', reply: { runId: 'asker-1', clarificationId, parent: facts }, ...over });

  it('given a registered clarification, when a reply names it, then a new Run linked to the asker, carrying question and original request', () => {
    const [e] = spec(decide)
      .given(new History(replyRunId, CONV))
      .when(reply({ history: ['asker-1'] }))
      .then([
        {
          type: 'run.admitted',
          data: {
            message: { messageId, clientMessageId: 'client-2', content: 'Annualized', contentSha256: sha256Hex('Annualized') },
            grant: { tools: ['list_funds'], model: 'm' },
            limits: { maxModelRequests: 4, maxToolCalls: 4, deadlineAt: '2026-01-01T00:01:00.000Z' },
            link: { parentRunId: 'asker-1', relation: 'clarification' },
            clarification: { clarificationId, question: 'Cumulative or annualized?', originalRequest: ORIGINAL },
            conversationHistory: { runIds: ['asker-1'] },
          },
        },
      ]);
    expect(e!.runId).toBe(replyRunId);
  });

  it('given no such clarification, an unknown Run, or the asker in another conversation, then ClarificationNotFound', () => {
    const noClarification = new History('asker-1', CONV).admitted().turn(1, { content: 'done' }).closed().settled('completed').facts;
    admission.given([]).when(reply({}, noClarification)).thenThrows(ClarificationNotFound);
    admission.given([]).when(reply({}, null)).thenThrows(ClarificationNotFound);
    const elsewhere = new History('asker-1', 'conv-other')
      .admitted()
      .turn(1, { content: '' })
      .clarificationRequested(1, 'call-1', 'Which year?').facts;
    admission.given([]).when(reply({}, elsewhere)).thenThrows(ClarificationNotFound);
  });

  it('given the clarification answered by this very message, then the same reply again appends nothing', () => {
    admission
      .given(admittedBy(reply(), replyRunId))
      .when(reply({ requestId: 'req-2' }))
      .thenNothing();
  });

  it('given the clarification answered by another message, then ClarificationAnswered naming it, whatever the text', () => {
    const answered = admittedBy(reply(), replyRunId);
    admission
      .given(answered)
      .when(reply({ clientMessageId: 'client-3', content: 'Cumulative' }))
      .thenThrows(ClarificationAnswered);
    admission
      .given(answered)
      .when(reply({ clientMessageId: 'client-3' }))
      .thenThrows(/already answered by message "client-2"/);
  });

  it('given the answer admitted, when the same id comes with other text, then a content conflict', () => {
    admission
      .given(admittedBy(reply(), replyRunId))
      .when(reply({ content: 'Cumulative' }))
      .thenThrows(/different content/);
  });

  it('given the id admitted as an ordinary message, when it comes again as a reply, then a replyTo conflict', () => {
    admission
      .given([])
      .when(reply({ messageRunElsewhere: runId }))
      .thenThrows(/different replyTo/);
  });
});
