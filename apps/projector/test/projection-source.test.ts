/**
 * The projector refuses to start on a projection database built from another log (K11,
 * projection-source.ts): against a real nats-server and PostgreSQL, a database that projected a Run
 * of stream A is given to a projector of stream B, first younger than A (no message at the Run's
 * last sequence), then with another Run's event there; the start fails naming the Run and the
 * sequence, and nothing of B is projected into it: the check runs before the projector consumes
 * anything (no consumer of B's exists after a refused start; a CI-like loaded run once projected
 * two of B's Runs when the consumers started first). The projector of A itself starts on it again.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomUUID } from 'node:crypto';
import { EventLog } from '@runplane/eventlog';
import { createProjectionOrm, databaseUrlWith, dropDatabase, latestProjectedRun } from '@runplane/projections';
import { startProjector, type StartedProjector } from '@runplane/app-projector';
import { appendAll, researchRunEvents, uniqueTag } from '../../../libs/projections/test/fixtures.js';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

const adminUrl = process.env.PROJECTIONS_TEST_ADMIN_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const tag = uniqueTag();
const db = `rp_test_projsource_${tag}`;
const dbUrl = databaseUrlWith(adminUrl, db);
const a = { stream: `RPTEST_PSA_${tag}`, prefix: `tpsa${tag}` };
const b = { stream: `RPTEST_PSB_${tag}`, prefix: `tpsb${tag}` };
let server: TestNatsServer;
let logA: EventLog;
let logB: EventLog;

/** The names of the consumers on `log`'s stream. */
async function consumersOf(log: EventLog): Promise<string[]> {
  const names: string[] = [];
  for await (const c of log.jsm.consumers.list(log.space.stream)) names.push(c.name);
  return names;
}

/** Starts a projector of `space`'s log on the test's database (created and migrated on first use). */
function projectorOf(space: { stream: string; prefix: string }): Promise<StartedProjector> {
  Object.assign(process.env, {
    NATS_URL: server.url,
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    DATABASE_URL: dbUrl,
    HOST: '127.0.0.1',
    PROJECTOR_PORT: '0',
  });
  return startProjector({ logLevel: 'fatal' });
}

/** The Runs projected into the test's database. */
async function projectedRuns(): Promise<string[]> {
  const orm = await createProjectionOrm({ databaseUrl: dbUrl, poolMax: 1 });
  try {
    return (await orm.em.fork().execute<{ runId: string }[]>('select "run_id" as "runId" from "runs" order by 1')).map((r) => r.runId);
  } finally {
    await orm.close();
  }
}

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
  logA = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...a });
  logB = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, ...b });
});
afterAll(async () => {
  await dropDatabase(adminUrl, db);
  for (const log of [logA, logB]) {
    await log?.destroyStream();
    await log?.close();
  }
  await server?.cleanup();
});

describe('a projection database and the log it was built from', () => {
  const runOfA = randomUUID();
  it('given a database that projected a Run of log A, when a projector of the younger log B starts on it, then the start fails naming the Run and sequence', async () => {
    const stored = await appendAll(logA, researchRunEvents(runOfA));
    const projector = await projectorOf(a);
    try {
      const deadline = Date.now() + 20_000;
      while (!(await projectedRuns()).includes(runOfA) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    } finally {
      await projector.app.close();
    }
    const orm = await createProjectionOrm({ databaseUrl: dbUrl, poolMax: 1 });
    const latest = await latestProjectedRun(orm.em.fork()).finally(() => orm.close());
    expect(latest).toEqual({ runId: runOfA, lastSeq: stored.at(-1)!.seq });

    // log B has one event: nothing at A's last sequence
    await appendAll(logB, researchRunEvents(randomUUID()).slice(0, 1));
    await expect(projectorOf(b)).rejects.toThrow(
      new RegExp(
        `holds Runs of another log: its last projected Run ${runOfA} was applied up to stream sequence ${latest!.lastSeq}, but stream ${b.stream} has no message there`,
      ),
    );
    expect(await projectedRuns()).toEqual([runOfA]);
    // refused before it consumed anything: it made no consumer on B (it would project B's events
    // into this database until its start failed)
    expect(await consumersOf(logB)).toEqual([]);
  });

  it('given log B grown past that sequence with another Run, when its projector starts on the database, then it fails naming the other Run', async () => {
    const runOfB = randomUUID();
    await appendAll(logB, researchRunEvents(runOfB));
    await expect(projectorOf(b)).rejects.toThrow(
      new RegExp(`holds Runs of another log: .* but stream ${b.stream} has an event of Run ${runOfB} there`),
    );
    expect(await projectedRuns()).toEqual([runOfA]);
    expect(await consumersOf(logB)).toEqual([]);
  });

  it('given the log the database was built from, when its projector starts again, then it starts', async () => {
    const projector = await projectorOf(a);
    try {
      expect((await fetch(`${projector.url}/readyz`)).status).toBe(200);
    } finally {
      await projector.app.close();
    }
  });
});
