/**
 * K11 "a projection never silently misses a fact": the projector against the real JetStream and
 * PostgreSQL, driven into the interleaving that lost a `model.turn.completed` in the soak, and
 * into a projection that already has a hole.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { StoredEvent } from '@runplane/contracts';
import { EventLog } from '@runplane/eventlog';
import { applyStoredEvents, dropDatabase, getRunView, rebuildProjections } from '@runplane/projections';
import { ProjectorService } from '@runplane/app-projector';
import { adminUrl, appendAll, openMigratedDatabase, researchRunEvents, uniqueTag } from '../../../libs/projections/test/fixtures.js';
import { SHARED_NATS_URL, SUITE_NATS } from '../../../test/support/nats-server.js';

const natsUrl = SHARED_NATS_URL;
const tag = uniqueTag();
const created: string[] = [];
const logs: EventLog[] = [];

/** A log on a stream of its own (the rebuild below replays the whole stream) and a fresh, migrated database. */
async function scratch(name: string): Promise<{ log: EventLog; orm: MikroORM; url: string }> {
  const log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_CONT_${name}_${tag}`, prefix: `tct${name}${tag}` });
  logs.push(log);
  const db = `rp_test_continuity_${name}_${tag}`;
  created.push(db); // dropped after the file, also when opening it failed half-way
  const { orm, url } = await openMigratedDatabase(db);
  return { log, orm, url };
}

/** Rebuilds the projections from the log and compares them with `url` (the `projections rebuild` check). */
async function rebuildCompare(log: EventLog, url: string) {
  const result = await rebuildProjections({ log, databaseUrl: url });
  created.push(result.database);
  return result;
}

/** Captures the service's log lines instead of printing them. */
function captureLogs(service: ProjectorService): { level: string; fields: Record<string, unknown>; message: string }[] {
  const lines: { level: string; fields: Record<string, unknown>; message: string }[] = [];
  const at = (level: string) => (fields: Record<string, unknown>, message: string) => lines.push({ level, fields, message });
  (service as unknown as { logger: object }).logger = { error: at('error'), warn: at('warn'), log: at('log') };
  return lines;
}

const orms: MikroORM[] = [];
beforeAll(() => undefined);
afterAll(async () => {
  await Promise.all(orms.map((orm) => orm.close()));
  // together: each drop waits for a checkpoint, which the drops made at once share
  await Promise.all(created.map((db) => dropDatabase(adminUrl, db)));
  for (const log of logs) {
    await log.destroyStream();
    await log.close();
  }
});

// the two tests share nothing (each its own stream, database and service): they run together
describe('projector continuity (K11)', () => {
  it.concurrent(
    "given the Run's subjects are read while the runtime appends model.turn.completed and publication then appends a later event, then no event is lost and a rebuild is identical",
    async () => {
      const { log, orm, url } = await scratch('race');
      orms.push(orm);
      const runId = `race-${tag}`;
      const events = researchRunEvents(runId);
      // up to turn 2 requested; then turn 2 completed (runtime) and a passage (publication) land during a read
      const prefix = await appendAll(log, events.slice(0, 10));
      const lastOn = (owner: string) => prefix.filter((s) => s.event.owner === owner).at(-1)?.seq ?? 0;

      // the projector's own connection, with the interleaving forced: its read of the runtime subject
      // answers first; the two appends land before its read of the publication subject
      const reader = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: log.space.stream, prefix: log.space.prefix });
      logs.push(reader);
      const direct = reader.jsm.direct;
      const getMessage = direct.getMessage.bind(direct);
      let armed = true;
      let runtimeRead: Promise<unknown> | null = null;
      let raced: StoredEvent[] = [];
      type Query = Parameters<typeof direct.getMessage>[1];
      direct.getMessage = (async (stream: string, query: Query) => {
        const subject = 'last_by_subj' in query ? query.last_by_subj : '';
        if (armed && subject.includes(`.${runId}.runtime.`)) {
          runtimeRead = getMessage(stream, query);
          return runtimeRead;
        }
        if (armed && subject.includes(`.${runId}.publication.`) && runtimeRead) {
          armed = false;
          await runtimeRead;
          const completed = await log.append(events[10]!, lastOn('runtime'));
          const passage = await log.append(events[12]!, 0);
          raced = [completed.stored, passage.stored];
        }
        return getMessage(stream, query);
      }) as typeof direct.getMessage;

      const service = new ProjectorService({ orm } as never, reader);
      const lines = captureLogs(service);
      await service.catchUp(prefix.at(-1)!); // woken by turn 2 requested
      expect(raced).toHaveLength(2);
      // the consumer then delivers the raced events, and the rest of the Run, in stream order
      for (const s of raced) await service.catchUp(s);
      const rest = [events[11]!, ...events.slice(13)];
      const lasts = new Map<string, number>([
        ['runtime', raced[0]!.seq],
        ['publication', raced[1]!.seq],
        ['tools', lastOn('tools')],
      ]);
      for (const event of rest) {
        const { stored } = await log.append(event, lasts.get(event.owner) ?? 0);
        lasts.set(event.owner, stored.seq);
        await service.catchUp(stored);
      }

      const view = await getRunView(orm, runId);
      expect(view).toMatchObject({ status: 'settled', modelRequests: 2, promptTokens: 240, completionTokens: 60, unknownUsageTurns: 0 });
      const result = await rebuildCompare(log, url);
      expect(result.differences).toEqual([]);
      expect(result.identicalToLive).toBe(true);
      // the read left the raced events for their own deliveries: no hole was ever made
      expect(service.stats.gaps).toBe(0);
      expect(lines.filter((l) => l.level === 'error')).toEqual([]);
    },
  );

  it.concurrent(
    'given a projection that already passed over an event (a later one applied first), when that event is delivered, then the gap is logged naming Run, subject and sequences, the Run is re-projected from the log, and a rebuild is identical',
    async () => {
      const { log, orm, url } = await scratch('hole');
      orms.push(orm);
      const runId = `hole-${tag}`;
      const events = researchRunEvents(runId);
      const stored = await appendAll(log, events);
      const byIndex = (i: number) => stored[i]!;
      const completed = byIndex(10); // model.turn.completed of turn 2
      // what the racing read made: everything up to the first passage, but not turn 2's completion
      // (nor the runtime's finish after it), written without the continuity check
      await applyStoredEvents(
        orm.em,
        stored.slice(0, 13).filter((s) => s !== completed && s !== byIndex(11)),
        { checkContinuity: false },
      );
      expect(await getRunView(orm, runId)).toMatchObject({ modelRequests: 2, unknownUsageTurns: 1, lastSeq: byIndex(12).seq });

      const service = new ProjectorService({ orm } as never, log);
      const lines = captureLogs(service);
      const { subject } = completed;
      // the consumer delivers the passed-over event, with its verified back-link
      const delivered = { ...completed, event: (await log.getStored(completed.seq))!.event };
      const results = await service.catchUp(delivered);
      expect(results.map((r) => r.status)).toEqual(stored.map(() => 'applied'));

      const errors = lines.filter((l) => l.level === 'error');
      expect(errors).toHaveLength(1);
      expect(errors[0]!.message).toMatch(/^projection gap/);
      expect(errors[0]!.fields).toMatchObject({
        runId,
        subject,
        gapSeq: completed.seq,
        gapEventType: 'model.turn.completed',
        gap: 'applied-out-of-order',
        expectedPrevSeq: byIndex(9).seq,
        seenPrevSeq: byIndex(9).seq,
        lastSeq: byIndex(12).seq,
        anomaly: 'projection-gap',
      });
      expect(lines.some((l) => l.level === 'log' && /^projection gap repaired/.test(l.message))).toBe(true);
      expect(service.stats.gaps).toBe(1);
      expect(await getRunView(orm, runId)).toMatchObject({ status: 'settled', unknownUsageTurns: 0, promptTokens: 240, lastSeq: stored.at(-1)!.seq });
      const result = await rebuildCompare(log, url);
      expect(result.differences).toEqual([]);

      // the repair is idempotent: every delivery again is a repeat, nothing changes
      for (const s of stored) await service.catchUp(s);
      expect(service.stats.gaps).toBe(1);
      expect((await rebuildCompare(log, url)).differences).toEqual([]);
    },
  );
});
