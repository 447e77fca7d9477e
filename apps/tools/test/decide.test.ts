import { describe, expect, it } from '@jest/globals';
import { planToolSteps } from '@runplane/app-tools';
import { History } from '../../../test/support/history.js';

const kinds = (h: History) => planToolSteps(h.facts).map((s) => `${s.kind}:${s.call.toolCallId}`);

describe('tools decide: every proposed call is executed at most once (K5)', () => {
  it('given a new proposal, then it is dispatched', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }).proposed(1, 'a', 'list_funds');
    expect(kinds(h)).toEqual(['dispatch:a']);
  });

  it('given a dispatched call without a receipt (executor died), then it is marked unknown, never re-run', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }).proposed(1, 'a', 'list_funds').dispatched('a', 'list_funds');
    expect(kinds(h)).toEqual(['mark-unknown:a']);
  });

  it('given a receipt, then nothing more is owed', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }).proposed(1, 'a', 'list_funds').dispatched('a', 'list_funds').receipt('a', 'list_funds', 'failed');
    expect(kinds(h)).toEqual([]);
  });

  it('given a tool outside the grant, then it is denied without dispatch', () => {
    const h = new History().admitted({ tools: ['list_funds'] }).turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] }).proposed(1, 'a', 'get_holdings');
    const [step] = planToolSteps(h.facts);
    expect(step).toMatchObject({ kind: 'deny', code: 'not_granted' });
  });

  it('given the tool-call limit, then calls past it are denied, earlier ones dispatched', () => {
    const h = new History().admitted({ maxToolCalls: 1 }).turn(1, { calls: [{ id: 'a', name: 'list_funds' }, { id: 'b', name: 'list_funds' }] }).proposed(1, 'a', 'list_funds').proposed(1, 'b', 'list_funds');
    expect(kinds(h)).toEqual(['dispatch:a', 'deny:b']);
  });
});
