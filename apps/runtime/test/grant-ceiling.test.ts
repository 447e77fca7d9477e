/**
 * The grant ceiling (defence in depth against a forged admission): a `run.admitted` whose grant exceeds what this
 * deployment allows (forged with admission's credentials: 1,000,000 model requests, a 2099
 * deadline) is never executed: the runtime's first decision stops it, `grant-refused`, naming what
 * exceeds; a grant within the ceiling is executed as before.
 */
import { describe, expect, it } from '@jest/globals';
import { decide } from '../src/decide.js';
import { overCeiling, type GrantCeiling } from '../src/grant-ceiling.js';
import { NOW, spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const ceiling: GrantCeiling = { modelRequests: 64, toolCalls: 256, deadlineSeconds: 86_400, inputTokens: 20_000_000, outputTokens: 1_000_000 };
const wake = { type: 'Wake', model: 'm', ceiling } as const;
/** History admits at 2025-12-31T23:00:01Z (its first event). */
const ADMITTED_AT = Date.parse('2025-12-31T23:00:01.000Z');
const inSeconds = (s: number) => new Date(ADMITTED_AT + s * 1000).toISOString();
const refused = { type: 'run.execution.finished', data: { reason: 'grant-refused', detail: expect.any(String), answerTurn: null } } as never;

describe('runtime decide: the grant ceiling', () => {
  it('given a forged admission with 1,000,000 model requests and a 2099 deadline, when woken, then run.execution.finished grant-refused and no model request', () => {
    runtime
      .given(new History().admitted({ maxModelRequests: 1_000_000, deadlineAt: '2099-12-31T00:00:00.000Z' }))
      .when(wake)
      .then([refused]);
    const h = new History().admitted({ maxModelRequests: 1_000_000, deadlineAt: '2099-12-31T00:00:00.000Z' });
    const [event] = decide(h.facts, wake, NOW);
    expect(event?.type === 'run.execution.finished' && event.data.detail).toMatch(
      /1000000 model requests \(ceiling 64\).*deadline .* s after admission \(ceiling 86400 s\)/,
    );
  });

  it.each([
    ['tool calls', { maxToolCalls: 257, deadlineAt: inSeconds(900) }],
    ['the deadline', { deadlineAt: inSeconds(86_401) }],
    ['output tokens', { deadlineAt: inSeconds(900), limits: { maxOutputTokens: 1_000_001 } }],
    ['input tokens', { deadlineAt: inSeconds(900), limits: { maxInputTokens: 20_000_001 } }],
  ])('given a grant over the ceiling in %s only, when woken, then grant-refused', (_what, opts) => {
    runtime.given(new History().admitted(opts)).when(wake).then([refused]);
  });

  it('given a grant at the ceiling, when woken, then the first model request as usual', () => {
    const h = new History().admitted({ maxModelRequests: 64, maxToolCalls: 256, deadlineAt: inSeconds(86_400) });
    expect(overCeiling(h.facts, ceiling)).toBeNull();
    expect(decide(h.facts, wake, NOW).map((e) => e.type)).toContain('model.turn.requested');
  });

  it('given a Run already under way (a turn recorded), when the ceiling is lowered below its grant, then it is not stopped for it', () => {
    const h = new History().admitted({ maxModelRequests: 100, deadlineAt: inSeconds(900) }).turn(1, { calls: [{ id: 'c1', name: 'list_funds' }] });
    expect(decide(h.facts, wake, NOW).some((e) => e.type === 'run.execution.finished' && e.data.reason === 'grant-refused')).toBe(false);
  });
});
