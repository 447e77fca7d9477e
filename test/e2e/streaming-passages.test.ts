/**
 * Passages committed while the answer streams (K9, K10), against the real processes, NATS
 * JetStream and PostgreSQL: the scripted model streams a multi-paragraph answer and pauses after
 * each paragraph (`paragraphDelayMs`). A paragraph is committed as a passage before the turn ends;
 * a runtime killed with SIGKILL mid-answer leaves a Run settled `interrupted` whose committed
 * passage is still served by the answer endpoint and projected into PostgreSQL; an answer that
 * streams to its end has exactly one passage per paragraph, each committed once, version 1.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import pg from 'pg';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { eventually, settledProjection, startTestStack, type TestStack } from '../support/stack.js';

const LEASE_TTL_MS = 1_500;
let t: TestStack;

beforeAll(async () => {
  t = await startTestStack('stream', {
    RUNPLANE_LEASE_TTL_MS: String(LEASE_TTL_MS),
    RUNPLANE_RECOVERY_SWEEP_MS: '100',
    RUNPLANE_ACK_WAIT_MS: '2000',
  });
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

const ofType = <T extends RunEvent['type']>(events: StoredEvent[], type: T) =>
  events.filter((e) => e.event.type === type) as (StoredEvent & { event: Extract<RunEvent, { type: T }> })[];

const PARAGRAPHS = [
  'DIA holds the thirty stocks of the Dow Jones Industrial Average, weighted by price.',
  'Its largest positions are the highest-priced shares, not the largest companies.',
  'Coverage: only the files in the data folder were read; nothing else is claimed.',
];

/** Binds a one-turn answer of `paragraphs` to `key`, pausing `paragraphDelayMs` after each finished paragraph. */
async function scriptAnswer(key: string, paragraphDelayMs: number): Promise<void> {
  await t.setScenario({ steps: [{ reply: { content: PARAGRAPHS.join('\n\n') }, paragraphDelayMs }], then: 'error' }, key);
}

/** Projected passages of a Run, from PostgreSQL. */
async function projectedPassages(runId: string): Promise<{ index: number; version: number; text: string }[]> {
  const db = new pg.Client({ connectionString: t.env.DATABASE_URL });
  await db.connect();
  try {
    const res = await db.query<{ index: number; version: number; text: string }>(
      'select "index", version, text from passages where run_id = $1 order by "index"',
      [runId],
    );
    return res.rows;
  } finally {
    await db.end();
  }
}

describe('passages committed while the answer streams', () => {
  it('paragraph 1 is committed before the turn ends; after kill -9 of the runtime the Run settles interrupted and the passage is still served and projected', async () => {
    const key = `stream-kill-${t.tag}`;
    await scriptAnswer(key, 30_000);
    const { body } = await t.client.postMessage('conv-stream', { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    const runId = body.runId;
    const committed = await eventually(
      async () => {
        const events = await t.log.readRun(runId);
        return ofType(events, 'passage.committed').length > 0 ? events : null;
      },
      30_000,
      'the first passage',
    );
    // committed while the turn is still streaming: no turn outcome, no finish, no settlement yet
    expect(ofType(committed, 'model.turn.completed')).toHaveLength(0);
    expect(ofType(committed, 'run.execution.finished')).toHaveLength(0);
    expect(ofType(committed, 'run.settled')).toHaveLength(0);
    const passages = ofType(committed, 'passage.committed');
    expect(passages.map((p) => p.event.data)).toEqual([expect.objectContaining({ index: 0, version: 1, sourceTurn: 1, text: PARAGRAPHS[0] })]);
    const paragraphs = ofType(committed, 'model.output.paragraph');
    expect(paragraphs.map((p) => [p.event.data.index, p.event.writer?.epoch])).toEqual([[0, 1]]);
    expect(passages[0]!.seq).toBeGreaterThan(paragraphs[0]!.seq);
    const live = await t.client.getAnswer(runId);
    expect(live).toMatchObject({ complete: false, outcome: null, text: PARAGRAPHS[0], passages: [{ index: 0, version: 1, sourceTurn: 1 }] });

    const runtime = t.stack.services.get('runtime')!;
    const exited = new Promise((r) => runtime.child.once('exit', r));
    runtime.child.kill('SIGKILL');
    await exited;
    const events = await t.waitForSettlement(runId, 30_000);
    const settled = ofType(events, 'run.settled').map((e) => e.event.data);
    expect(settled).toHaveLength(1);
    expect(settled[0]).toMatchObject({ outcome: 'interrupted', passageIds: [passages[0]!.event.data.passageId] });
    expect(settled[0]!.reason).toMatch(/model turn 1/);
    // nothing of the turn was lost, nothing committed twice
    expect(ofType(events, 'passage.committed')).toHaveLength(1);
    const answer = await t.client.getAnswer(runId);
    expect(answer).toMatchObject({ complete: false, outcome: 'interrupted', text: PARAGRAPHS[0] });
    const view = await settledProjection(t, runId);
    expect(view).toMatchObject({ outcome: 'interrupted', passages: 1 });
    expect(await projectedPassages(runId)).toEqual([{ index: 0, version: 1, text: PARAGRAPHS[0] }]);
    await t.stack.startService('runtime');
  }, 120_000);

  it('a three-paragraph answer streamed with pauses ends with exactly three passages, each committed once at version 1, and answer.published', async () => {
    const key = `stream-whole-${t.tag}`;
    await scriptAnswer(key, 400);
    const { body } = await t.client.postMessage('conv-stream', { clientMessageId: key, content: `[${key}] What does DIA hold?` });
    // an observer asking for live deltas gets the runtime's (publication shows only those published on the delta subject itself)
    const deltas: { turn: number; text: string }[] = [];
    const observed = t.client.streamEvents(body.runId, { deltas: true, onEvent: () => undefined, onDelta: (d) => deltas.push(d) });
    const events = await t.waitForSettlement(body.runId, 60_000);
    await observed;
    expect(deltas.length).toBeGreaterThan(0);
    for (const d of deltas) expect(d.turn === 1 && PARAGRAPHS.join('\n\n').includes(d.text)).toBe(true);
    expect(ofType(events, 'run.settled')[0]!.event.data.outcome).toBe('completed');
    const passages = ofType(events, 'passage.committed');
    expect(passages.map((p) => [p.event.data.index, p.event.data.version, p.event.data.text])).toEqual(PARAGRAPHS.map((text, i) => [i, 1, text]));
    expect(new Set(passages.map((p) => p.event.data.passageId)).size).toBe(3);
    const ids = events.map((e) => e.event.eventId);
    expect(new Set(ids).size).toBe(ids.length);
    // the first two were recorded and committed while the turn streamed; the last one once it ended
    const completedSeq = ofType(events, 'model.turn.completed')[0]!.seq;
    expect(ofType(events, 'model.output.paragraph').map((p) => p.event.data.index)).toEqual([0, 1]);
    expect(passages.filter((p) => p.seq < completedSeq).map((p) => p.event.data.index)).toEqual([0, 1]);
    const published = ofType(events, 'answer.published');
    expect(published).toHaveLength(1);
    expect(published[0]!.event.data.passageIds).toEqual(passages.map((p) => p.event.data.passageId));
    const answer = await t.client.getAnswer(body.runId);
    expect(answer).toMatchObject({ complete: true, outcome: 'completed', text: PARAGRAPHS.join('\n\n') });
    const timeline = events.map((e) => e.event.type);
    process.stdout.write(
      `streaming passages: passage 0 committed at seq ${passages[0]!.seq}, turn recorded at seq ${completedSeq}; ${timeline.length} events: ${timeline.join(', ')}\n`,
    );
  }, 90_000);
});
