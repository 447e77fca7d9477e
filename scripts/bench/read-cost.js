// Read cost: `log.readRun(runId)` then `foldRun(runId, events)` for one 30-event Run, cold (a new
// read each time, nothing kept between reads), with N other events in the stream: half written
// before the Run, half interleaved between its events. Each level uses its own stream, deleted
// afterwards.
import { makeEvent, sha256Hex } from '@runplane/contracts';
import { EventLog, runSubject } from '@runplane/eventlog';
import { foldRun } from '@runplane/run-facts';
import { pct } from './stats.js';

const at = (i) => new Date(Date.UTC(2026, 0, 1, 0, 0, i));

/** The 30 events of one Run: admission, 4 tool rounds (5 events each), the answer turn, 4 passages, publication, settlement. */
export function thirtyEventRun(runId) {
  const c = { runId, conversationId: `conv-${runId}`, correlationId: `msg-${runId}`, causationId: null };
  const usage = { promptTokens: 120, completionTokens: 30, totalTokens: 150 };
  const question = 'What does DIA hold?';
  const events = [
    makeEvent(
      'run.admitted',
      c,
      'admission',
      {
        message: { messageId: `msg-${runId}`, clientMessageId: `cm-${runId}`, content: question, contentSha256: sha256Hex(question) },
        grant: { tools: ['list_funds', 'get_holdings', 'compare_holdings', 'fund_metadata'], model: 'runplane-scripted-research' },
        limits: { maxModelRequests: 8, maxToolCalls: 16, deadlineAt: new Date(Date.now() + 900_000).toISOString() },
      },
      at(0),
    ),
  ];
  const receipts = [];
  for (let turn = 1; turn <= 4; turn++) {
    const id = `t${turn}-0-call`;
    const args = JSON.stringify({ fund: 'DIA' });
    events.push(
      makeEvent('model.turn.requested', c, turn, { turn, model: 'runplane-scripted-research' }, at(turn * 5)),
      makeEvent(
        'model.turn.completed',
        c,
        turn,
        { turn, content: '', toolCalls: [{ toolCallId: id, name: 'get_holdings', argumentsText: args }], finishReason: 'tool_calls', usage },
        at(turn * 5 + 1),
      ),
      makeEvent('tool.call.proposed', c, id, { toolCallId: id, name: 'get_holdings', argumentsText: args, turn }, at(turn * 5 + 1)),
      makeEvent('tool.call.dispatched', c, id, { toolCallId: id, name: 'get_holdings' }, at(turn * 5 + 2)),
      makeEvent(
        'tool.call.receipt',
        c,
        id,
        {
          toolCallId: id,
          name: 'get_holdings',
          status: 'succeeded',
          resultRef: { bucket: 'results', key: `${runId}/${id}`, sha256: 'b'.repeat(64), bytes: 2048 },
          durationMs: 3,
        },
        at(turn * 5 + 3),
      ),
    );
    receipts.push({ toolCallId: id, name: 'get_holdings', status: 'succeeded' });
  }
  const passages = [
    'DIA holds 30 securities.',
    'Its weights sum to 100.00%.',
    'Largest holdings: ...',
    'The disclosure date was read from inside the file.',
  ];
  events.push(
    makeEvent('model.turn.requested', c, 5, { turn: 5, model: 'runplane-scripted-research' }, at(30)),
    makeEvent('model.turn.completed', c, 5, { turn: 5, content: passages.join('\n\n'), toolCalls: [], finishReason: 'stop', usage }, at(31)),
    makeEvent('run.execution.finished', c, 'finished', { reason: 'answered', detail: 'turn 5 answered', answerTurn: 5 }, at(31)),
    ...passages.map((text, index) =>
      makeEvent(
        'passage.committed',
        c,
        `p${index}/1`,
        { passageId: `p${index}`, index, version: 1, text, sourceTurn: 5, sha256: sha256Hex(text) },
        at(32),
      ),
    ),
    makeEvent(
      'answer.published',
      c,
      'answer',
      { passageIds: passages.map((_, i) => `p${i}`), characters: passages.join('').length, sourceTurn: 5 },
      at(33),
    ),
    makeEvent(
      'run.settled',
      c,
      'settled',
      {
        outcome: 'completed',
        reason: 'answered',
        passageIds: passages.map((_, i) => `p${i}`),
        receipts,
        usage: { modelRequests: 5, toolCalls: 4, promptTokens: 600, completionTokens: 150 },
      },
      at(34),
    ),
  );
  if (events.length !== 30) throw new Error(`expected 30 events, built ${events.length}`);
  return events;
}

/** Publishes `count` other Runs' events with plain js.publish, pipelined (`window` acks in flight). */
async function publishOthers(log, prefix, count, state, window = 2000) {
  const body = JSON.stringify(
    makeEvent(
      'model.turn.requested',
      { runId: 'other', conversationId: 'c', correlationId: 'm', causationId: null },
      1,
      { turn: 1, model: 'runplane-scripted-research' },
      at(0),
    ),
  );
  let pending = [];
  for (let i = 0; i < count; i++) {
    const n = state.next++;
    // ~30 events per other Run, spread over the Run's owner subjects.
    pending.push(log.js.publish(runSubject(log.space, `other-${Math.floor(n / 30)}`, 'runtime'), body));
    if (pending.length >= window) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
}

/**
 * Writes one level: a stream holding one 30-event Run and `others` other events, half before the
 * Run and half interleaved between its events. The Run is appended as the services' command
 * handler appends (conditional on its subject's last sequence, with read-ahead hints).
 * @returns {Promise<{ others: number, log: EventLog, runId: string, writeS: number }>}
 */
async function writeLevel({ natsUrl, caFile, admin, tag, others }) {
  const prefix = `rc${tag}n${others}`;
  const log = await EventLog.connect({ natsUrl, caFile, ...admin, stream: `RPB_RC_${tag}_${others}`, prefix, name: 'bench-read-cost' });
  const runId = `run-${tag}`;
  const events = thirtyEventRun(runId);
  const state = { next: 0 };
  const t0 = performance.now();
  await publishOthers(log, prefix, Math.floor(others / 2), state);
  const between = Math.floor((others - Math.floor(others / 2)) / events.length);
  const seqsByOwner = new Map();
  for (const [i, e] of events.entries()) {
    const seqs = seqsByOwner.get(e.owner) ?? [];
    const r = await log.append(e, seqs[0] ?? 0, seqs);
    seqsByOwner.set(e.owner, [r.seq, ...seqs]);
    await publishOthers(log, prefix, i === events.length - 1 ? others - state.next : between, state);
  }
  return { others, log, runId, writeS: (performance.now() - t0) / 1000 };
}

/** One cold read + fold (a new readRun from the log, nothing kept), in ms. */
async function timedRead(level) {
  const s = performance.now();
  const stored = await level.log.readRun(level.runId);
  const facts = foldRun(level.runId, stored);
  const ms = performance.now() - s;
  if (stored.length !== 30 || !facts) throw new Error(`read ${stored.length} events of the Run, expected 30`);
  return ms;
}

/**
 * Measures read + fold of one 30-event Run at every level of `levels` (other events in the
 * stream), each level on its own stream (deleted afterwards). The levels are read in turn, round
 * after round, so that the machine's noise and the client's warm-up fall on all of them alike;
 * the first read of each level is reported on its own (the server loads the blocks it needs), and
 * `warmup` rounds are not counted. `admin` (`{ user, pass }`, infra.js startNats): the user the
 * streams are written and read as (the server requires one, and TLS verified against `caFile`).
 * @returns {Promise<{ others: number, streamMessages: number, reads: number, firstMs: number, p50: number, p90: number, writeS: number }[]>}
 */
export async function readCostLevels({ natsUrl, caFile, admin, tag, levels, reads, capMs, warmup = 100 }) {
  const written = [];
  try {
    for (const others of levels) written.push(await writeLevel({ natsUrl, caFile, admin, tag, others }));
    const firstMs = [];
    for (const level of written) firstMs.push(await timedRead(level));
    const times = written.map(() => []);
    const end = performance.now() + capMs;
    for (let round = 0; round < warmup + reads && (round < warmup + 5 || performance.now() < end); round++) {
      for (const [i, level] of written.entries()) {
        const ms = await timedRead(level);
        if (round >= warmup) times[i].push(ms);
      }
    }
    const out = [];
    for (const [i, level] of written.entries()) {
      const info = await level.log.jsm.streams.info(level.log.space.stream);
      out.push({
        others: level.others,
        streamMessages: info.state.messages,
        reads: times[i].length,
        firstMs: firstMs[i],
        p50: pct(times[i], 50),
        p90: pct(times[i], 90),
        writeS: level.writeS,
      });
    }
    return out;
  } finally {
    for (const level of written) {
      await level.log.destroyStream();
      await level.log.close();
    }
  }
}
