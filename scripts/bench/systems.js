// The three systems under test, each started with the same shape of handle:
//   one(id, question)  runs one Run from admission to settlement (resolves when settled),
//   pids()             the processes whose CPU counts for the system,
//   idleRss()          [name, KiB] of the system's own processes (at any time: the soak samples it too),
//   stop()             stops everything it started and removes its stream / database / data dir.
import { createWriteStream, existsSync, mkdtempSync, openSync, rmSync, closeSync, writeFileSync } from 'node:fs';
import { spawn } from 'node:child_process';
import { arch, platform, tmpdir } from 'node:os';
import { join } from 'node:path';
import getPort from 'get-port';
import { RunplaneClient } from '@runplane/client';
import { dropDatabase, ensureDatabaseExists, SERVICES, spawnReady, startStack } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';
import { pgBackendPids, rssKiB } from './proc.js';
import { benchSpace, stopProcess, waitFor } from './infra.js';

const PG = 'postgresql://postgres@127.0.0.1:5432';

/**
 * Starts Runplane: every service as its own process (devstack) on the bench's private NATS, its
 * own stream, subject prefix and projection database, the shared scripted model as its model.
 * `nats` (infra.js startNats) must have been started for this system's subject space
 * (`benchSpace(tag)`): each service connects as its own NATS user over TLS, as in a deployment.
 * Settlement is observed by a core-NATS subscription on the lifecycle subjects (no polling).
 * @param {object} o
 * @param {number} [o.replicas] processes per service (default 1; `runplane-x3` passes 3 with a
 *   3-node `nats`): admissions go round-robin over the admission replicas, and the CPU and idle
 *   RSS count every replica.
 * @param {Record<string, string>} [o.env] environment for the services on top of the bench's own
 *   (e.g. the parked mode's longer Run deadline); the stream, prefix and database stay the bench's.
 * @param {string[]} [o.nodeFlags] extra `node` flags for every service process (the profile's `--cpu-prof`).
 * @returns the system handle; besides the common shape, `stalled` lists the ids of the Runs that
 *   were admitted but did not settle within the settle timeout (120 s), and `admit(id, question)`
 *   admits a Run in its own conversation `id` and resolves with its runId without waiting for it.
 */
export async function startRunplane({ tag, nats, modelUrl, pg, logDir, dataDir, replicas = 1, env: extraEnv = {}, nodeFlags = [] }) {
  const space = benchSpace(tag);
  const env = {
    ...process.env,
    ...extraEnv,
    NATS_URL: nats.url,
    // the bench's server requires TLS and the Runplane users (infra.js startNats): every service
    // verifies it and connects as its own user (startStack's natsUsers set NATS_USER/NATS_PASSWORD)
    NATS_CA_FILE: nats.caFile,
    DATABASE_URL: `${PG}/rp_${tag}`,
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    RUNPLANE_PARTITIONS: String(space.partitions),
    RUNPLANE_DATA_DIR: dataDir,
    RUNPLANE_NATS_REPLICAS: String(nats.replicas ?? 1),
    // the peers serve their API without authentication: so does Runplane here (the JWT check is not measured)
    RUNPLANE_AUTH_DISABLED: 'true',
  };
  await ensureDatabaseExists(env.DATABASE_URL);
  const log = await EventLog.connect({
    natsUrl: nats.url,
    stream: env.RUNPLANE_STREAM,
    prefix: tag,
    name: 'bench',
    partitions: space.partitions,
    replicas: nats.replicas ?? 1,
    caFile: nats.caFile,
    // the settlement watch and the clean-up (stream, object store) are the admin's
    ...nats.admin,
  });
  const waiters = new Map();
  const early = new Map();
  const sub = log.nc.subscribe(`${tag}.run.*.lifecycle.*`, {
    callback: (_err, msg) => {
      if (!msg) return;
      const runId = msg.subject.split('.')[2];
      let outcome = 'unknown';
      try {
        outcome = JSON.parse(msg.string())?.data?.outcome ?? 'unknown';
      } catch {
        // not JSON: the outcome stays unknown
      }
      const w = waiters.get(runId);
      if (w) {
        waiters.delete(runId);
        w(outcome);
      } else early.set(runId, outcome);
    },
  });
  await log.nc.flush();
  let stack;
  try {
    const perService = replicas > 1 ? Object.fromEntries(SERVICES.map((n) => [n, replicas])) : undefined;
    stack = await startStack({ env, logDir, modelBaseUrl: modelUrl, replicas: perService, natsUsers: nats.users, nodeFlags });
  } catch (e) {
    sub.unsubscribe();
    await log.destroyStream();
    await log.close();
    await dropDatabase(env.DATABASE_URL).catch(() => undefined);
    throw e;
  }
  // One client per admission replica, used in turn (the stack's endpoints are the first replica's).
  const clients = (stack.replicas.get('admission') ?? []).map((p) => new RunplaneClient({ ...stack.endpoints, admission: p.url }));
  let turn = 0;
  const stalled = [];
  const settled = (runId, timeoutMs = 120_000) =>
    new Promise((resolve, reject) => {
      if (early.has(runId)) {
        const o = early.get(runId);
        early.delete(runId);
        return resolve(o);
      }
      const t = setTimeout(() => {
        waiters.delete(runId);
        stalled.push(runId);
        // what the log holds says where it stopped (or that the settlement was only missed here)
        void log
          .readRun(runId)
          .then((events) => {
            writeFileSync(join(logDir, `unsettled-${runId}.json`), JSON.stringify(events, null, 1));
            return `${events.map((e) => e.event.type).join(', ')} (all in ${join(logDir, `unsettled-${runId}.json`)})`;
          })
          .catch((e) => `log not readable: ${e.message}`)
          .then((events) => reject(new Error(`run ${runId} not settled within ${timeoutMs} ms; its events: ${events}`)));
      }, timeoutMs);
      waiters.set(runId, (o) => {
        clearTimeout(t);
        resolve(o);
      });
    });
  const admit = async (id, question) => {
    const client = clients[turn++ % clients.length];
    const { status, body } = await client.postMessage(id, { clientMessageId: id, content: question });
    if (status !== 201) throw new Error(`admission answered ${status}`);
    return body.runId;
  };
  const db = `rp_${tag}`;
  const all = () => [...stack.replicas.entries()].flatMap(([name, ps]) => ps.map((p) => [p.name ?? name, p]));
  const processCount = [...stack.replicas.values()].reduce((n, ps) => n + ps.length, 0);
  return {
    name: replicas > 1 ? `Runplane x${replicas}` : 'Runplane',
    log,
    stack,
    stalled,
    admit,
    async one(id, question) {
      const runId = await admit(id, question);
      const outcome = await settled(runId);
      if (outcome !== 'completed') throw new Error(`run ${runId} settled ${outcome}`);
      return runId;
    },
    pids: async () => [...all().map(([, p]) => p.child.pid), ...nats.pids(), ...(await pgBackendPids(pg, [db]))],
    /** The kind of a counted process: a service's name (every replica's: `runtime#2` is `runtime`), `nats-server`, or `postgres` for any other (a backend). */
    kindOf: (pid) =>
      all()
        .find(([, p]) => p.child.pid === pid)?.[0]
        ?.replace(/#\d+$/, '') ?? (nats.pids().includes(pid) ? 'nats-server' : 'postgres'),
    includes: `the ${processCount} service processes (${replicas} per service), the ${nats.replicas === 3 ? '3-node nats-server cluster (stream and buckets at R3)' : "bench's private nats-server"}, the PostgreSQL backends of its projection database`,
    async idleRss() {
      const out = [];
      for (const [name, p] of all()) out.push([name, await rssKiB(p.child.pid)]);
      for (const pid of nats.pids()) out.push(['nats-server', await rssKiB(pid)]);
      return out;
    },
    async stop() {
      sub.unsubscribe();
      await stack.stop();
      await log.jsm.streams.delete(`OBJ_${tag}_results`).catch(() => undefined);
      await log.destroyStream();
      await log.close();
      await dropDatabase(env.DATABASE_URL);
    },
  };
}

/**
 * Starts the DBOS peer (bench/peers/dbos-app.js) with its own system database on this PostgreSQL.
 */
export async function startDbos({ root, tag, modelUrl, pg, logFile, dataDir }) {
  const dbUrl = `${PG}/dbos_${tag}`;
  await ensureDatabaseExists(dbUrl);
  const log = createWriteStream(logFile, { flags: 'a' });
  let app;
  try {
    app = await spawnReady(
      'dbos-app',
      join(root, 'bench/peers/dbos-app.js'),
      [],
      { ...process.env, OPENAI_BASE_URL: modelUrl, DBOS_SYSTEM_DATABASE_URL: dbUrl, RUNPLANE_DATA_DIR: dataDir, PORT: '0' },
      /ready on (\S+)/,
      log,
      60_000,
    );
  } catch (e) {
    log.end();
    await dropDatabase(dbUrl).catch(() => undefined);
    throw e;
  }
  const db = `dbos_${tag}`;
  return {
    name: 'DBOS',
    async one(id, question) {
      const res = await fetch(`${app.url}/run`, { method: 'POST', body: JSON.stringify({ runId: id, question }) });
      const body = await res.json();
      if (res.status !== 200) throw new Error(`dbos-app answered ${res.status}: ${body.error}`);
      if (body.turns !== 3 || body.toolCalls !== 2) throw new Error(`W1 shape: ${body.turns} turns, ${body.toolCalls} tool calls`);
    },
    pids: async () => [app.child.pid, ...(await pgBackendPids(pg, [db]))],
    includes: 'the DBOS app process (workflows run in it), the PostgreSQL backends of its system database',
    idleRss: async () => [['dbos-app', await rssKiB(app.child.pid)]],
    async stop() {
      await app.stop();
      log.end();
      await dropDatabase(dbUrl);
    },
  };
}

/** Path of the restate-server binary shipped by @restatedev/restate-server for this platform, or null. */
export function restateBinary(root) {
  const p = join(root, 'bench/node_modules/@restatedev', `restate-server-${platform()}-${arch()}`, 'bin/restate-server');
  return existsSync(p) ? p : null;
}

/**
 * Starts the Restate peer: restate-server on free loopback ports with a temporary data dir, the
 * service endpoint (bench/peers/restate-app.js), and registers the deployment via the admin API.
 */
export async function startRestate({ root, modelUrl, logFile, dataDir }) {
  const bin = restateBinary(root);
  if (!bin) throw new Error(`no restate-server binary for ${platform()}-${arch()} under bench/node_modules/@restatedev`);
  const [fabric, admin, ingress, endpoint] = [
    await getPort({ host: '127.0.0.1' }),
    await getPort({ host: '127.0.0.1' }),
    await getPort({ host: '127.0.0.1' }),
    await getPort({ host: '127.0.0.1' }),
  ];
  const dir = mkdtempSync(join(tmpdir(), 'runplane-bench-restate-'));
  const fd = openSync(logFile, 'a');
  const server = spawn(bin, ['--no-logo', '--base-dir', dir, '--node-name', 'bench', '--listen-mode', 'tcp'], {
    stdio: ['ignore', fd, fd],
    env: {
      ...process.env,
      RESTATE_BIND_ADDRESS: `127.0.0.1:${fabric}`,
      RESTATE_ADVERTISED_ADDRESS: `http://127.0.0.1:${fabric}/`,
      RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${admin}`,
      RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingress}`,
      RESTATE_DISABLE_TELEMETRY: 'true',
      RESTATE_LOG_FILTER: 'warn',
    },
  });
  closeSync(fd);
  const adminUrl = `http://127.0.0.1:${admin}`;
  const ingressUrl = `http://127.0.0.1:${ingress}`;
  let app = null;
  const log = createWriteStream(logFile, { flags: 'a' });
  const cleanup = async () => {
    if (app) await app.stop();
    await stopProcess(server);
    log.end();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    await waitFor(
      async () => (await fetch(`${adminUrl}/health`)).ok && (await fetch(`${ingressUrl}/restate/health`)).ok,
      'restate-server health',
      60_000,
      200,
    );
    app = await spawnReady(
      'restate-app',
      join(root, 'bench/peers/restate-app.js'),
      [],
      { ...process.env, OPENAI_BASE_URL: modelUrl, RUNPLANE_DATA_DIR: dataDir, PORT: String(endpoint) },
      /ready on (\S+)/,
      log,
      60_000,
    );
    const reg = await fetch(`${adminUrl}/deployments`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ uri: `http://127.0.0.1:${endpoint}` }),
    });
    if (!reg.ok) throw new Error(`registering the deployment answered ${reg.status}: ${await reg.text()}`);
  } catch (e) {
    await cleanup();
    throw e;
  }
  return {
    name: 'Restate',
    async one(id, question) {
      const res = await fetch(`${ingressUrl}/W1/run`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': id },
        body: JSON.stringify({ question }),
      });
      const text = await res.text();
      if (res.status !== 200) throw new Error(`ingress answered ${res.status}: ${text.slice(0, 200)}`);
      const body = JSON.parse(text);
      if (body.turns !== 3 || body.toolCalls !== 2) throw new Error(`W1 shape: ${body.turns} turns, ${body.toolCalls} tool calls`);
    },
    pids: async () => [server.pid, app.child.pid],
    includes: 'restate-server (all its threads) and the service endpoint process',
    idleRss: async () => [
      ['restate-server', await rssKiB(server.pid)],
      ['restate-app', await rssKiB(app.child.pid)],
    ],
    stop: cleanup,
  };
}
