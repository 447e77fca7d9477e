/**
 * CPU of the projection write path (`applyStoredEvents`), without the bench: applies the events of
 * W1-like Runs (2 model turns, 2 tool calls, 3 passage commits, 17 events each, in groups of 8
 * interleaved as concurrent Runs land in one stream) to a fresh database, one event per call (a
 * projector at concurrency 1: one flush per event) and then in batches of 8, and prints
 * `process.cpuUsage()` (user + system) per event for each. Needs `npm run build` and PostgreSQL.
 *
 *   node scripts/projection-cpu.js [runs=96] [adminUrl=postgresql://postgres@127.0.0.1:5432/postgres]
 *   PROJECTIONS_MODULE=/path/to/other/libs/projections/dist/index.js node scripts/projection-cpu.js
 */
import { randomBytes } from 'node:crypto';
import { makeEvent, sha256Hex } from '@runplane/contracts';

// PROJECTIONS_MODULE: another build of @runplane/projections to measure (e.g. a checkout's `libs/projections/dist/index.js`)
const { applyStoredEvents, createProjectionOrm, databaseUrlWith, dropDatabase, ensureDatabase, migrateUp } = await import(
  process.env.PROJECTIONS_MODULE ?? '@runplane/projections'
);

const runs = Number(process.argv[2] ?? 96);
const adminUrl = process.argv[3] ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const tag = randomBytes(4).toString('hex');
const base = Date.parse('2026-11-30T10:00:00.000Z');
const at = (s) => new Date(base + s * 1000);

function runEvents(runId) {
  const c = { runId, conversationId: `conv-${runId}`, correlationId: `msg-${runId}`, causationId: null };
  const usage = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
  const content = 'Compare the holdings of fund A and fund B';
  const p0 = 'Fund A holds 42 positions; fund B holds 37.';
  const p0v2 = 'Fund A holds 42 positions; fund B holds 37 (as of 2026-09-30).';
  const p1 = 'The holdings of fund B could not be compared: the comparison tool failed.';
  const calls = [
    { toolCallId: 'call_1', name: 'get_holdings', argumentsText: '{"fund":"A"}' },
    { toolCallId: 'call_2', name: 'compare_holdings', argumentsText: '{"left":"A","right":"B"}' },
  ];
  return [
    makeEvent(
      'run.admitted',
      c,
      'admission',
      {
        message: { messageId: `msg-${runId}`, clientMessageId: `client-${runId}`, content, contentSha256: sha256Hex(content) },
        grant: { tools: ['list_funds', 'get_holdings', 'compare_holdings'], model: 'runplane-scripted-research' },
        limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: at(900).toISOString() },
      },
      at(0),
    ),
    makeEvent('model.turn.requested', c, 1, { turn: 1, model: 'runplane-scripted-research' }, at(1)),
    makeEvent('model.turn.completed', c, 1, { turn: 1, content: '', toolCalls: calls, finishReason: 'tool_calls', usage }, at(2)),
    makeEvent('tool.call.proposed', c, 'call_1', { ...calls[0], turn: 1 }, at(2)),
    makeEvent('tool.call.proposed', c, 'call_2', { ...calls[1], turn: 1 }, at(2)),
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

/** The Runs' events as one stream: groups of 8 Runs interleaved round-robin, stored with back-links. */
function stream(prefix) {
  const out = [];
  const last = new Map();
  for (let g = 0; g < runs; g += 8) {
    const group = Array.from({ length: Math.min(8, runs - g) }, (_, i) => runEvents(`${prefix}-${g + i}`));
    for (let i = 0; group.some((r) => i < r.length); i++)
      for (const r of group) {
        if (i >= r.length) continue;
        const event = r[i];
        const key = `${event.runId}.${event.owner}`;
        const seq = out.length + 1;
        out.push({ seq, subject: `t.run.${key}.0`, event: { ...event, prevSeq: last.get(key) ?? 0 } });
        last.set(key, seq);
      }
  }
  return out;
}

async function measure(name, batchSize) {
  const db = `rp_cpu_${tag}_${name}`;
  await ensureDatabase(adminUrl, db);
  const orm = await createProjectionOrm({ databaseUrl: databaseUrlWith(adminUrl, db) });
  try {
    await migrateUp(orm);
    const events = stream(`${name}-${tag}`);
    // warm-up: a few Runs of their own, not counted
    const warm = stream(`warm-${tag}`).slice(0, 8 * 17);
    for (const s of warm) await applyStoredEvents(orm.em, [s]);
    globalThis.gc?.();
    const t0 = performance.now();
    const c0 = process.cpuUsage();
    for (let i = 0; i < events.length; i += batchSize) {
      const results = await applyStoredEvents(orm.em, events.slice(i, i + batchSize));
      if (results.some((r) => r.status !== 'applied')) throw new Error(`not applied: ${JSON.stringify(results)}`);
    }
    const c = process.cpuUsage(c0);
    const wall = performance.now() - t0;
    const cpuMs = (c.user + c.system) / 1000;
    console.log(
      `${name}: ${events.length} events, batches of ${batchSize}: CPU ${cpuMs.toFixed(0)} ms (${((cpuMs * 1000) / events.length).toFixed(0)} us/event), wall ${wall.toFixed(0)} ms`,
    );
  } finally {
    await orm.close();
    await dropDatabase(adminUrl, db);
  }
}

await measure('single', 1);
await measure('batch8', 8);
