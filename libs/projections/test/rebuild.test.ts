import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { MikroORM } from '@mikro-orm/postgresql';
import { EventLog } from '@runplane/eventlog';
import {
  applyStoredEvent,
  createProjectionOrm,
  databaseUrlWith,
  dropDatabase,
  dumpProjectionRows,
  ensureDatabase,
  getRunView,
  rebuildProjections,
} from '@runplane/projections';
import { adminUrl, appendAll, failingRunEvents, interleave, openMigratedDatabase, researchRunEvents, uniqueTag } from './fixtures.js';
import { SHARED_NATS_URL, SUITE_NATS } from '../../../test/support/nats-server.js';

const natsUrl = SHARED_NATS_URL;
const tag = uniqueTag();
const liveDb = `rp_test_live_${tag}`;
const liveUrl = databaseUrlWith(adminUrl, liveDb);
const research = `research-${tag}`;
const failing = `failing-${tag}`;
const created: string[] = [];
let log: EventLog;
let live: MikroORM;
let appended = 0;

beforeAll(async () => {
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream: `RPTEST_PROJ_${tag}`, prefix: `tpj${tag}` });
  ({ orm: live } = await openMigratedDatabase(liveDb));
  // two concurrent Runs interleaved in one stream; they share the tool call id `call_1`
  const stored = await appendAll(log, interleave(researchRunEvents(research), failingRunEvents(failing)));
  appended = stored.length;
  // project live: each Run read back from the log and applied (twice: redelivery must not matter)
  for (const runId of [research, failing]) {
    const events = await log.readRun(runId);
    for (const s of events) await applyStoredEvent(live.em, s);
    for (const s of events) expect((await applyStoredEvent(live.em, s)).status).toBe('skipped');
  }
});
afterAll(async () => {
  await live?.close();
  for (const db of [liveDb, ...created]) await dropDatabase(adminUrl, db);
  await log?.destroyStream();
  await log?.close();
});

describe('rebuildProjections (K11: rebuilt from the log alone, identical)', () => {
  it('given live projections of two interleaved Runs, when rebuilt from the log into a fresh database, then every row is identical', async () => {
    const result = await rebuildProjections({ log, databaseUrl: liveUrl });
    created.push(result.database);
    expect(result.database).toMatch(new RegExp(`^${liveDb}_rebuild_\\d{17}$`));
    expect(result).toMatchObject({ eventsApplied: appended, identicalToLive: true, differences: [] });

    const rebuilt = await createProjectionOrm({ databaseUrl: databaseUrlWith(adminUrl, result.database) });
    try {
      const [a, b] = [await dumpProjectionRows(live), await dumpProjectionRows(rebuilt)];
      expect(b).toEqual(a);
      expect(a.runs.map((r) => [r.run_id, r.status, r.outcome, r.model_requests, r.tool_calls, r.passages])).toEqual(
        [
          [failing, 'settled', 'failed', 2, 0, 0],
          [research, 'settled', 'completed', 2, 2, 2],
        ].sort((x, y) => (String(x[0]) < String(y[0]) ? -1 : 1)),
      );
      expect(a.tool_calls.map((t) => [t.run_id, t.tool_call_id, t.status])).toEqual(
        expect.arrayContaining([
          [failing, 'call_1', 'denied'],
          [research, 'call_1', 'succeeded'],
          [research, 'call_2', 'failed'],
        ]),
      );
      expect(a.tool_calls).toHaveLength(3);
      expect(a.messages).toHaveLength(2);
      expect(a.passages).toHaveLength(2);
      expect(await getRunView(rebuilt, research)).toEqual(await getRunView(live, research));
    } finally {
      await rebuilt.close();
    }
  });

  it.each([1, 4])(
    'given live projections, when rebuilt with %i event(s) per transaction (batches cutting across both Runs), then every row is identical too',
    async (batchSize) => {
      const target = `rp_test_rb_${tag}_b${batchSize}`;
      created.push(target);
      const result = await rebuildProjections({ log, databaseUrl: liveUrl, targetDatabase: target, batchSize });
      expect(result).toMatchObject({ eventsApplied: appended, identicalToLive: true, differences: [] });
    },
  );

  it('given a tampered live row and a missing live row, when rebuilt, then both are reported as differences', async () => {
    const em = live.em.fork();
    await em.execute(`update "runs" set "reason" = 'tampered', "model_requests" = 99 where "run_id" = ?`, [research]);
    await em.execute(`delete from "passages" where "run_id" = ? and "passage_id" = 'p1'`, [research]);
    const target = `rp_test_rb_${tag}_neg`;
    created.push(target);
    const result = await rebuildProjections({ log, databaseUrl: liveUrl, targetDatabase: target });
    expect(result.database).toBe(target);
    expect(result.identicalToLive).toBe(false);
    expect(result.differences).toEqual([
      `runs[run_id=${research}].model_requests: live 99 vs rebuilt 2`,
      `runs[run_id=${research}].reason: live "tampered" vs rebuilt "answered; compare_holdings failed"`,
      `passages[run_id=${research},passage_id=p1]: only in rebuilt`,
    ]);
  });

  it('given a rebuild stopped during its replay (SIGINT in the CLI), then it throws saying so and its fresh database is gone', async () => {
    const target = `rp_test_rebuild_stop_${tag}`;
    const stop = new AbortController();
    // the replay's reader: the real log, stopped once its first event has been read
    const stopping = {
      async *readAll() {
        for await (const stored of log.readAll()) {
          yield stored;
          stop.abort();
        }
      },
    };
    await expect(rebuildProjections({ log: stopping, databaseUrl: liveUrl, targetDatabase: target, signal: stop.signal })).rejects.toThrow(
      `the rebuild was stopped after 0 event(s); its database ${target} was dropped`,
    );
    // a second attempt may create it again: nothing was left behind
    expect(await ensureDatabase(adminUrl, target)).toBe(true);
    created.push(target);
  });

  it('given an existing target database, then the rebuild refuses to reuse it', async () => {
    const target = `rp_test_rb_${tag}_exists`;
    created.push(target);
    await ensureDatabase(adminUrl, target);
    await expect(rebuildProjections({ log, databaseUrl: liveUrl, targetDatabase: target })).rejects.toThrow(/already exists/);
  });
});
