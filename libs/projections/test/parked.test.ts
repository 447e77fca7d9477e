/** The runs rule for parked Runs (K10, K11): awaiting_human / awaiting_child while parked, running again after the wake. */
import { describe, expect, it } from '@jest/globals';
import { makeEvent, waitIdOf, type RunEvent, type StoredEvent } from '@runplane/contracts';
import { evolveRun, type RunRow } from '@runplane/projections';
import { admittedEvent, at, ctxOf } from './fixtures.js';

const runId = 'run-parked';
const c = ctxOf(runId);
const stored = (event: RunEvent, seq: number): StoredEvent => ({ seq, subject: `t.run.${runId}.${event.owner}`, event });
const waitId = waitIdOf(runId, 'q');

describe('runs rule: parked statuses', () => {
  it('wait.opened parks the row awaiting_human, a receipt of the same batch keeps it there, wait.answered makes it running again', () => {
    let row: RunRow = evolveRun(null, stored(admittedEvent(runId), 1))!;
    row = evolveRun(row, stored(makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'm' }, at(1)), 2))!;
    row = evolveRun(
      row,
      stored(
        makeEvent('wait.opened', c, waitId, { waitId, toolCallId: 'q', turn: 1, question: 'Which?', expiresAt: at(100).toISOString() }, at(2)),
        3,
      ),
    )!;
    expect(row.status).toBe('awaiting_human');
    row = evolveRun(
      row,
      stored(
        makeEvent('tool.call.receipt', c, 'a', { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: {}, durationMs: 1 }, at(3)),
        4,
      ),
    )!;
    expect(row.status).toBe('awaiting_human');
    row = evolveRun(
      row,
      stored(makeEvent('wait.answered', c, waitId, { waitId, toolCallId: 'q', answer: 'A', answeredBy: null, requestId: 'r' }, at(4)), 5),
    )!;
    expect(row).toMatchObject({ status: 'running', lastSeq: 5 });
  });

  it('child.run.requested parks the row awaiting_child until child.run.settled', () => {
    let row: RunRow = evolveRun(null, stored(admittedEvent(runId), 1))!;
    const child = {
      childRunId: 'kid',
      clientMessageId: 'child.x.s',
      toolCallId: 's',
      turn: 1,
      question: 'sub',
      grant: { tools: [], model: 'm' },
      limits: { maxModelRequests: 1, maxToolCalls: 0, deadlineAt: at(100).toISOString() },
    };
    row = evolveRun(row, stored(makeEvent('child.run.requested', c, 'kid', child, at(1)), 2))!;
    expect(row.status).toBe('awaiting_child');
    row = evolveRun(
      row,
      stored(
        makeEvent(
          'child.run.settled',
          c,
          'child/kid',
          { childRunId: 'kid', toolCallId: 's', outcome: 'completed', reason: 'ok', answer: 'x' },
          at(2),
        ),
        3,
      ),
    )!;
    expect(row.status).toBe('running');
  });
});
