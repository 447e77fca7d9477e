/** The CLI's views of clocks and budget (K7, K9): unknown usage is marked, never shown as 0; step clocks from event times. */
import { describe, expect, it } from '@jest/globals';
import { makeEvent, type RunEvent, type RunView, type StoredEvent } from '@runplane/contracts';
import { durationText, exitCodeOf, renderStatus, stepClocks, summarize, timelineLine } from '@runplane/app-cli';

const view = (over: Partial<RunView> = {}): RunView => ({
  runId: 'r1',
  conversationId: 'c1',
  messageId: 'm1',
  clientMessageId: 'cm1',
  question: 'Compare SPY and QQQ',
  status: 'running',
  outcome: null,
  reason: null,
  modelRequests: 3,
  promptTokens: 1200,
  completionTokens: 300,
  unknownUsageTurns: 1,
  toolCalls: 2,
  passages: 0,
  admittedAt: '2026-01-01T00:00:00.000Z',
  settledAt: null,
  maxModelRequests: 8,
  maxToolCalls: 16,
  maxInputTokens: 2_000_000,
  maxOutputTokens: 64_000,
  maxCostMicros: null,
  costCurrency: null,
  costMicros: 0,
  costUnknownMaxMicros: 0,
  reserveModelRequests: 1,
  reserveOutputTokens: 4000,
  noProgressSeconds: 300,
  clarificationId: null,
  deadlineAt: '2026-01-01T00:15:00.000Z',
  startedAt: '2026-01-01T00:00:02.000Z',
  queuedMs: 2000,
  executionEndedAt: null,
  executingMs: null,
  lastProgressAt: '2026-01-01T00:01:00.000Z',
  lastSeq: 12,
  ...over,
});

describe('runplane status', () => {
  it('given a running Run with one turn of unknown usage, then tokens are shown as measured lower bounds with the unknown marked, and the clocks against now', () => {
    const text = renderStatus(view(), new Date('2026-01-01T00:02:00.000Z'));
    expect(text).toContain('model requests: 3/8 (final reserve: 1 model request(s), 4000 output tokens)');
    expect(text).toContain('tool calls:     2/16');
    expect(text).toContain('input tokens:   1200+/2000000 measured');
    expect(text).toContain('usage unknown:  1 model request(s) (not counted as 0 tokens)');
    expect(text).toContain('queued:         2.0 s');
    expect(text).toContain('executing:      1 min 58 s so far');
    expect(text).toContain('last progress:  2026-01-01T00:01:00.000Z, 1 min 00 s ago (limit 300 s without progress)');
    expect(text).toContain('deadline:       2026-01-01T00:15:00.000Z, 13 min 00 s left');
  });

  it('given a settled Run with all usage known and an older Run without limits, then plain totals and - for missing limits', () => {
    const settled = renderStatus(
      view({
        status: 'settled',
        outcome: 'completed',
        reason: 'ok',
        unknownUsageTurns: 0,
        executingMs: 5000,
        executionEndedAt: '2026-01-01T00:00:07.000Z',
      }),
      new Date('2026-01-01T05:00:00.000Z'),
    );
    expect(settled).toContain('input tokens:   1200/2000000');
    expect(settled).toContain('executing:      5.0 s (ended 2026-01-01T00:00:07.000Z)');
    expect(settled).not.toContain('left');
    const old = renderStatus(
      view({ maxModelRequests: null, maxInputTokens: null, reserveModelRequests: null, reserveOutputTokens: null }),
      new Date(),
    );
    expect(old).toContain('model requests: 3/- (final reserve: none)');
  });
});

describe('runplane status: cost (K7)', () => {
  it('given a Run with measured cost and unknown usage under a money limit, then the cost shows the measured amount, the range and the limit, exactly', () => {
    const text = renderStatus(
      view({ costCurrency: 'USD', costMicros: 12_345, costUnknownMaxMicros: 1_000_000, maxCostMicros: 50_000_000 }),
      new Date('2026-01-01T00:02:00.000Z'),
    );
    expect(text).toContain('cost:           0.012345 USD measured, up to 1.012345 USD with unknown usage (limit 50.000000 USD)');
  });

  it('given a Run whose turns were not priced, then the cost says so (never 0)', () => {
    expect(renderStatus(view(), new Date('2026-01-01T00:02:00.000Z'))).toContain('cost:           not priced');
  });
});

describe('timeline step clocks', () => {
  it('given a turn, a tool call and its receipt, then each step end carries its duration', () => {
    const ctx = { runId: 'r1', conversationId: 'c1', correlationId: 'm1', causationId: null };
    const t = (s: number) => new Date(Date.parse('2026-01-01T00:00:00.000Z') + s);
    const events: RunEvent[] = [
      makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'm' }, t(0)),
      makeEvent(
        'model.turn.completed',
        ctx,
        1,
        { turn: 1, content: '', toolCalls: [{ toolCallId: 'c', name: 'list_funds', argumentsText: '{}' }], finishReason: 'tool_calls', usage: null },
        t(1500),
      ),
      makeEvent('tool.call.proposed', ctx, 'c', { toolCallId: 'c', name: 'list_funds', argumentsText: '{}', turn: 1 }, t(1500)),
      makeEvent('tool.call.dispatched', ctx, 'c', { toolCallId: 'c', name: 'list_funds' }, t(1600)),
      // it ran 4 s on its thread, after a minute waiting for a free one
      makeEvent(
        'tool.call.receipt',
        ctx,
        'c',
        { toolCallId: 'c', name: 'list_funds', status: 'succeeded', result: [], durationMs: 4_000 },
        t(65_600),
      ),
    ];
    const stored: StoredEvent[] = events.map((event, i) => ({ seq: i + 1, subject: `rp.run.r1.${event.owner}`, event }));
    expect([...stepClocks(stored)]).toEqual([
      [2, 'turn took 1.5 s'],
      [4, '100 ms after its proposal'],
      [5, 'ran 4.0 s, 1 min 04 s after its dispatch'],
    ]);
    expect(durationText(2 * 3600_000 + 3 * 60_000)).toBe('2 h 03 min');
  });

  it("given an event stamped earlier than the one before it (another service's clock), then its gap is shown negative, not +0 ms", () => {
    const ctx = { runId: 'r1', conversationId: 'c1', correlationId: 'm1', causationId: null };
    const at = (iso: string) => new Date(iso);
    const line = (event: RunEvent, previousAt: string | null) =>
      timelineLine({ seq: 7, subject: `rp.run.r1.${event.owner}`, event }, previousAt, undefined);
    const requested = makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'm' }, at('2026-01-01T00:00:00.997Z'));
    expect(line(requested, '2026-01-01T00:00:01.000Z')).toContain('  -3 ms  ');
    expect(line(requested, '2026-01-01T00:00:00.000Z')).toContain('  +997 ms  ');
    expect(line(requested, '2026-01-01T00:00:00.997Z')).toContain('  +0 ms  ');
    expect(line(requested, null)).not.toMatch(/Z\s+[+-]/);
  });
});

describe('runplane ask exit codes', () => {
  it('0 completed, 3 partial, 1 failed, canceled, interrupted or no settlement', () => {
    const ctx = { runId: 'r1', conversationId: 'c1', correlationId: 'm1', causationId: null };
    const settled = (outcome: 'completed' | 'partial' | 'failed' | 'canceled' | 'interrupted') =>
      makeEvent(
        'run.settled',
        ctx,
        'settlement',
        {
          outcome,
          reason: 'r',
          passageIds: [],
          receipts: [],
          usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
          unanswered: [],
        },
        new Date(),
      ) as RunEvent;
    expect(exitCodeOf(settled('completed'))).toBe(0);
    expect(exitCodeOf(settled('partial'))).toBe(3);
    expect(['failed', 'canceled', 'interrupted'].map((o) => exitCodeOf(settled(o as 'failed')))).toEqual([1, 1, 1]);
    expect(exitCodeOf(null)).toBe(1);
  });
});

describe('runplane timeline: a receipt repeated from the continuation parent (K3)', () => {
  it('says the call was not run and names the parent call', () => {
    const ctx = { runId: 'r2', conversationId: 'c1', correlationId: 'm2', causationId: null };
    const e = makeEvent(
      'tool.call.receipt',
      ctx,
      'n1',
      { toolCallId: 'n1', name: 'get_holdings', status: 'succeeded', result: {}, durationMs: 0, reusedFrom: { runId: 'parent-1', toolCallId: 'g1' } },
      new Date('2026-01-01T00:00:00.000Z'),
    );
    expect(summarize(e)).toContain('[not run: the result of g1 in parent Run parent-1]');
  });
});

describe('runplane timeline: a failed model request and its backoff (K7)', () => {
  it('says when the retry may start, and that a refused request reached nothing', () => {
    const ctx = { runId: 'r1', conversationId: 'c1', correlationId: 'm1', causationId: null };
    const e = makeEvent(
      'model.turn.failed',
      ctx,
      3,
      {
        turn: 3,
        error: { kind: 'connection', status: null, message: 'Connection error.', refused: true },
        retry: { failuresInARow: 2, delayMs: 2_400, notBefore: '2026-01-01T00:00:02.400Z' },
      },
      new Date('2026-01-01T00:00:00.000Z'),
    );
    expect(summarize(e)).toBe(
      'model turn 3 failed: connection Connection error. (refused: nothing reached the model); retry not before 2026-01-01T00:00:02.400Z (backoff 2400 ms, failure 2 in a row)',
    );
  });
});
