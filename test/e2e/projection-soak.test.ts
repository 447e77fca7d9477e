/**
 * A short soak of the projection (K11), every service as its own process on the real JetStream
 * and PostgreSQL: many concurrent Runs whose runtime streams paragraphs while the publication
 * commits passages and the tools answer (appends on several subjects of one Run close together,
 * what the projector's per-Run reads race with). It ends as `runplane projections rebuild` does:
 * the log replayed into a fresh database must equal the live projection, and the projector
 * must have seen no gap.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { PROJECTOR_DURABLE } from '@runplane/app-projector';
import { durableNamesOf } from '@runplane/eventlog';
import { dropDatabase } from '@runplane/devstack';
import { rebuildProjections } from '@runplane/projections';
import { eventually, startTestStack, type TestStack } from '../support/stack.js';

/** Runs in the soak, and how many are admitted at once. */
const RUNS = 96;
const WAVE = 12;

let t: TestStack;
beforeAll(async () => {
  t = await startTestStack('psoak');
  t.log.onInvalid = () => undefined;
}, 120_000);
afterAll(async () => {
  await t?.stop();
});

/** A Run's script: two tool calls, then an answer of five paragraphs streamed with pauses between them. */
function steps(key: string): unknown[] {
  const paragraphs = Array.from({ length: 5 }, (_, i) => `Paragraph ${i + 1} of ${key}: the funds were compared on their holdings.`);
  return [
    // two calls: their dispatches and receipts chain on the tools subject within one projector batch (the second
    // one fails: list_funds takes no arguments)
    {
      reply: {
        content: '',
        toolCalls: [
          { name: 'list_funds', arguments: {} },
          { name: 'list_funds', arguments: { note: key } },
        ],
      },
      chunkDelayMs: 2,
    },
    { reply: { content: paragraphs.join('\n\n') }, chunkDelayMs: 2, paragraphDelayMs: 30 },
  ];
}

/** The projector's anomaly count of `kind` on its /metrics (0 when the series is absent). */
async function projectorAnomalies(kind: string): Promise<number> {
  const res = await fetch(`${t.stack.services.get('projector')!.url}/metrics`);
  expect(res.status).toBe(200);
  const line = (await res.text()).split('\n').find((l) => l.startsWith('runplane_bus_anomalies_total{') && l.includes(`kind="${kind}"`));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('projection soak (K11)', () => {
  it(`given ${RUNS} concurrent Runs through the whole stack, then every one settles, the live projection has every event, and a rebuild from the log is identical`, async () => {
    const runIds: string[] = [];
    for (let wave = 0; wave < RUNS / WAVE; wave++) {
      const admitted = await Promise.all(
        Array.from({ length: WAVE }, async (_, i) => {
          const key = `soak-${wave}-${i}`;
          await t.setScenario({ steps: steps(key), then: 'error' }, key);
          const res = await t.client.postMessage(`conv-${key}`, { clientMessageId: key, content: `[${key}] compare the funds` });
          expect(res.status).toBe(201);
          return res.body.runId;
        }),
      );
      runIds.push(...admitted);
    }
    const settled = await Promise.all(runIds.map((runId) => t.waitForSettlement(runId, 180_000)));
    const lastSeqs = new Map(runIds.map((runId, i) => [runId, settled[i]!.at(-1)!.seq]));
    const outcomeOf = new Map(
      runIds.map((runId, i) => {
        const settlement = settled[i]!.find((e) => e.event.type === 'run.settled')!.event;
        return [runId, settlement.type === 'run.settled' ? settlement.data.outcome : null];
      }),
    );
    // the soak is about the projection: a Run fenced on a loaded machine (lease renewals late, a
    // separate part of the stress work) is projected like any other, but most must have run to the end
    // (ran to the end = its answer committed; each Run's second call, `list_funds` with an argument it does not take, fails,
    // so a Run that answered settles partial listing that call, K9)
    const answered = settled.filter((events) =>
      events.some((e) => e.event.type === 'run.settled' && e.event.data.reason.startsWith('answer committed')),
    );
    expect(answered.length).toBeGreaterThan(RUNS / 2);

    // the projector caught up: its consumer has nothing pending, and every Run's view is at its last event
    const durables = durableNamesOf(t.log.space, PROJECTOR_DURABLE);
    await eventually(
      async () => {
        const infos = await Promise.all(durables.map((d) => t.log.jsm.consumers.info(t.log.space.stream, d)));
        return infos.every((info) => info.num_pending === 0 && info.num_ack_pending === 0) ? true : null;
      },
      120_000,
      'the projector to acknowledge the whole log',
    );
    for (const runId of runIds) {
      const view = await eventually(
        async () => {
          const v = await t.client.getRun(runId);
          return v?.lastSeq === lastSeqs.get(runId) ? v : null;
        },
        30_000,
        `the projection of ${runId} at its last event`,
      );
      expect(view).toMatchObject({ status: 'settled', outcome: outcomeOf.get(runId) });
      if (view.outcome === 'completed') expect(view).toMatchObject({ unknownUsageTurns: 0, toolCalls: 2, passages: 5 });
    }

    const target = `rp_${t.tag}_rebuild`;
    try {
      const rebuilt = await rebuildProjections({ log: t.log, databaseUrl: t.env.DATABASE_URL!, targetDatabase: target });
      expect(rebuilt.differences).toEqual([]);
      expect(rebuilt.identicalToLive).toBe(true);
      expect(rebuilt.lastSeq).toBe(await t.log.lastSeq());
    } finally {
      await dropDatabase(t.env.DATABASE_URL!.replace(/\/[^/]+$/, `/${target}`));
    }
    // no hole had to be repaired: the reads were applied only as far as they were complete
    expect(await projectorAnomalies('projection-gap')).toBe(0);
  }, 420_000);
});
