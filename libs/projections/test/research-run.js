/**
 * The research Run as events (built with the contracts' `makeEvent`, fixed `occurredAt` times):
 * shared by the projection tests (through fixtures.ts) and scripts/projection-cpu.js, which
 * measures the projection write path on it. Plain JavaScript so that the script runs it from the
 * built libraries; its types are in research-run.d.ts.
 */
import { makeEvent, sha256Hex } from '@runplane/contracts';

/** The envelope context of Run `runId`: conversation `conv-<runId>`, message `msg-<runId>`. */
export const ctxOf = (runId, conversationId = `conv-${runId}`) => ({
  runId,
  conversationId,
  correlationId: `msg-${runId}`,
  causationId: null,
});

/** `base` + `seconds`, as a Date (event times are fixed so rows are predictable). */
export const at = (seconds, base = Date.parse('2026-11-30T10:00:00.000Z')) => new Date(base + seconds * 1000);

/** The research Run's `run.admitted` (its question `content`, at `t` seconds): three tools, 8 model requests, 16 tool calls, a 15-minute deadline. */
export function admittedEvent(runId, content = 'Compare the holdings of fund A and fund B', t = 0) {
  return makeEvent(
    'run.admitted',
    ctxOf(runId),
    'admission',
    {
      message: { messageId: `msg-${runId}`, clientMessageId: `client-${runId}`, content, contentSha256: sha256Hex(content) },
      grant: { tools: ['list_funds', 'get_holdings', 'compare_holdings'], model: 'runplane-scripted-research' },
      limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: at(900).toISOString() },
    },
    at(t),
  );
}

/**
 * A complete research Run: two model turns, two tool calls (one succeeds by reference, one
 * fails), two passages (one revised), the answer published and the Run settled `completed`.
 */
export function researchRunEvents(runId) {
  const c = ctxOf(runId);
  const usage = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
  const p0 = 'Fund A holds 42 positions; fund B holds 37.';
  const p0v2 = 'Fund A holds 42 positions; fund B holds 37 (as of 2026-09-30).';
  const p1 = 'The holdings of fund B could not be compared: the comparison tool failed.';
  return [
    admittedEvent(runId),
    makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'runplane-scripted-research' }, at(1)),
    makeEvent(
      'model.turn.completed',
      c,
      1,
      {
        turn: 1,
        content: '',
        toolCalls: [
          { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}' },
          { toolCallId: 'call_2', name: 'compare_holdings', argumentsText: '{"left":"A","right":"B"}' },
        ],
        finishReason: 'tool_calls',
        usage,
      },
      at(2),
    ),
    makeEvent('tool.call.proposed', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}', turn: 1 }, at(2)),
    makeEvent(
      'tool.call.proposed',
      c,
      'call_2',
      { toolCallId: 'call_2', name: 'compare_holdings', argumentsText: '{"left":"A","right":"B"}', turn: 1 },
      at(2),
    ),
    makeEvent('tool.call.dispatched', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings' }, at(3)),
    makeEvent(
      'tool.call.receipt',
      c,
      'call_1',
      {
        toolCallId: 'call_1',
        name: 'get_holdings',
        status: 'succeeded',
        resultRef: { bucket: 'results', key: `${runId}/call_1`, sha256: 'b'.repeat(64), bytes: 2048 },
        durationMs: 41,
      },
      at(4),
    ),
    makeEvent('tool.call.dispatched', c, 'call_2', { toolCallId: 'call_2', name: 'compare_holdings' }, at(4)),
    makeEvent(
      'tool.call.receipt',
      c,
      'call_2',
      {
        toolCallId: 'call_2',
        name: 'compare_holdings',
        status: 'failed',
        error: { code: 'source_unavailable', message: 'fund B file missing' },
        durationMs: 12,
      },
      at(5),
    ),
    makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'runplane-scripted-research' }, at(6)),
    makeEvent('model.turn.completed', c, 2, { turn: 2, content: `${p0}\n\n${p1}`, toolCalls: [], finishReason: 'stop', usage }, at(8)),
    makeEvent('run.execution.finished', c, 'finished', { reason: 'answered', detail: 'turn 2 answered', answerTurn: 2 }, at(8)),
    makeEvent('passage.committed', c, 'p0/1', { passageId: 'p0', index: 0, version: 1, text: p0, sourceTurn: 2, sha256: sha256Hex(p0) }, at(9)),
    makeEvent('passage.committed', c, 'p1/1', { passageId: 'p1', index: 1, version: 1, text: p1, sourceTurn: 2, sha256: sha256Hex(p1) }, at(9)),
    makeEvent('passage.committed', c, 'p0/2', { passageId: 'p0', index: 0, version: 2, text: p0v2, sourceTurn: 2, sha256: sha256Hex(p0v2) }, at(10)),
    makeEvent('answer.published', c, 'answer', { passageIds: ['p0', 'p1'], characters: p0v2.length + p1.length, sourceTurn: 2 }, at(10)),
    makeEvent(
      'run.settled',
      c,
      'settled',
      {
        outcome: 'completed',
        reason: 'answered; compare_holdings failed',
        passageIds: ['p0', 'p1'],
        receipts: [
          { toolCallId: 'call_1', name: 'get_holdings', status: 'succeeded' },
          { toolCallId: 'call_2', name: 'compare_holdings', status: 'failed' },
        ],
        usage: { modelRequests: 2, toolCalls: 2, promptTokens: 240, completionTokens: 60 },
      },
      at(11),
    ),
  ];
}
