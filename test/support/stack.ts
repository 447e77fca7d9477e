/**
 * End-to-end test stack: the real processes (scripted model + every service) against the real
 * NATS JetStream and PostgreSQL of this machine, isolated by a unique stream, subject prefix and
 * database per test file, all removed afterwards.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { StoredEvent } from '@runplane/contracts';
import { RunplaneClient } from '@runplane/client';
import { dropDatabase, ensureDatabaseExists, repoRoot, startStack, type Stack } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';

export interface TestStack {
  tag: string;
  env: NodeJS.ProcessEnv;
  stack: Stack;
  log: EventLog;
  client: RunplaneClient;
  /** Total chat requests the scripted model received. */
  modelRequests(): Promise<number>;
  /** Replaces the scripted model's scenario (and resets its counters), or binds one to `key` (requests whose text contains the key). */
  setScenario(scenario: unknown, key?: string): Promise<void>;
  /** Resolves with the Run's events once it has a settlement (polling the log). */
  waitForSettlement(runId: string, timeoutMs?: number): Promise<StoredEvent[]>;
  stop(): Promise<void>;
}

/**
 * Starts the stack for one test file. `envOverrides` set service configuration (short lease TTLs,
 * ack waits) for fault tests.
 */
export async function startTestStack(name: string, envOverrides: NodeJS.ProcessEnv = {}): Promise<TestStack> {
  const tag = `${name}${randomBytes(3).toString('hex')}`.toLowerCase();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NATS_URL: process.env.NATS_URL ?? 'nats://127.0.0.1:4222',
    DATABASE_URL: `postgresql://postgres@127.0.0.1:5432/rp_${tag}`,
    RUNPLANE_STREAM: `RPT_${tag}`,
    RUNPLANE_SUBJECT_PREFIX: `t${tag}`,
    NO_COLOR: '1',
    ...envOverrides,
  };
  if (!(await ensureDatabaseExists(env.DATABASE_URL!))) throw new Error('PostgreSQL is not reachable at 127.0.0.1:5432');
  const log = await EventLog.connect({
    natsUrl: env.NATS_URL!,
    stream: env.RUNPLANE_STREAM!,
    prefix: env.RUNPLANE_SUBJECT_PREFIX!,
    name: 'e2e-test',
  });
  let stack: Stack;
  try {
    stack = await startStack({ env, logDir: join(repoRoot(), '.runplane', 'test-logs', tag) });
  } catch (e) {
    await log.destroyStream();
    await log.close();
    await dropDatabase(env.DATABASE_URL!);
    throw e;
  }
  const modelAdmin = stack.modelUrl.replace(/\/v1$/, '/_scripted');
  return {
    tag,
    env,
    stack,
    log,
    get client() {
      return new RunplaneClient(stack.endpoints);
    },
    async modelRequests() {
      const res = await fetch(`${modelAdmin}/stats`);
      const body = (await res.json()) as { chatRequests: number };
      return body.chatRequests;
    },
    async setScenario(scenario, key) {
      const res = await fetch(`${modelAdmin}/scenario${key ? `?key=${encodeURIComponent(key)}` : ''}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(scenario),
      });
      if (!res.ok) throw new Error(`scenario rejected: ${res.status} ${await res.text()}`);
    },
    async waitForSettlement(runId, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const events = await log.readRun(runId);
        if (events.some((e) => e.event.type === 'run.settled')) return events;
        if (Date.now() > deadline) {
          throw new Error(`run ${runId} did not settle within ${timeoutMs} ms; events: ${events.map((e) => e.event.type).join(', ')}`);
        }
        await new Promise((r) => setTimeout(r, 150));
      }
    },
    async stop() {
      await stack.stop();
      await log.jsm.streams.delete(`OBJ_${env.RUNPLANE_SUBJECT_PREFIX}_results`).catch(() => undefined);
      await log.jsm.streams.delete(`KV_${env.RUNPLANE_SUBJECT_PREFIX}_leases`).catch(() => undefined);
      await log.jsm.streams.delete(`KV_${env.RUNPLANE_SUBJECT_PREFIX}_claims`).catch(() => undefined);
      await log.jsm.streams.delete(`KV_${env.RUNPLANE_SUBJECT_PREFIX}_deadlines`).catch(() => undefined);
      await log.destroyStream();
      await log.close();
      await dropDatabase(env.DATABASE_URL!);
    },
  };
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
