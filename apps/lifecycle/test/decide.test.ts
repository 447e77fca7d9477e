import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-lifecycle';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const lifecycle = spec(decide);
const wake = { type: 'Wake' } as const;
type FenceData = Parameters<History['add']>[2] & { fencedSubject: 'runtime' | 'tools' };
/** Recovery's fence, as it writes it: one marker on the tools subject, then one on the runtime subject. */
const fenced = (h: History, data: Omit<FenceData, 'fencedSubject'>) => {
  for (const fencedSubject of ['tools', 'runtime'] as const) h.add('run.fenced', `fence/${fencedSubject}`, { fencedSubject, ...data } as never);
  return h;
};
const answered = () =>
  new History()
    .admitted()
    .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
    .proposed(1, 'a', 'get_holdings')
    .dispatched('a', 'get_holdings')
    .receipt('a', 'get_holdings', 'failed')
    .turn(2, { content: 'Answer.' })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });

describe('lifecycle decide: exactly one honest settlement (K9)', () => {
  it('given the runtime stopped with an answer not yet published, then it waits', () => {
    lifecycle.given(answered()).when(wake).thenNothing();
  });

  it('given the answer published, then it settles completed with passages, receipts and usage', () => {
    const h = answered()
      .closed()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 });
    const [settled] = lifecycle
      .given(h)
      .when(wake)
      .then([
        {
          type: 'run.settled',
          data: {
            outcome: 'completed',
            reason: 'answer committed in 1 passage(s)',
            passageIds: ['p0'],
            receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'failed' }],
            usage: { modelRequests: 2, toolCalls: 1, promptTokens: 20, completionTokens: 10 },
          },
        },
      ]);
    expect(settled!.owner).toBe('lifecycle');
  });

  it('given an empty-output stop, then it settles failed with the reason', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: '' })
      .add('run.execution.finished', 'finished', { reason: 'empty-output', detail: 'turn 1 returned no text', answerTurn: null })
      .closed();
    lifecycle
      .given(h)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'failed', reason: expect.stringMatching(/empty reply/) }) }]);
  });

  it('given a settlement already recorded, then it never settles again', () => {
    const h = new History().admitted().add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null }).closed();
    const [first] = lifecycle
      .given(h)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'failed' }) }]);
    if (first?.type !== 'run.settled') throw new Error('expected a settlement');
    h.add('run.settled', 'settlement', first.data);
    lifecycle.given(h).when(wake).thenNothing();
  });

  it('given a fenced execution that never stopped on its own, then it settles interrupted with the reason and what is uncertain, keeping receipts and usage (K10)', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'succeeded')
      .add('model.turn.requested', 2, { turn: 2, model: 'm' });
    fenced(h, {
      epoch: 1,
      holder: { service: 'runtime', instance: 'i-1' },
      reason: 'lease-expired',
      detail: 'no renewal',
      uncertain: [{ kind: 'model-turn', turn: 2 }],
    });
    lifecycle
      .given(h)
      .when(wake)
      .then([
        {
          type: 'run.settled',
          data: {
            outcome: 'interrupted',
            reason: 'the runtime was lost (its lease expired): no renewal; outcome unknown: model turn 2',
            passageIds: [],
            receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'succeeded' }],
            usage: { modelRequests: 2, toolCalls: 1, promptTokens: 10, completionTokens: 5 },
          },
        },
      ]);
  });

  it('given a cancel intent and the execution fenced, then it settles canceled, keeping what was committed (K4); given the answer already published, then completed', () => {
    const h = fenced(
      new History()
        .admitted()
        .add('model.turn.requested', 1, { turn: 1, model: 'm' })
        .add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: 'enough' }),
      { epoch: 1, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
    );
    lifecycle
      .given(h)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'canceled', reason: 'canceled by ana: enough' }) }]);
    const published = answered()
      .closed()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 })
      .add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    lifecycle
      .given(published)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'completed' }) }]);
  });

  it('given an execution fenced at its deadline, then it settles failed saying the deadline passed (and when) while nobody executed it, keeping passages, receipts and usage', () => {
    const h = new History()
      .admitted({ deadlineAt: '2026-01-01T00:00:10.000Z' })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'succeeded')
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Part.', sourceTurn: 1, sha256: 'a'.repeat(64) });
    fenced(h, {
      epoch: 0,
      holder: null,
      reason: 'deadline',
      detail: 'deadline 2026-01-01T00:00:10.000Z passed (no runtime took the Run)',
      uncertain: [],
    });
    lifecycle
      .given(h)
      .when(wake)
      .then([
        {
          type: 'run.settled',
          data: {
            outcome: 'failed',
            reason:
              'the deadline passed while nobody executed the Run to its end: deadline 2026-01-01T00:00:10.000Z passed (no runtime took the Run)',
            passageIds: ['p0'],
            receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'succeeded' }],
            usage: { modelRequests: 1, toolCalls: 1, promptTokens: 10, completionTokens: 5 },
          },
        },
      ]);
  });

  it('given a Run fenced at its deadline after its cancel was requested, then the cancel wins (canceled)', () => {
    const h = fenced(new History().admitted().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null }), {
      epoch: 0,
      holder: null,
      reason: 'deadline',
      detail: 'x',
      uncertain: [],
    });
    lifecycle
      .given(h)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'canceled', reason: 'canceled by ana' }) }]);
  });

  it('given the answer published but the executor subjects not closed yet (or only the tools one), then it waits: a settlement never leaves them open to a stale append', () => {
    const published = () =>
      answered()
        .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
        .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 });
    lifecycle.given(published()).when(wake).thenNothing();
    const toolsOnly = published().add('run.fenced', 'settling/tools', {
      fencedSubject: 'tools',
      epoch: 1,
      holder: null,
      reason: 'settling',
      detail: 'x',
      uncertain: [],
    });
    lifecycle.given(toolsOnly).when(wake).thenNothing();
  });

  it('given a tools event after the fence on its subject (a subject reopened), then it waits; a late observation after the fence does not reopen it', () => {
    const base = () =>
      new History()
        .admitted()
        .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
        .proposed(1, 'a', 'get_holdings')
        .dispatched('a', 'get_holdings')
        .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null })
        .closed();
    lifecycle
      .given(base().receipt('a', 'get_holdings', 'succeeded'))
      .when(wake)
      .thenNothing();
    lifecycle
      .given(
        base().add('tool.call.late_observed', 'a', {
          toolCallId: 'a',
          name: 'get_holdings',
          status: 'succeeded',
          result: {},
          durationMs: 1,
          executor: 'x',
        }),
      )
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'failed' }) }]);
  });

  it('given a paragraph streamed but not yet committed as a passage when the execution was fenced, then it waits for publication; once committed, it settles interrupted keeping that passage', () => {
    const streamed = () =>
      new History()
        .admitted()
        .add('model.turn.requested', 1, { turn: 1, model: 'm' })
        .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First.', sha256: 'b'.repeat(64) });
    const fence = { epoch: 1, holder: null, reason: 'lease-expired', detail: 'no renewal', uncertain: [{ kind: 'model-turn', turn: 1 }] } as const;
    lifecycle
      .given(fenced(streamed(), { ...fence, uncertain: [...fence.uncertain] }))
      .when(wake)
      .thenNothing();
    const committed = fenced(streamed(), { ...fence, uncertain: [...fence.uncertain] }).add('passage.committed', '1/0/v1', {
      passageId: 'p0',
      index: 0,
      version: 1,
      text: 'First.',
      sourceTurn: 1,
      sha256: 'b'.repeat(64),
    });
    lifecycle
      .given(committed)
      .when(wake)
      .then([{ type: 'run.settled', data: expect.objectContaining({ outcome: 'interrupted', passageIds: ['p0'] }) }]);
  });
});
