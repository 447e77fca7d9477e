import { describe, expect, it } from '@jest/globals';
import { makeEvent, sha256Hex, type RunEvent, type StoredEvent } from '@runplane/contracts';
import {
  evolveMessage,
  evolveModelTurn,
  evolvePassage,
  evolveRun,
  evolveToolCall,
  touchedKeys,
  type ModelTurnRow,
  type PassageRow,
  type RunRow,
  type ToolCallRow,
} from '@runplane/projections';
import { admittedEvent, at, columns, ctxOf, researchRunEvents, researchRunSettled, storedInOrder, unlimitedBudgetColumns } from './fixtures.js';

const runId = 'run-unit';
const c = ctxOf(runId);
const stored = (event: RunEvent, seq: number): StoredEvent => ({ seq, subject: `t.run.${runId}.${event.owner}`, event });

const admittedRun = (): RunRow => evolveRun(null, stored(admittedEvent(runId), 1))!;
const proposed = (seq = 5): ToolCallRow =>
  evolveToolCall(
    null,
    stored(
      makeEvent('tool.call.proposed', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}', turn: 1 }, at(2)),
      seq,
    ),
  )!;

describe('runs rule', () => {
  it('given no row, when run.admitted, then an admitted Run with zero counters, times from occurredAt and the checkpoint at its seq', () => {
    expect(evolveRun(null, stored(admittedEvent(runId), 7))).toEqual({
      runId,
      conversationId: c.conversationId,
      messageId: `msg-${runId}`,
      clientMessageId: `client-${runId}`,
      question: 'Compare the holdings of fund A and fund B',
      status: 'admitted',
      ...columns(0, 'modelRequests', 'promptTokens', 'completionTokens', 'unknownUsageTurns', 'toolCalls', 'passages'),
      ...columns(null, 'outcome', 'reason', 'settledAt', 'startedAt', 'queuedMs', 'executionEndedAt', 'executingMs', 'clarificationId', 'principal'),
      admittedAt: '2026-11-30T10:00:00.000Z',
      lastProgressAt: '2026-11-30T10:00:00.000Z',
      maxModelRequests: 8,
      maxToolCalls: 16,
      ...unlimitedBudgetColumns,
      costInFlightMicros: 0,
      deadlineAt: '2026-11-30T10:15:00.000Z',
      lastSeq: 7,
    });
  });

  it('given a Run, when clarification.requested, then the view names that clarification (K2), once', () => {
    const asked = (id: string, seq: number) =>
      stored(
        makeEvent('clarification.requested', c, id, { clarificationId: id, toolCallId: `call-${id}`, turn: 1, question: 'Which period?' }, at(3)),
        seq,
      );
    const row = evolveRun(admittedRun(), asked('cl-1', 2))!;
    expect(row.clarificationId).toBe('cl-1');
    expect(evolveRun(row, asked('cl-2', 3))!.clarificationId).toBe('cl-1');
  });

  it('given no row, when any other event arrives, then there is no Run (the adapter refuses it)', () => {
    expect(evolveRun(null, stored(makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)), 2))).toBeNull();
  });

  it('given turns with and without usage and a failed one, then tokens are the measured sums and the others count as unknown usage, not 0 tokens (K9)', () => {
    const events: RunEvent[] = [
      makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)),
      makeEvent(
        'model.turn.completed',
        c,
        1,
        { turn: 1, content: '', toolCalls: [], finishReason: 'tool_calls', usage: { promptTokens: 7, completionTokens: 3, totalTokens: 10 } },
        at(2),
      ),
      makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'm' }, at(3)),
      makeEvent('model.turn.completed', c, 2, { turn: 2, content: 'A.', toolCalls: [], finishReason: 'stop', usage: null }, at(4)),
      makeEvent('model.turn.requested', c, 3, { turn: 3, model: 'm' }, at(5)),
      makeEvent('model.turn.failed', c, 3, { turn: 3, error: { kind: 'connection', status: null, message: 'cut' } }, at(6)),
    ];
    const row = events.reduce<RunRow>((r, e, i) => evolveRun(r, stored(e, i + 2))!, admittedRun());
    expect(row).toMatchObject({ modelRequests: 3, promptTokens: 7, completionTokens: 3, unknownUsageTurns: 2 });
  });

  it('given an admitted Run, when a model turn is requested, then it is running and counts one model request', () => {
    const next = evolveRun(admittedRun(), stored(makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)), 2))!;
    // a requested turn's usage is unknown until it reports it (K9)
    expect(next).toMatchObject({ status: 'running', modelRequests: 1, unknownUsageTurns: 1, promptTokens: 0, lastSeq: 2 });
  });

  it('given a requested turn, when it fails not-sent (the limiter never sent it), then it is no model request and no unknown usage (K7); a timeout still is', () => {
    const requested = (turn: number, seq: number, row: RunRow) =>
      evolveRun(row, stored(makeEvent('model.turn.requested', c, turn, { turn, model: 'm' }, at(seq)), seq))!;
    const failed = (turn: number, seq: number, row: RunRow, kind: 'not-sent' | 'timeout') =>
      evolveRun(row, stored(makeEvent('model.turn.failed', c, turn, { turn, error: { kind, status: null, message: kind } }, at(seq)), seq))!;
    let row = failed(1, 3, requested(1, 2, admittedRun()), 'timeout');
    expect(row).toMatchObject({ modelRequests: 1, unknownUsageTurns: 1 });
    row = failed(2, 5, requested(2, 4, row), 'not-sent');
    expect(row).toMatchObject({ modelRequests: 1, unknownUsageTurns: 1, status: 'running' });
  });

  it('given a proposed tool call, when it is dispatched, then the Run counts it once; a second dispatch of the same call does not count', () => {
    const run = { ...admittedRun(), status: 'running' as const };
    const dispatched = stored(makeEvent('tool.call.dispatched', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings' }, at(3)), 6);
    const once = evolveRun(run, dispatched, { toolCallBefore: proposed() })!;
    expect(once.toolCalls).toBe(1);
    const twice = evolveRun(once, { ...dispatched, seq: 7 }, { toolCallBefore: { ...proposed(), status: 'dispatched' } })!;
    expect(twice.toolCalls).toBe(1);
    expect(twice.lastSeq).toBe(7);
  });

  it('given a committed passage, when a revision of it is committed, then the Run still counts one passage', () => {
    const text = 'a passage';
    const commit = (version: number, seq: number) =>
      stored(
        makeEvent(
          'passage.committed',
          c,
          `p0/${version}`,
          { passageId: 'p0', index: 0, version, text, sourceTurn: 1, sha256: sha256Hex(text) },
          at(9),
        ),
        seq,
      );
    const first = evolveRun(admittedRun(), commit(1, 3), { passageBefore: null })!;
    const passage = evolvePassage(null, commit(1, 3))!;
    const second = evolveRun(first, commit(2, 4), { passageBefore: passage })!;
    expect([first.passages, second.passages]).toEqual([1, 1]);
  });

  it('given a running Run, when execution finishes, then it is finishing; a late tool receipt does not move it back to running', () => {
    const finishing = evolveRun(
      { ...admittedRun(), status: 'running' },
      stored(makeEvent('run.execution.finished', c, 'f', { reason: 'deadline', detail: '', answerTurn: null }, at(8)), 9),
    )!;
    expect(finishing.status).toBe('finishing');
    const late = evolveRun(
      finishing,
      stored(
        makeEvent('tool.call.receipt', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings', status: 'unknown', durationMs: 30000 }, at(9)),
        10,
      ),
    )!;
    expect(late.status).toBe('finishing');
  });

  it('given a Run, when it settles, then status, outcome, reason and settledAt come from the settlement; a second settlement changes nothing but the checkpoint', () => {
    const settle = (outcome: 'completed' | 'failed', seq: number, t: number) =>
      stored(
        makeEvent(
          'run.settled',
          c,
          `s${seq}`,
          {
            outcome,
            reason: `r${seq}`,
            passageIds: [],
            receipts: [],
            usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
          },
          at(t),
        ),
        seq,
      );
    const settled = evolveRun(admittedRun(), settle('completed', 11, 11))!;
    expect(settled).toMatchObject({ status: 'settled', outcome: 'completed', reason: 'r11', settledAt: '2026-11-30T10:00:11.000Z', lastSeq: 11 });
    expect(evolveRun(settled, settle('failed', 12, 12))).toEqual({ ...settled, lastSeq: 12 });
  });

  it('given the whole research Run in order, then the Run row is settled with its counts', () => {
    const events = storedInOrder(researchRunEvents(runId));
    let run: RunRow | null = null;
    const toolCalls = new Map<string, ToolCallRow | null>();
    const passages = new Map<string, PassageRow | null>();
    for (const s of events) {
      const keys = touchedKeys(s);
      const toolCallBefore = keys.toolCallId ? (toolCalls.get(keys.toolCallId) ?? null) : null;
      const passageBefore = keys.passageId ? (passages.get(keys.passageId) ?? null) : null;
      run = evolveRun(run, s, { toolCallBefore, passageBefore });
      if (keys.toolCallId) toolCalls.set(keys.toolCallId, evolveToolCall(toolCallBefore, s));
      if (keys.passageId) passages.set(keys.passageId, evolvePassage(passageBefore, s));
    }
    expect(run).toMatchObject({ ...researchRunSettled, lastSeq: events.length });
  });

  it('given a whole Run, then its clocks come from event times: queue time to the first request, execution time to the finish, the last progress (K7)', () => {
    let run: RunRow | null = null;
    researchRunEvents(runId).forEach((e, i) => (run = evolveRun(run, stored(e, i + 1))));
    expect(run).toMatchObject({
      startedAt: '2026-11-30T10:00:01.000Z',
      queuedMs: 1000,
      executionEndedAt: '2026-11-30T10:00:08.000Z',
      executingMs: 7000,
      // the answer turn's text (10:00:08); the passages committed after it are publication's work, not the Run's progress
      lastProgressAt: '2026-11-30T10:00:08.000Z',
      deadlineAt: '2026-11-30T10:15:00.000Z',
      maxModelRequests: 8,
      maxToolCalls: 16,
    });
  });

  it('given lease grants, a request and empty or cut turns only, then the last progress stays at the admission; a fence ends the execution clock', () => {
    const events: RunEvent[] = [
      admittedEvent(runId),
      makeEvent('lease.granted', c, 'lease/1', { epoch: 1, holder: { service: 'runtime', instance: 'i' }, ttlMs: 1000 }, at(2)),
      makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(3)),
      makeEvent('model.turn.completed', c, 1, { turn: 1, content: '', toolCalls: [], finishReason: 'stop', usage: null }, at(4)),
      makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'm' }, at(5)),
      makeEvent('model.turn.completed', c, 2, { turn: 2, content: 'cut', toolCalls: [], finishReason: 'length', usage: null }, at(6)),
      makeEvent('lease.granted', c, 'lease/2', { epoch: 2, holder: { service: 'runtime', instance: 'i' }, ttlMs: 1000 }, at(7)),
      makeEvent(
        'run.fenced',
        c,
        'fence/2/runtime',
        { fencedSubject: 'runtime', epoch: 2, holder: null, reason: 'no-progress', detail: 'd', uncertain: [] },
        at(9),
      ),
    ];
    let run: RunRow | null = null;
    events.forEach((e, i) => (run = evolveRun(run, stored(e, i + 1))));
    expect(run).toMatchObject({
      startedAt: '2026-11-30T10:00:02.000Z',
      queuedMs: 2000,
      executionEndedAt: '2026-11-30T10:00:09.000Z',
      executingMs: 7000,
      lastProgressAt: '2026-11-30T10:00:00.000Z',
    });
  });

  it("given text still streaming inside one long paragraph (model.output.progress), then the last progress and the turn's first text follow it (K7)", () => {
    const events: RunEvent[] = [
      admittedEvent(runId),
      makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)),
      makeEvent('model.output.progress', c, '1/progress/40', { turn: 1, characters: 40, sha256: 'a'.repeat(64) }, at(3)),
      makeEvent('model.output.progress', c, '1/progress/90', { turn: 1, characters: 90, sha256: 'b'.repeat(64) }, at(5)),
    ];
    let run: RunRow | null = null;
    events.forEach((e, i) => (run = evolveRun(run, stored(e, i + 1))));
    expect(run).toMatchObject({ lastProgressAt: '2026-11-30T10:00:05.000Z' });
    const turn = events.slice(1).reduce<ModelTurnRow | null>((row, e, i) => evolveModelTurn(row, stored(e, i + 2)), null);
    expect(turn).toMatchObject({ status: 'requested', firstTextAt: '2026-11-30T10:00:03.000Z', lastSeq: 4 });
  });
});

describe('messages rule', () => {
  it('given no row, when run.admitted, then the message row records the admitted message', () => {
    const event = admittedEvent(runId);
    expect(evolveMessage(null, stored(event, 3))).toEqual({
      messageId: `msg-${runId}`,
      conversationId: c.conversationId,
      clientMessageId: `client-${runId}`,
      content: 'Compare the holdings of fund A and fund B',
      contentSha256: sha256Hex('Compare the holdings of fund A and fund B'),
      runId,
      admittedAt: '2026-11-30T10:00:00.000Z',
      lastSeq: 3,
    });
  });

  it('given a message row, when another admission or any other event arrives, then the row is unchanged', () => {
    const row = evolveMessage(null, stored(admittedEvent(runId), 3))!;
    expect(evolveMessage(row, stored(admittedEvent(runId, 'other text'), 9))).toBe(row);
    expect(evolveMessage(row, stored(makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)), 10))).toBe(row);
  });
});

describe('passages rule', () => {
  const commit = (version: number, text: string, seq: number, t: number) =>
    stored(
      makeEvent('passage.committed', c, `p0/${version}`, { passageId: 'p0', index: 0, version, text, sourceTurn: 2, sha256: sha256Hex(text) }, at(t)),
      seq,
    );

  it('given no row, when a passage is committed, then the row holds its text, hash, version and commit time', () => {
    expect(evolvePassage(null, commit(1, 'first', 4, 9))).toEqual({
      runId,
      passageId: 'p0',
      index: 0,
      version: 1,
      text: 'first',
      sha256: sha256Hex('first'),
      committedAt: '2026-11-30T10:00:09.000Z',
      lastSeq: 4,
    });
  });

  it('given version 1, when version 2 is committed, then the row holds version 2; an older version after it changes nothing', () => {
    const v1 = evolvePassage(null, commit(1, 'first', 4, 9));
    const v2 = evolvePassage(v1, commit(2, 'second', 5, 10))!;
    expect(v2).toMatchObject({ version: 2, text: 'second', committedAt: '2026-11-30T10:00:10.000Z', lastSeq: 5 });
    expect(evolvePassage(v2, commit(1, 'first', 6, 11))).toBe(v2);
  });
});

describe('tool_calls rule', () => {
  const receipt = (data: Partial<Parameters<typeof makeEvent<'tool.call.receipt'>>[3]>, seq: number) =>
    stored(
      makeEvent('tool.call.receipt', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings', status: 'succeeded', durationMs: 5, ...data }, at(4)),
      seq,
    );

  it('given no row, when a tool call is proposed, then it is proposed with turn, name, arguments and proposal time', () => {
    expect(proposed(5)).toEqual({
      runId,
      toolCallId: 'call_1',
      turn: 1,
      name: 'get_holdings',
      argumentsText: '{"fund":"A"}',
      status: 'proposed',
      proposedAt: '2026-11-30T10:00:02.000Z',
      ...columns(
        null,
        'errorCode',
        'errorMessage',
        'resultSha256',
        'dispatchedAt',
        'receiptAt',
        'lateStatus',
        'lateObservedAt',
        'reconciledOutcome',
        'reconciledBy',
        'reconciledAt',
      ),
      lastSeq: 5,
    });
  });

  it('given a proposed call, when it is dispatched, then it is dispatched', () => {
    const next = evolveToolCall(
      proposed(),
      stored(makeEvent('tool.call.dispatched', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings' }, at(3)), 6),
    );
    expect(next).toMatchObject({
      status: 'dispatched',
      lastSeq: 6,
      proposedAt: '2026-11-30T10:00:02.000Z',
      dispatchedAt: '2026-11-30T10:00:03.000Z',
    });
  });

  it('given a dispatched call, when a succeeded receipt with a stored result arrives, then the status and result hash are recorded', () => {
    const next = evolveToolCall(
      { ...proposed(), status: 'dispatched' },
      receipt({ resultRef: { bucket: 'b', key: 'k', sha256: 'c'.repeat(64), bytes: 10 } }, 7),
    );
    expect(next).toMatchObject({
      status: 'succeeded',
      resultSha256: 'c'.repeat(64),
      errorCode: null,
      receiptAt: '2026-11-30T10:00:04.000Z',
      lastSeq: 7,
    });
  });

  it('given a dispatched call, when a succeeded receipt with an inline result arrives, then the hash is of its JSON text', () => {
    const next = evolveToolCall({ ...proposed(), status: 'dispatched' }, receipt({ result: { funds: ['A', 'B'] } }, 7));
    expect(next?.resultSha256).toBe(sha256Hex('{"funds":["A","B"]}'));
  });

  it('given a dispatched call, when a failed receipt arrives, then the error code and message are recorded (K5, K8)', () => {
    const next = evolveToolCall(
      { ...proposed(), status: 'dispatched' },
      receipt({ status: 'failed', error: { code: 'timeout', message: 'took too long' } }, 8),
    );
    expect(next).toMatchObject({ status: 'failed', errorCode: 'timeout', errorMessage: 'took too long', resultSha256: null });
  });

  it('given an unknown outcome, when the real outcome is observed late, then it is kept beside the receipt, which stays unknown (K5)', () => {
    const unknown = evolveToolCall({ ...proposed(), status: 'dispatched' }, receipt({ status: 'unknown' }, 8))!;
    const late = (status: 'succeeded' | 'failed', seq: number, t: number) =>
      stored(
        makeEvent(
          'tool.call.late_observed',
          c,
          `call_1/${seq}`,
          { toolCallId: 'call_1', name: 'get_holdings', status, durationMs: 10, executor: 'tools-1' },
          at(t),
        ),
        seq,
      );
    const next = evolveToolCall(unknown, late('succeeded', 9, 6))!;
    expect(next).toMatchObject({ status: 'unknown', lateStatus: 'succeeded', lateObservedAt: '2026-11-30T10:00:06.000Z', lastSeq: 9 });
    // a second observation keeps the first
    expect(evolveToolCall(next, late('failed', 10, 7))).toMatchObject({ status: 'unknown', lateStatus: 'succeeded', lastSeq: 10 });
  });

  it('given an unknown outcome, when an operator reconciles it, then outcome, operator and time are kept beside the receipt (K5)', () => {
    const unknown = evolveToolCall({ ...proposed(), status: 'dispatched' }, receipt({ status: 'unknown' }, 8))!;
    const reconciled = stored(
      makeEvent(
        'tool.call.reconciled',
        c,
        'call_1',
        {
          toolCallId: 'call_1',
          name: 'get_holdings',
          outcome: 'not_executed',
          evidence: 'no row at the destination',
          operator: 'ops@x',
          requestId: 'r1',
        },
        at(9),
      ),
      11,
    );
    expect(evolveToolCall(unknown, reconciled)).toMatchObject({
      status: 'unknown',
      reconciledOutcome: 'not_executed',
      reconciledBy: 'ops@x',
      reconciledAt: '2026-11-30T10:00:09.000Z',
      lastSeq: 11,
    });
    expect(touchedKeys(reconciled)).toEqual({ toolCallId: 'call_1' });
  });

  it('given an unknown outcome, when a later dispatch is redelivered, then the call stays unknown (never moves backwards)', () => {
    const unknown = evolveToolCall({ ...proposed(), status: 'dispatched' }, receipt({ status: 'unknown' }, 8))!;
    const next = evolveToolCall(
      unknown,
      stored(makeEvent('tool.call.dispatched', c, 'call_1', { toolCallId: 'call_1', name: 'get_holdings' }, at(5)), 9),
    );
    expect(next).toMatchObject({ status: 'unknown', lastSeq: 9 });
  });

  it('given no proposal, when a denied receipt arrives, then a row exists with the denial and no turn or arguments', () => {
    expect(evolveToolCall(null, receipt({ status: 'denied', error: { code: 'not_granted', message: 'no' } }, 3))).toMatchObject({
      status: 'denied',
      turn: null,
      argumentsText: null,
      proposedAt: null,
      errorCode: 'not_granted',
    });
  });
});

describe('touchedKeys', () => {
  it('names the message, tool call or passage an event affects', () => {
    const [admitted, , , proposal] = researchRunEvents(runId);
    expect(touchedKeys(stored(admitted!, 1))).toEqual({ messageId: `msg-${runId}` });
    expect(touchedKeys(stored(proposal!, 4))).toEqual({ toolCallId: 'call_1' });
    expect(touchedKeys(stored(makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)), 2))).toEqual({ turn: 1 });
    expect(
      touchedKeys(stored(makeEvent('lease.granted', c, 'lease/1', { epoch: 1, holder: { service: 'r', instance: 'i' }, ttlMs: 1 }, at(1)), 2)),
    ).toEqual({});
  });
});

describe('model_turns rule (K7, K9)', () => {
  const apply = (events: RunEvent[]): ModelTurnRow | null =>
    events.reduce<ModelTurnRow | null>((row, e, i) => evolveModelTurn(row, stored(e, i + 2)), null);

  it('given a turn requested, streaming text, then completed with usage, then its clocks are requested -> first text -> end and the usage as reported', () => {
    expect(
      apply([
        makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)),
        makeEvent('model.output.paragraph', c, '1/0', { turn: 1, index: 0, text: 'One.', sha256: 'a'.repeat(64) }, at(3)),
        makeEvent('model.output.paragraph', c, '1/1', { turn: 1, index: 1, text: 'Two.', sha256: 'b'.repeat(64) }, at(4)),
        makeEvent(
          'model.turn.completed',
          c,
          1,
          { turn: 1, content: 'One.\n\nTwo.', toolCalls: [], finishReason: 'stop', usage: { promptTokens: 7, completionTokens: 3, totalTokens: 10 } },
          at(5),
        ),
      ]),
    ).toEqual({
      runId,
      turn: 1,
      status: 'completed',
      requestedAt: '2026-11-30T10:00:01.000Z',
      firstTextAt: '2026-11-30T10:00:03.000Z',
      endedAt: '2026-11-30T10:00:05.000Z',
      durationMs: 4000,
      finishReason: 'stop',
      contentChars: 10,
      toolCalls: 0,
      promptTokens: 7,
      completionTokens: 3,
      errorKind: null,
      lastSeq: 5,
    });
  });

  it('given a turn without usage, or failed, then its tokens are null (unknown), never 0', () => {
    const noUsage = apply([
      makeEvent('model.turn.requested', c, 2, { turn: 2, model: 'm' }, at(1)),
      makeEvent('model.turn.completed', c, 2, { turn: 2, content: '', toolCalls: [], finishReason: 'stop', usage: null }, at(2)),
    ]);
    expect(noUsage).toMatchObject({ status: 'completed', promptTokens: null, completionTokens: null, firstTextAt: null, durationMs: 1000 });
    const failed = apply([
      makeEvent('model.turn.requested', c, 3, { turn: 3, model: 'm' }, at(1)),
      makeEvent('model.turn.failed', c, 3, { turn: 3, error: { kind: 'timeout', status: null, message: 'slow' } }, at(31)),
    ]);
    expect(failed).toMatchObject({
      status: 'failed',
      errorKind: 'timeout',
      promptTokens: null,
      durationMs: 30_000,
      endedAt: '2026-11-30T10:00:31.000Z',
    });
  });
});
