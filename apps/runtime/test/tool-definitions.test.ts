/**
 * The function-tool definitions sent with every model request are made once per process and
 * handed out as copies: the same grant gives the same definitions, and what a caller does to
 * its copy never reaches the next request.
 */
import { describe, expect, it } from '@jest/globals';
import { toolDefinitions } from '../src/messages.js';

/** The function part of a definition (every definition made here is a function tool). */
const fn = (t: ReturnType<typeof toolDefinitions>[number]) => {
  if (t.type !== 'function') throw new Error(`not a function tool: ${t.type}`);
  return t.function;
};

describe('toolDefinitions', () => {
  it('given a grant, when asked twice, then the definitions are equal, in grant order, and not shared', () => {
    const first = toolDefinitions(['get_holdings', 'compare_holdings', 'not_a_tool']);
    const second = toolDefinitions(['get_holdings', 'compare_holdings', 'not_a_tool']);
    expect(first.map((t) => fn(t).name)).toEqual(['get_holdings', 'compare_holdings']);
    expect(second).toEqual(first);
    expect(second[0]).not.toBe(first[0]);
    expect(fn(first[0]!).parameters).toMatchObject({ type: 'object' });
  });

  it('given a caller that changes its copy, when the next request asks, then it gets the original', () => {
    const mine = toolDefinitions(['get_holdings']);
    (fn(mine[0]!).parameters as Record<string, unknown>).type = 'changed';
    fn(mine[0]!).description = 'changed';
    const next = toolDefinitions(['get_holdings']);
    expect(fn(next[0]!).parameters).toMatchObject({ type: 'object' });
    expect(fn(next[0]!).description).not.toBe('changed');
  });
});
