import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import { OrphanEventError, applyStoredEvent, applyStoredEvents, dropDatabase, dumpProjectionRows, type ApplyResult } from '@runplane/projections';
import {
  adminUrl,
  admittedEvent,
  at,
  copyOfMigratedDatabase,
  ctxOf,
  failingRunEvents,
  interleave,
  researchRunEvents,
  storedInOrder,
  uniqueTag,
} from './fixtures.js';

const tag = uniqueTag();
const orms: MikroORM[] = [];
const databases: string[] = [];

/** A fresh, migrated projection database of its own (rows of equal Runs can then be compared whole): a copy of the file's migrated template. */
async function freshOrm(name: string): Promise<MikroORM> {
  const db = `rp_test_batch_${tag}_${name}`;
  databases.push(db); // dropped after the file, also when making it failed half-way
  const { orm } = await copyOfMigratedDatabase(db);
  orms.push(orm);
  return orm;
}

afterAll(async () => {
  await Promise.all(orms.map((orm) => orm.close()));
  // together: each drop waits for a checkpoint, which the drops made at once share
  await Promise.all(databases.map((db) => dropDatabase(adminUrl, db)));
});

/** Deterministic pseudo-random numbers in [0, 1) (mulberry32), so a failing split can be replayed. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The deliveries of a live consumer: every event once in stream order, with redeliveries of
 * earlier events of the same Run mixed in (about one in three events is followed by one).
 */
function withRedeliveries(stored: StoredEvent[], next: () => number): StoredEvent[] {
  const out: StoredEvent[] = [];
  stored.forEach((s, i) => {
    out.push(s);
    if (next() < 0.35) {
      const earlier = stored.slice(0, i + 1).filter((e) => e.event.runId === s.event.runId);
      out.push(earlier[Math.floor(next() * earlier.length)]!);
    }
  });
  return out;
}

/** Cuts `list` into consecutive batches of 1 to `max` items. */
function randomSplits<T>(list: T[], next: () => number, max = 7): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < list.length;) {
    const n = 1 + Math.floor(next() * max);
    out.push(list.slice(i, i + n));
    i += n;
  }
  return out;
}

const research = `research-${tag}`;
const failing = `failing-${tag}`;
/** Two Runs interleaved in one stream; they share the tool call id `call_1`. */
const stored = storedInOrder(interleave(researchRunEvents(research), failingRunEvents(failing)), 10);

describe('applyStoredEvents (one transaction per batch, same rows as one by one: K11)', () => {
  let reference: MikroORM;
  let referenceResults: ApplyResult[];
  let deliveries: StoredEvent[];

  beforeAll(async () => {
    deliveries = withRedeliveries(stored, random(1));
    reference = await freshOrm('ref');
    referenceResults = [];
    for (const s of deliveries) referenceResults.push(await applyStoredEvent(reference.em, s));
  });

  it('given the deliveries applied one by one, then every event applies once and every redelivery is skipped (the reference)', () => {
    expect(deliveries.length).toBeGreaterThan(stored.length);
    expect(referenceResults.filter((r) => r.status === 'applied').map((r) => r.seq)).toEqual(stored.map((s) => s.seq));
    expect(referenceResults.filter((r) => r.status === 'skipped')).toHaveLength(deliveries.length - stored.length);
  });

  it('given the same deliveries in ONE batch, then the results and every row are identical to one by one', async () => {
    const orm = await freshOrm('one');
    expect(await applyStoredEvents(orm.em, deliveries)).toEqual(referenceResults);
    expect(await dumpProjectionRows(orm)).toEqual(await dumpProjectionRows(reference));
  });

  it.each([2, 3, 4])(
    'given the same deliveries in random batches (seed %i), then the results and every row are identical to one by one',
    async (seed) => {
      const orm = await freshOrm(`split${seed}`);
      const results: ApplyResult[] = [];
      const batches = randomSplits(deliveries, random(seed));
      expect(batches.length).toBeGreaterThan(3);
      for (const batch of batches) results.push(...(await applyStoredEvents(orm.em, batch)));
      expect(results).toEqual(referenceResults);
      expect(await dumpProjectionRows(orm)).toEqual(await dumpProjectionRows(reference));
      // the whole log again, as one batch: nothing left to apply, nothing changes
      const again = await applyStoredEvents(orm.em, stored);
      expect(again.every((r) => r.status === 'skipped')).toBe(true);
      expect(await dumpProjectionRows(orm)).toEqual(await dumpProjectionRows(reference));
    },
  );

  it('given an empty batch, then no results', async () => {
    expect(await applyStoredEvents(reference.em, [])).toEqual([]);
  });

  it('given a batch with an event of a Run that has no row, then OrphanEventError names that event and the whole batch is rolled back', async () => {
    const orm = await freshOrm('orphan');
    const good = storedInOrder(researchRunEvents(`good-${tag}`).slice(0, 4), 1);
    const orphanRun = `orphan-${tag}`;
    const orphan: StoredEvent = {
      seq: 3,
      subject: `t.run.${orphanRun}.runtime`,
      event: makeEvent('model.turn.requested', ctxOf(orphanRun), 1, { turn: 1, model: 'm' }, at(1)),
    };
    const before = await dumpProjectionRows(orm);
    const error = await applyStoredEvents(orm.em, [good[0]!, good[1]!, orphan, good[2]!, good[3]!]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OrphanEventError);
    expect((error as OrphanEventError).stored.seq).toBe(3);
    expect((error as OrphanEventError).stored.event.runId).toBe(orphanRun);
    expect(await dumpProjectionRows(orm)).toEqual(before);
    // without the orphan, the other Run applies
    expect((await applyStoredEvents(orm.em, good)).map((r) => r.status)).toEqual(['applied', 'applied', 'applied', 'applied']);
  });

  it('given two concurrent batches over the same Runs (listed in opposite orders), then each event applies exactly once and the rows equal one by one', async () => {
    const orm = await freshOrm('race');
    for (let round = 0; round < 4; round++) {
      const a = storedInOrder(researchRunEvents(`race-a${round}-${tag}`), 1000 * round + 1);
      const b = storedInOrder(failingRunEvents(`race-b${round}-${tag}`), 1000 * round + 500);
      const cut = 3 + round;
      const first = [...a.slice(0, cut + 4), ...b];
      const second = [...b.slice(0, cut), ...a];
      const [r1, r2] = await Promise.all([applyStoredEvents(orm.em, first), applyStoredEvents(orm.em, second)]);
      const applied = [...r1, ...r2].filter((r) => r.status === 'applied').map((r) => `${r.runId}#${r.seq}`);
      expect(applied.sort()).toEqual([...a, ...b].map((s) => `${s.event.runId}#${s.seq}`).sort());
    }
    const one = await freshOrm('raceref');
    for (let round = 0; round < 4; round++) {
      for (const s of storedInOrder(researchRunEvents(`race-a${round}-${tag}`), 1000 * round + 1)) await applyStoredEvent(one.em, s);
      for (const s of storedInOrder(failingRunEvents(`race-b${round}-${tag}`), 1000 * round + 500)) await applyStoredEvent(one.em, s);
    }
    expect(await dumpProjectionRows(orm)).toEqual(await dumpProjectionRows(one));
  });

  it('given three concurrent deliveries of a Run admission, each in a batch with other Runs, then exactly one applies it', async () => {
    const orm = await freshOrm('admit');
    const runId = `admit-${tag}`;
    const [admitted] = storedInOrder([admittedEvent(runId)], 1);
    const others = [1, 2, 3].map((i) => storedInOrder([admittedEvent(`other${i}-${tag}`)], 10 + i)[0]!);
    const results = await Promise.all(others.map((o, i) => applyStoredEvents(orm.em, i % 2 ? [admitted!, o] : [o, admitted!])));
    expect(
      results
        .flat()
        .filter((r) => r.runId === runId)
        .map((r) => r.status)
        .sort(),
    ).toEqual(['applied', 'skipped', 'skipped']);
    expect((await dumpProjectionRows(orm)).runs).toHaveLength(4);
  });
});
