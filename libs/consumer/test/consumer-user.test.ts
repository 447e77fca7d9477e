/**
 * The library as a downstream durable's own user (libs/eventlog bus.ts, one user per durable),
 * against a nats-server started with the Runplane users and permissions as deployed: it follows
 * Runs through its durable (provisioned by the admin as a pull consumer, which it may not create or
 * change), selecting two owners' events, terminates a forgery, resumes, may not delete it, and is
 * refused a name it is not granted and another downstream's durable.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { provisionedAdminLog, startSecuredNats, type SecuredNats } from '@runplane/devstack';
import { EventLog, runSubject, type SubjectSpace } from '@runplane/eventlog';
import { RunConsumer, RunStream, RunStreamUnavailable, type InvalidMessage, type RunStreamOptions } from '@runplane/consumer';
import { admittedEvent, settledEvent } from '../../../test/support/events.js';

const tag = randomBytes(3).toString('hex');
const space: SubjectSpace = { stream: `RPT_CU_${tag}`, prefix: `tcu${tag}`, partitions: 8 };
const granted = 'downstream-lib';
/** Another downstream service's durable, provisioned too: its user is not the one these tests connect as. */
const neighbour = 'downstream-lib2';
const stateDir = mkdtempSync(join(tmpdir(), 'rp-consumer-user-'));
const quiet = { warn: () => undefined, error: () => undefined };
let nats: SecuredNats;
let admin: EventLog;
let options: RunStreamOptions;

const admitted = (runId: string) => admittedEvent(runId);
const settled = (runId: string) => settledEvent(runId);

async function until(pred: () => boolean | Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

beforeAll(async () => {
  nats = await startSecuredNats({ stateDir, space, downstream: [granted, neighbour] });
  // the stack's server requires TLS: every client verifies it against its private CA (NATS_CA_FILE)
  admin = await provisionedAdminLog(nats, space, [granted, neighbour]);
  options = {
    natsUrl: nats.url,
    stream: space.stream,
    prefix: space.prefix,
    user: nats.users.downstream[granted]!.user,
    password: nats.users.downstream[granted]!.password,
    caFile: nats.caFile!,
  };
}, 60_000);
afterAll(async () => {
  await admin?.close();
  await nats?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

it('follows admissions and settlements through its granted durable, terminates a forgery, resumes, and may not delete it', async () => {
  const runs = ['a', 'b', 'c'].map((x) => `${x}${tag}`);
  for (const r of runs.slice(0, 2)) {
    await admin.append(admitted(r), 0);
    await admin.append(settled(r), 0);
  }
  const forged = await admin.js.publish(runSubject(admin.space, `forged${tag}`, 'lifecycle'), JSON.stringify(settled(`forged${tag}`)));
  const seen: string[] = [];
  const reports: InvalidMessage[] = [];
  const first = await RunConsumer.connect({
    ...options,
    name: granted,
    owners: ['admission', 'lifecycle'],
    logger: quiet,
    onInvalid: (m) => reports.push(m),
  });
  first.on('run.admitted', (e) => void seen.push(`admitted ${e.runId}`)).on('run.settled', (e) => void seen.push(`settled ${e.runId}`));
  await first.start();
  await until(() => seen.length === 4 && reports.length === 1, 'both Runs and the forgery');
  await until(async () => (await first.stream.jsm.consumers.info(space.stream, granted)).num_ack_pending === 0, 'the acknowledgements');
  await first.close();
  expect(reports.map((r) => [r.seq, r.anomaly])).toEqual([[forged.seq, 'unverified-event']]);

  await admin.append(settled(runs[2]!), 0);
  const again = await RunConsumer.connect({ ...options, name: granted, owners: ['admission', 'lifecycle'], logger: quiet });
  again.on('*', (e) => void seen.push(`${e.type} ${e.runId}`));
  await again.start();
  await until(() => seen.length === 5, 'the settlement appended while it was stopped');
  expect(seen).toEqual([`admitted ${runs[0]}`, `settled ${runs[0]}`, `admitted ${runs[1]}`, `settled ${runs[1]}`, `run.settled ${runs[2]}`]);
  await again.stop();
  // the consumer account may not delete it (a deleted name could come back as a push consumer): the admin does
  await expect(again.deleteDurable()).rejects.toThrow(/permissions violation/i);
  await again.close();
  expect(await admin.jsm.consumers.delete(space.stream, granted)).toBe(true);
});

it("is refused a downstream name the deployment does not grant and another downstream's durable, and creates no stream", async () => {
  const stream = await RunStream.open(options);
  try {
    for (const name of ['downstream-other', neighbour]) {
      const other = new RunConsumer(stream, { name, logger: quiet });
      await expect(other.start()).rejects.toThrow(
        new RegExp(
          `the broker refused durable consumer ${name} on stream .*: this NATS user may not create it .*its own provisioned durable.*Permissions Violation`,
        ),
      );
    }
    // the neighbour's durable was not touched: nothing delivered from it
    expect((await admin.jsm.consumers.info(space.stream, neighbour)).delivered.stream_seq).toBe(0);
  } finally {
    await stream.close();
  }
  // the user may read its own stream only: another name is refused by the broker, and the error is the
  // documented RunStreamUnavailable, saying where (docs/consumers.md)
  const missing = RunStream.open({ ...options, stream: `RPT_CU_MISSING_${tag}` });
  await expect(missing).rejects.toBeInstanceOf(RunStreamUnavailable);
  await expect(missing).rejects.toThrow(
    new RegExp(`stream RPT_CU_MISSING_${tag} is not one .* may read on NATS at ${nats.url} .*check RUNPLANE_STREAM`),
  );
  await expect(admin.jsm.streams.info(`RPT_CU_MISSING_${tag}`)).rejects.toThrow(/not found/i);
});
