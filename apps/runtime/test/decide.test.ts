import { describe, expect, it } from '@jest/globals';
import { buildMessages, decideRuntimeStep, toolDefinitions } from '@runplane/app-runtime';
import { History } from '../../../test/support/history.js';

const now = new Date('2026-01-01T00:00:00Z');

describe('runtime decide: the next step comes from the folded log alone', () => {
  it('given nothing admitted, when deciding, then there is nothing to do', () => {
    expect(decideRuntimeStep(new History().facts, now).kind).toBe('none');
  });

  it('given an admitted Run, when deciding, then it requests turn 1', () => {
    expect(decideRuntimeStep(new History().admitted().facts, now)).toEqual({ kind: 'request-turn', turn: 1 });
  });

  it('given a turn requested but not completed, then it waits (never calls the model twice for one turn)', () => {
    const h = new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' });
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'none', why: 'turn 1 in flight' });
  });

  it('given a completed turn whose tool calls were not proposed (crash), then it proposes the missing ones', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }, { id: 'b', name: 'get_holdings' }] }).proposed(1, 'a', 'list_funds');
    const step = decideRuntimeStep(h.facts, now);
    expect(step.kind).toBe('propose');
    expect(step.kind === 'propose' && step.calls.map((c) => c.toolCallId)).toEqual(['b']);
  });

  it('given proposals without receipts, then it waits; given every receipt (even failed), then it requests the next turn (K8)', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }, { id: 'b', name: 'get_holdings' }] }).proposed(1, 'a', 'list_funds').proposed(1, 'b', 'get_holdings');
    h.dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded');
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'none', why: 'waiting for 1 receipt(s)' });
    h.receipt('b', 'get_holdings', 'failed');
    expect(decideRuntimeStep(h.facts, now)).toEqual({ kind: 'request-turn', turn: 2 });
  });

  it('given a final text turn, then it finishes answered with that turn', () => {
    const h = new History().admitted().turn(1, { content: 'The answer.' });
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'finish', reason: 'answered', answerTurn: 1 });
  });

  it.each([
    ['an empty reply', { content: '   ' }, 'empty-output'],
    ['a length-truncated reply', { content: 'Half an ans', finishReason: 'length' }, 'truncated-output'],
    ['a reply stopped by a content filter', { content: 'SPY and QQQ share 88 holdings, and the', finishReason: 'content_filter' }, 'incomplete-output'],
    ['a reply of zero-width characters only', { content: '\u200B\u200D \uFEFF' }, 'empty-output'],
  ])('given %s, then it finishes without an answer (K9)', (_n, reply, reason) => {
    const h = new History().admitted().turn(1, reply);
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'finish', reason, answerTurn: null });
  });

  it('given a failed turn, then it finishes with model-error (no silent retry)', () => {
    const h = new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' }).add('model.turn.failed', 1, { turn: 1, error: { kind: 'http', status: 500, message: 'boom' } });
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'finish', reason: 'model-error' });
  });

  it('given the model-request limit used up, then it finishes instead of calling again', () => {
    const h = new History().admitted({ maxModelRequests: 1 }).turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }).proposed(1, 'a', 'list_funds').dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded');
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'finish', reason: 'model-request-limit' });
  });

  it('given the deadline passed, then it finishes with deadline', () => {
    const h = new History().admitted({ deadlineAt: '2025-12-31T00:00:00.000Z' });
    expect(decideRuntimeStep(h.facts, now)).toMatchObject({ kind: 'finish', reason: 'deadline' });
  });

  it('given a finished Run, then nothing more happens', () => {
    const h = new History().admitted().turn(1, { content: 'x' }).add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    expect(decideRuntimeStep(h.facts, now).kind).toBe('none');
  });
});

describe('model view of a Run', () => {
  it('shows receipts as the model should read them: results, failures, and unknown as unknown (K5)', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }, { id: 'b', name: 'get_holdings' }] }).proposed(1, 'a', 'list_funds').proposed(1, 'b', 'get_holdings');
    h.dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded', { funds: [] }).dispatched('b', 'get_holdings').receipt('b', 'get_holdings', 'unknown');
    const messages = buildMessages(h.facts, new Map([['a', { funds: [] }]]));
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool']);
    expect(JSON.parse(messages[3]!.content as string)).toEqual({ status: 'succeeded', result: { funds: [] } });
    expect(JSON.parse(messages[4]!.content as string)).toMatchObject({ status: 'unknown' });
  });

  it('offers only granted tools, with JSON Schema parameters from the zod contract', () => {
    const defs = toolDefinitions(['compare_holdings']);
    expect(defs).toHaveLength(1);
    expect(defs[0]!.type === 'function' && defs[0]!.function.name).toBe('compare_holdings');
    const params = defs[0]!.type === 'function' ? (defs[0]!.function.parameters as { required: string[] }) : { required: [] };
    expect(params.required).toEqual(['fundA', 'fundB']);
  });
});
