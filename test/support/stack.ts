/**
 * End-to-end test stack: the real processes (scripted model + every service) against a
 * nats-server the test file starts itself with the Runplane users and permissions switched on
 * (libs/eventlog bus.ts, as deployed: K9 by the broker) and the real PostgreSQL of this machine,
 * isolated by a unique stream, subject prefix and database per test file, all removed afterwards.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { closedByServer, postMessagePatiently, RunplaneClient } from '@runplane/client';
import { retry } from '@runplane/kit/retry';
import {
  createDevNatsTls,
  dropDatabase,
  ensureDatabaseExists,
  natsAuthConfig,
  natsTlsConfig,
  newNatsUsers,
  repoRoot,
  startStack,
  type NatsUsers,
  type ServiceName,
  type Stack,
} from '@runplane/devstack';
import { auditRuns, readForAudit } from '@runplane/audit';
import { destroyBus, EventLog, natsTlsOptions, type NatsTlsOption } from '@runplane/eventlog';
import { currentNatsServerBinary, TestNatsServer } from './nats-server.js';
import { changedSince, RUN_WAKE_FALLBACK_MS, runMark, runReader } from './run-wake.js';

/**
 * The stack's client (`t.client`), a test's own: a message answered 503 `dependency_unavailable`
 * (admission's append timed out on NATS while the suite loaded the machine: seen for the first
 * message of `quota` and of `traces` in full runs) is sent again 2 s later (admission's
 * `Retry-After`), at most five times, with a line saying so, as the CLI does (`postMessagePatiently`
 * of @runplane/client): a message repeats safely by its clientMessageId (K1). Any other answer, another 503 included, is the test's to see; the
 * files that check a 503 use `fetch` or a client of their own.
 */
class PatientClient extends RunplaneClient {
  override async postMessage(...[conversationId, body]: Parameters<RunplaneClient['postMessage']>): ReturnType<RunplaneClient['postMessage']> {
    return postMessagePatiently({ postMessage: (c, b) => super.postMessage(c, b) }, conversationId, body, (e) =>
      process.stdout.write(`test client: ${e.message}; sending the message again\n`),
    );
  }
}

export interface TestStack {
  tag: string;
  /** The services' common environment (without any user's credentials). */
  env: NodeJS.ProcessEnv;
  stack: Stack;
  /**
   * The test's own reads and clean-up, connected as the `admin` user; it signs what it appends with
   * the key of each event's owner and refuses unsigned events on reads, as the services do.
   */
  log: EventLog;
  /**
   * Every NATS user's credentials (e.g. `natsEnvOf(t.users, 'runtime')` to act as the runtime,
   * with its signing key), and in `signing` the stack's event signing keys (libs/devstack signing.ts).
   */
  users: NatsUsers;
  /** The nats-server this file started (null when `opts.nats` supplied the URL). */
  nats: TestNatsServer | null;
  /**
   * The TLS connect option of a client of this stack's server (`{ tls: { caFile } }`, the
   * private CA in `env.NATS_CA_FILE`; nothing with `tls: false`): spread it into a test's own
   * `connect({ servers: t.env.NATS_URL, ...t.tls })`.
   */
  tls: { tls: NatsTlsOption } | Record<string, never>;
  client: RunplaneClient;
  /** Total chat requests the scripted model received. */
  modelRequests(): Promise<number>;
  /** Replaces the scripted model's scenario (and resets its counters), or binds one to `key` (requests whose text contains the key). */
  setScenario(scenario: unknown, key?: string): Promise<void>;
  /**
   * Resolves with the Run's events once it has a settlement: reads the log again each time a message
   * is published on one of the Run's subjects, and at least every second, each time only the events
   * stored since the last read (test/support/run-wake.ts, `runReader`).
   */
  waitForSettlement(runId: string, timeoutMs?: number): Promise<StoredEvent[]>;
  stop(): Promise<void>;
}

/**
 * The environment of a stack whose Runs lose their runtime on purpose and must recover within
 * seconds: a lease of `leaseTtlMs`, a recovery sweep every 100 ms, redelivery after 2 s, and no
 * drain (a SIGTERM aborts at once, as past the drain bound; the drain itself: test/e2e/drain.test.ts).
 */
export const quickRecoveryEnv = (leaseTtlMs: number): NodeJS.ProcessEnv => ({
  RUNPLANE_LEASE_TTL_MS: String(leaseTtlMs),
  RUNPLANE_RECOVERY_SWEEP_MS: '100',
  RUNPLANE_ACK_WAIT_MS: '2000',
  RUNPLANE_DRAIN_SECONDS: '0',
});

/**
 * The Run projection of `runId` once it shows the Run settled (projections follow the log), read
 * through the API every moment for up to `timeoutMs`.
 */
export const settledProjection = (t: TestStack, runId: string, timeoutMs = 20_000) =>
  eventually(
    async () => {
      const v = await t.client.getRun(runId);
      return v?.status === 'settled' ? v : null;
    },
    timeoutMs,
    'the settled projection',
  );

/**
 * Binds the scripted model's scenarios of a parent Run (requests naming `parentKey`) that spawns a
 * sub-agent on turn 1, asking `[childKey] What does DIA hold?`, and answers on turn 2; and of that
 * child (requests naming `childKey`), whose turn 1 is `childStep`. Any further request of either fails.
 */
export async function scriptParentAndChild(t: TestStack, parentKey: string, childKey: string, childStep: Record<string, unknown>): Promise<void> {
  await t.setScenario(
    {
      steps: [
        {
          reply: {
            content: '',
            toolCalls: [{ id: `call_spawn_${parentKey}`, name: 'spawn_subagent', arguments: { question: `[${childKey}] What does DIA hold?` } }],
          },
        },
        { reply: { content: "The parent's answer, from its sub-agent." } },
      ],
      then: 'error',
    },
    parentKey,
  );
  await t.setScenario({ steps: [childStep], then: 'error' }, childKey);
}

/**
 * A Run set up for a test to build on: binds `scenario` to `key`, posts `content` as message `key`
 * of conversation `conversationId` and waits up to `timeoutMs` for the settlement.
 * @returns the Run's id and its events, settled.
 * @throws Error when the message is not admitted as a new Run (201).
 */
export async function settledRunOf(
  t: TestStack,
  conversationId: string,
  key: string,
  content: string,
  scenario: unknown,
  timeoutMs = 60_000,
): Promise<{ runId: string; events: StoredEvent[] }> {
  await t.setScenario(scenario, key);
  const posted = await t.client.postMessage(conversationId, { clientMessageId: key, content });
  if (posted.status !== 201) throw new Error(`message ${key} was answered ${posted.status}, not admitted as a new Run (201)`);
  return { runId: posted.body.runId, events: await t.waitForSettlement(posted.body.runId, timeoutMs) };
}

/**
 * The nats-server binary tests start: the supported release (2.12 or later) cached by
 * scripts/fetch-nats-server.sh, fetched on first use (never the machine's older one).
 * @throws Error with one line saying how to get one when it cannot be had.
 */
export function testNatsServerBinary(): string {
  return currentNatsServerBinary().bin;
}

export interface TestStackOptions {
  /**
   * Starts the nats-server with the given configuration (the users and permissions) and returns
   * its URL; for a test that restarts its server. Default: a {@link TestNatsServer} of
   * {@link testNatsServerBinary}, stopped with the stack.
   */
  nats?: (config: string, admin: { user: string; pass: string; caFile?: string }) => Promise<string>;
  /**
   * The model endpoint (base URL ending in /v1) instead of a scripted model process the stack
   * starts: for a test that stops and restarts its own model server (an outage).
   */
  modelBaseUrl?: string;
  /** Replicas per service (default 1 each), e.g. `{ runtime: 3, tools: 3 }` (docs/operations.md "Scaling"). */
  replicas?: Partial<Record<ServiceName, number>>;
  /**
   * The audit of the log when the stack stops (`runplane audit --all`, K11): `strict` fails the
   * clean-up when a check is broken, `report` only prints the `AUDIT |` line (the files that forge
   * violations on the bus on purpose), `off` skips it. Default `strict`: every scenario's log must
   * audit clean.
   */
  audit?: 'strict' | 'report' | 'off';
  /**
   * The server requires TLS with a certificate of a private CA made for this file (libs/devstack
   * createDevNatsTls; its `config` then holds the `tls` block, `admin.caFile` the CA) and every
   * process gets `NATS_CA_FILE` (default true, as `demo` and `up` run).
   */
  tls?: boolean;
  /** Folders the file made for its stack (a `record_effect` file's, say), removed once the stack stopped. */
  removeOnStop?: readonly string[];
}

/**
 * The partitions of a test stack's log unless the file sets `RUNPLANE_PARTITIONS`: 2, where a
 * deployment has 8 (`deploy/k8s/base/config.env`). Every service keeps a consumer and its pull loop
 * per partition, so on the 2-core machine a stack of 8 took about 5.6 s of CPU to start and 83 ms/s
 * idle (services and nats-server), one of 2 about 4.3 s and 56 ms/s: with some 50 stacks, three at
 * a time, about 130 CPU seconds of the end-to-end suite. Two still put Runs on more than one
 * partition (a Run's partition is a hash of its id); the files whose replicas must each own some
 * partitions set 8 (`drain`, `tools-replicas-soak`), `partitions` sets its own count.
 */
export const TEST_PARTITIONS = 2;

/**
 * Starts the stack for one test file. `envOverrides` set service configuration (short lease TTLs,
 * ack waits) for fault tests.
 */
export async function startTestStack(name: string, envOverrides: NodeJS.ProcessEnv = {}, opts: TestStackOptions = {}): Promise<TestStack> {
  const tag = `${name}${randomBytes(3).toString('hex')}`.toLowerCase();
  const users = newNatsUsers();
  const partitions = Number(envOverrides.RUNPLANE_PARTITIONS ?? TEST_PARTITIONS);
  const space = { stream: `RPT_${tag}`, prefix: `t${tag}`, partitions };
  const logDir = join(repoRoot(), '.runplane', 'test-logs', tag);
  const tls = (opts.tls ?? true) ? await createDevNatsTls(join(logDir, 'nats-tls')) : null;
  const admin = { user: users.admin.user, pass: users.admin.password, ...(tls ? { caFile: tls.caFile } : {}) };
  const config = natsAuthConfig(space, users) + (tls ? `\n${natsTlsConfig(tls)}` : '');
  let nats: TestNatsServer | null = null;
  const natsUrl = opts.nats
    ? await opts.nats(config, admin)
    : (nats = await TestNatsServer.start({ bin: testNatsServerBinary(), config, auth: admin })).url;
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NATS_URL: natsUrl,
    // every service, the admin's provisioning and the test's own log verify the server against the file's CA
    ...(tls ? { NATS_CA_FILE: tls.caFile } : {}),
    DATABASE_URL: `postgresql://postgres@127.0.0.1:5432/rp_${tag}`,
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    RUNPLANE_PARTITIONS: String(partitions),
    NO_COLOR: '1',
    // a failing scripted model is retried after a short backoff, so the suites that script failures
    // settle in seconds; test/e2e/model-retry.test.ts sets the production-like backoff it checks (K7)
    RUNPLANE_MODEL_RETRY_MIN_MS: '100',
    RUNPLANE_MODEL_RETRY_MAX_MS: '1000',
    // a test's stack lives a minute or less: its idle RSS is not worth the start-up collections'
    // CPU (about 1.6 s per stack, some 50 stacks a suite; docs/performance.md)
    RUNPLANE_STARTUP_COLLECTION: 'false',
    ...envOverrides,
  };
  delete env.NATS_USER;
  delete env.NATS_PASSWORD;
  if (!tls && !envOverrides.NATS_CA_FILE) delete env.NATS_CA_FILE;
  if (!(await ensureDatabaseExists(env.DATABASE_URL!))) {
    await nats?.cleanup();
    throw new Error('PostgreSQL is not reachable at 127.0.0.1:5432');
  }
  let log: EventLog | null = null;
  let stack: Stack;
  try {
    stack = await startStack({
      env,
      logDir,
      natsUsers: users,
      ...(opts.modelBaseUrl ? { modelBaseUrl: opts.modelBaseUrl } : {}),
      ...(opts.replicas ? { replicas: opts.replicas } : {}),
    });
    // the test's own log acts for every owner (its appends are signed with each owner's key, as the
    // stack's services sign theirs) and reads as the services do: an unsigned event is not a fact
    const signing = users.signing!;
    log = await EventLog.connect({
      natsUrl,
      stream: space.stream,
      prefix: space.prefix,
      partitions,
      name: 'e2e-test',
      ...admin,
      signingKeyFiles: signing.keyFiles,
      publicKeysFile: signing.publicKeysFile,
    });
  } catch (e) {
    if (log) {
      await destroyBus(log);
      await log.close();
    }
    await dropDatabase(env.DATABASE_URL!);
    await nats?.cleanup();
    throw e;
  }
  const adminLog = log;
  const modelAdmin = stack.modelUrl.replace(/\/v1$/, '/_scripted');
  return {
    tag,
    env,
    stack,
    log: adminLog,
    users,
    nats,
    tls: natsTlsOptions(natsUrl, tls?.caFile),
    get client() {
      return new PatientClient(stack.endpoints);
    },
    async modelRequests() {
      const res = await modelAdminFetch(`${modelAdmin}/stats`);
      const body = (await res.json()) as { chatRequests: number };
      return body.chatRequests;
    },
    async setScenario(scenario, key) {
      const res = await modelAdminFetch(`${modelAdmin}/scenario${key ? `?key=${encodeURIComponent(key)}` : ''}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(scenario),
      });
      if (!res.ok) throw new Error(`scenario rejected: ${res.status} ${await res.text()}`);
    },
    async waitForSettlement(runId, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      const reader = runReader(adminLog, runId);
      let events: StoredEvent[] = [];
      for (;;) {
        let readError: unknown = null;
        const mark = runMark(adminLog, runId);
        try {
          events = await reader.read();
        } catch (e) {
          // a read timing out on a loaded machine (dozens of Runs polled at once, seen in CI) is
          // the test's own poll failing, not the Run: poll again until the deadline
          readError = e;
        }
        if (events.some((e) => e.event.type === 'run.settled')) return events;
        if (Date.now() > deadline) {
          throw new Error(
            `run ${runId} did not settle within ${timeoutMs} ms; events: ${events.map((e) => e.event.type).join(', ')}${readError ? `; last read failed: ${readError instanceof Error ? readError.message : JSON.stringify(readError)}` : ''}`,
          );
        }
        await changedSince(adminLog, runId, mark, Math.min(RUN_WAKE_FALLBACK_MS, Math.max(10, deadline - Date.now())));
      }
    },
    async stop() {
      await stack.stop();
      try {
        const audit = opts.audit ?? 'strict';
        if (audit !== 'off') await auditOnStop(tag, adminLog, audit);
      } finally {
        await destroyBus(adminLog);
        await adminLog.close();
        await dropDatabase(env.DATABASE_URL!);
        await nats?.cleanup();
        for (const dir of opts.removeOnStop ?? []) rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Audits every Run the file's stack left in its log (libs/audit, K11), once the services are
 * stopped: prints one `AUDIT |` line (the summary and the first violations); with `strict`, a
 * broken check fails the file's clean-up.
 */
async function auditOnStop(tag: string, log: EventLog, mode: 'report' | 'strict'): Promise<void> {
  const report = auditRuns(await readForAudit(log, { all: true }));
  const s = report.summary;
  const violations = report.runs.flatMap((r) =>
    r.checks.flatMap((c) => c.violations.map((v) => `${r.runId} ${c.contract} ${c.id}${v.seq === null ? '' : ` #${v.seq}`}: ${v.message}`)),
  );
  // messages gone from the stream (no back-link shows a Run's last or only event erased)
  if (s.erased && s.erased.count > 0) violations.unshift(`stream: ${s.erased.count} message(s) erased: #${s.erased.seqs.join(', #')}`);
  process.stdout.write(
    `AUDIT | ${tag} | ${s.runs} runs, ${s.events} events | ${s.clean} clean, ${s.broken} broken, ${s.open} not settled, ${s.anomalies} unverified, ${s.erased?.count ?? 0} erased |${violations
      .slice(0, 20)
      .map((v) => `\n  ${v}`)
      .join('')}\n`,
  );
  if (mode === 'strict' && !report.clean)
    throw new Error(
      `the audit of ${tag}'s log found ${s.broken} broken run(s), ${s.erased?.count ?? 0} erased message(s):\n${violations.join('\n')}`,
    );
}

/**
 * `fetch` to the scripted model's admin routes, tried once more on a new connection when the
 * server closed the kept-alive one as the request went out ("other side closed": seen once by
 * test/e2e/audit.test.ts in a full run at load 15-26), as {@link RunplaneClient} does for the services: setting a scenario under a
 * key and reading the counters are safe to repeat.
 */
function modelAdminFetch(url: string, init?: RequestInit): Promise<Response> {
  return retry('closedConnection', () => fetch(url, init), { shouldRetry: ({ error }) => closedByServer(error) });
}

/** Polls `fn` until it returns a non-null value or the timeout passes. */
export async function eventually<T>(fn: () => Promise<T | null | undefined>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== null && v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 150));
  }
}
