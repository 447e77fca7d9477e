#!/usr/bin/env node
/**
 * Ad-hoc check of deploy/nats/accounts.conf against a SCRATCH nats-server (not part of the test
 * suite; the hardening issue [4] turns this into tests). It drives the real code paths of
 * libs/eventlog (EventLog append / lastOf / readRun / followRun, DurableConsumer with acks,
 * ResultStore put / get) as each service's NATS user, and checks that what a service must not do
 * (publish another owner's subject, take another service's durable, create or delete streams)
 * is refused by the broker.
 *
 * Usage (repo root, after `npm run build`):
 *   RUNPLANE_NATS_PASSWORD_<SERVICE>=... (the same variables the server resolves)
 *   node deploy/nats/check-permissions.mjs 127.0.0.1:<port>
 *
 * The server must include accounts.conf with JetStream enabled. The script creates the stream
 * RUNPLANE and the bucket rp_results as `runplane-admin` and writes one test Run into them, so it
 * refuses to run when RUNPLANE already holds messages (pass --force to override).
 * Exit code 0 when every expectation holds, 1 otherwise.
 */
import { randomUUID } from 'node:crypto';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { Objm } from '@nats-io/obj';
import { makeEvent } from '@runplane/contracts';
import { DurableConsumer, EventLog, ResultStore, allRunsFilter, liveDeltaSubject, ownerFilter } from '@runplane/eventlog';
import { foldRun, usageOf } from '@runplane/run-facts';

const server = process.argv[2];
const force = process.argv.includes('--force');
if (!server) {
  process.stderr.write('usage: node deploy/nats/check-permissions.mjs <host:port> [--force]\n');
  process.exit(2);
}
const STREAM = 'RUNPLANE';
const PREFIX = 'rp';
const space = { stream: STREAM, prefix: PREFIX };
const TIMEOUT = 2000;

let failures = 0;
const report = (ok, what, detail = '') => {
  if (!ok) failures++;
  process.stdout.write(`${ok ? 'ok  ' : 'FAIL'}  ${what}${detail ? `  (${detail})` : ''}\n`);
};
const expectOk = async (what, fn) => {
  try {
    const r = await fn();
    report(true, what);
    return r;
  } catch (e) {
    report(false, what, e?.message ?? String(e));
    return undefined;
  }
};
const expectDenied = async (what, fn) => {
  try {
    await fn();
    report(false, `${what} is refused`, 'it succeeded');
  } catch (e) {
    report(
      true,
      `${what} is refused`,
      String(e?.message ?? e)
        .split('\n')[0]
        .slice(0, 90),
    );
  }
};

async function open(service) {
  const user = `runplane-${service}`;
  const pass = process.env[`RUNPLANE_NATS_PASSWORD_${service.toUpperCase()}`];
  if (!pass) throw new Error(`RUNPLANE_NATS_PASSWORD_${service.toUpperCase()} is not set`);
  const nc = await connect({ servers: server, user, pass, name: `check-${service}`, maxReconnectAttempts: 0 });
  const jsm = await jetstreamManager(nc, { timeout: TIMEOUT });
  const js = jetstream(nc, { timeout: TIMEOUT });
  // The same object EventLog.connect({ user, pass }) builds, without creating the stream as this user.
  const log = new EventLog(nc, js, jsm, space);
  return { nc, js, jsm, log };
}

/** Publishes one message with an expectation, as an append would; resolves only on a stored ack. */
const rawAppend = (js, subject) => js.publish(subject, JSON.stringify({ forged: true }), { expect: { lastSubjectSequence: 0 }, timeout: TIMEOUT });

async function consumeOne(log, durable, filter) {
  let got = null;
  const consumer = new DurableConsumer(
    log,
    { durable, filter, ackWaitMs: 10_000 },
    async (stored) => {
      got ??= stored;
    },
    { warn: () => undefined, error: (m) => process.stderr.write(`${m}\n`) },
  );
  await consumer.start();
  const deadline = Date.now() + 5000;
  while (!got && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 300)); // let the ack go out
  await consumer.stop();
  if (!got) throw new Error(`durable ${consumer.durableName} delivered nothing`);
  return got;
}

const admin = await open('admin');
const info = await admin.jsm.streams.info(STREAM).catch(() => null);
if (info && info.state.messages > 0 && !force) {
  process.stderr.write(`stream ${STREAM} already holds ${info.state.messages} message(s): this is not a scratch server (use --force)\n`);
  process.exit(2);
}
if (!info) {
  await expectOk('admin creates stream RUNPLANE (rp.run.>, 2 min duplicate window, direct get)', () =>
    admin.jsm.streams.add({ name: STREAM, subjects: [`${PREFIX}.run.>`], duplicate_window: 120_000_000_000, allow_direct: true }),
  );
}
await expectOk('admin creates object store rp_results', () => new Objm(admin.nc).create(`${PREFIX}_results`));
await expectDenied('admin publishing a Run fact', () => rawAppend(admin.js, `${PREFIX}.run.x.lifecycle`));

const conversationId = `perm-${randomUUID()}`;
const runId = randomUUID();
const ctx = { runId, conversationId, correlationId: runId, causationId: null };
const now = new Date();

// ---- admission ----------------------------------------------------------------------------------
const admission = await open('admission');
await expectOk('admission: ensureStream (STREAM.INFO)', () => admission.log.ensureStream());
await expectOk('admission: lastOf (direct get) on an empty subject', () => admission.log.lastOf(runId, 'admission'));
const admitted = makeEvent('run.admitted', ctx, 'admission', {
  message: { messageId: randomUUID(), clientMessageId: 'c1', content: 'permission check', contentSha256: 'a'.repeat(64) },
  grant: { tools: [], model: 'check' },
  limits: { maxModelRequests: 1, maxToolCalls: 0, deadlineAt: new Date(now.getTime() + 60_000).toISOString() },
});
await expectOk('admission: append run.admitted', () => admission.log.append(admitted, 0));
await expectOk('admission: lastOf reads it back', async () => {
  if (!(await admission.log.lastOf(runId, 'admission'))) throw new Error('not found');
});
for (const other of ['runtime', 'tools', 'publication', 'lifecycle']) {
  await expectDenied(`admission publishing rp.run.*.${other}`, () => rawAppend(admission.js, `${PREFIX}.run.${runId}.${other}`));
}
await expectDenied('admission creating a stream', () => admission.jsm.streams.add({ name: 'RP_EVIL', subjects: ['evil.>'] }));

// ---- runtime ------------------------------------------------------------------------------------
const runtime = await open('runtime');
await expectOk('runtime: durable rp-runtime on rp.run.> delivers and acks', () => consumeOne(runtime.log, 'runtime', allRunsFilter(space)));
await expectOk('runtime: readRun (ephemeral consumer)', () => runtime.log.readRun(runId));
await expectOk('runtime: append model.turn.requested', () =>
  runtime.log.append(makeEvent('model.turn.requested', ctx, 1, { turn: 1, model: 'check' }), 0),
);
await expectOk('runtime: publish a live delta (core NATS)', async () => {
  runtime.nc.publish(liveDeltaSubject(space, runId), JSON.stringify({ turn: 1, text: 'x' }));
  await runtime.nc.flush();
});
await expectDenied('runtime publishing rp.run.*.lifecycle (a settlement)', () => rawAppend(runtime.js, `${PREFIX}.run.${runId}.lifecycle`));
await expectDenied('runtime publishing rp.run.*.tools', () => rawAppend(runtime.js, `${PREFIX}.run.${runId}.tools`));
await expectDenied('runtime deleting durable rp-lifecycle', () => runtime.jsm.consumers.delete(STREAM, `${PREFIX}-lifecycle`));

// ---- tools --------------------------------------------------------------------------------------
const tools = await open('tools');
await expectOk('tools: durable rp-tools on rp.run.*.runtime delivers and acks', () => consumeOne(tools.log, 'tools', ownerFilter(space, 'runtime')));
await expectOk('tools: readRun', () => tools.log.readRun(runId));
await expectOk('tools: append tool.call.dispatched', () =>
  tools.log.append(makeEvent('tool.call.dispatched', ctx, 'call-1', { toolCallId: randomUUID(), name: 'check' }), 0),
);
const big = JSON.stringify({ rows: Array.from({ length: 40_000 }, (_, i) => ({ i, text: `row ${i} of a large tool result` })) });
const ref = await expectOk(`tools: ResultStore.put of a ${Math.round(big.length / 1024)} KiB result`, async () =>
  (await ResultStore.open(tools.log)).put(big),
);
await expectDenied('tools publishing rp.run.*.lifecycle', () => rawAppend(tools.js, `${PREFIX}.run.${runId}.lifecycle`));
await expectDenied('tools publishing rp.run.*.runtime', () => rawAppend(tools.js, `${PREFIX}.run.${runId}.runtime`));

if (ref) {
  await expectOk('runtime: ResultStore.get of that result (ordered push consumer, flow control)', async () => {
    const value = await (await ResultStore.open(runtime.log)).get(ref);
    if (JSON.stringify(value) !== big) throw new Error('content differs');
  });
}
await expectDenied('runtime writing into the result store', () => runtime.js.publish(`$O.${PREFIX}_results.M.evil`, 'x', { timeout: TIMEOUT }));

// ---- publication --------------------------------------------------------------------------------
const publication = await open('publication');
await expectOk('publication: durable rp-publication on rp.run.*.runtime delivers and acks', () =>
  consumeOne(publication.log, 'publication', ownerFilter(space, 'runtime')),
);
await expectOk('publication: lastOf + readRun', async () => {
  await publication.log.lastOf(runId, 'admission');
  await publication.log.readRun(runId);
});
await expectOk('publication: followRun (ordered consumer) replays the Run', async () => {
  const seen = [];
  const stop = await publication.log.followRun(runId, 1, (e) => seen.push(e));
  const deadline = Date.now() + 3000;
  while (seen.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  await stop();
  if (seen.length < 3) throw new Error(`saw ${seen.length} event(s)`);
});
await expectOk('publication: subscribes to live deltas', async () => {
  const sub = publication.nc.subscribe(liveDeltaSubject(space, runId), { max: 1 });
  await publication.nc.flush();
  runtime.nc.publish(liveDeltaSubject(space, runId), JSON.stringify({ turn: 1, text: 'y' }));
  const timer = setTimeout(() => sub.unsubscribe(), TIMEOUT);
  for await (const _ of sub) break;
  clearTimeout(timer);
  if (sub.getProcessed() !== 1) throw new Error('no delta received');
});
const passageText = 'A committed passage.';
await expectOk('publication: append passage.committed', () =>
  publication.log.append(
    makeEvent('passage.committed', ctx, '0/v1', {
      passageId: randomUUID(),
      index: 0,
      version: 1,
      text: passageText,
      sourceTurn: 1,
      sha256: 'b'.repeat(64),
    }),
    0,
  ),
);
await expectDenied('publication publishing rp.run.*.lifecycle', () => rawAppend(publication.js, `${PREFIX}.run.${runId}.lifecycle`));
await expectDenied('publication taking over durable rp-lifecycle', () =>
  publication.jsm.consumers.add(STREAM, {
    durable_name: `${PREFIX}-lifecycle`,
    name: `${PREFIX}-lifecycle`,
    filter_subject: `${PREFIX}.run.>`,
    ack_policy: 'explicit',
  }),
);
await expectDenied('publication pulling from durable rp-runtime', () =>
  publication.nc.request(`$JS.API.CONSUMER.MSG.NEXT.${STREAM}.${PREFIX}-runtime`, JSON.stringify({ batch: 1, no_wait: true }), { timeout: TIMEOUT }),
);

// ---- lifecycle ----------------------------------------------------------------------------------
const lifecycle = await open('lifecycle');
await expectOk('lifecycle: durable rp-lifecycle on rp.run.> delivers and acks', () => consumeOne(lifecycle.log, 'lifecycle', allRunsFilter(space)));
const facts = foldRun(runId, (await expectOk('lifecycle: readRun', () => lifecycle.log.readRun(runId))) ?? []);
await expectOk('lifecycle: append run.settled (expects an empty lifecycle subject)', () =>
  lifecycle.log.append(
    makeEvent('run.settled', ctx, 'settlement', {
      outcome: 'failed',
      reason: 'permission check',
      passageIds: [],
      receipts: [],
      usage: usageOf(facts),
    }),
    0,
  ),
);
await expectDenied('lifecycle publishing rp.run.*.admission', () => rawAppend(lifecycle.js, `${PREFIX}.run.${randomUUID()}.admission`));

// ---- projector ----------------------------------------------------------------------------------
const projector = await open('projector');
await expectOk('projector: ensureStream', () => projector.log.ensureStream());
await expectOk('projector: durable rp-projector on rp.run.> delivers and acks', () => consumeOne(projector.log, 'projector', allRunsFilter(space)));
for (const owner of ['admission', 'runtime', 'tools', 'publication', 'lifecycle']) {
  await expectDenied(`projector publishing rp.run.*.${owner}`, () => rawAppend(projector.js, `${PREFIX}.run.${runId}.${owner}`));
}
await expectDenied('projector reading a Run through an ephemeral consumer', () => projector.log.readRun(runId));

// ---- ops ----------------------------------------------------------------------------------------
const ops = await open('ops');
await expectOk('ops: readRun (runplane timeline)', async () => {
  const events = await ops.log.readRun(runId);
  if (events.length !== 5) throw new Error(`expected 5 events, read ${events.length}`);
});
await expectDenied('ops publishing rp.run.*.lifecycle', () => rawAppend(ops.js, `${PREFIX}.run.${runId}.lifecycle`));
await expectDenied('ops deleting the stream', () => ops.jsm.streams.delete(STREAM));

// ---- the log holds exactly what the owners appended ----------------------------------------------
await expectOk('the Run holds exactly 5 events, one per owner, one settlement', async () => {
  const events = await admin.log.readRun(runId);
  const owners = events.map((e) => e.event.owner).join(',');
  if (owners !== 'admission,runtime,tools,publication,lifecycle') throw new Error(owners);
});
await expectOk('every durable acknowledged what it was given', async () => {
  for (const d of ['runtime', 'tools', 'publication', 'lifecycle', 'projector']) {
    const ci = await admin.jsm.consumers.info(STREAM, `${PREFIX}-${d}`);
    if (ci.ack_floor.stream_seq < 1) throw new Error(`${PREFIX}-${d} ack floor ${ci.ack_floor.stream_seq}`);
  }
});

for (const c of [admin, admission, runtime, tools, publication, lifecycle, projector, ops]) await c.nc.close().catch(() => undefined);
process.stdout.write(failures === 0 ? '\nall permission checks passed\n' : `\n${failures} check(s) failed\n`);
process.exit(failures === 0 ? 0 : 1);
