/**
 * A service started before the admin's provisioning: on a first install, or an upgrade that adds a
 * bucket, the Kubernetes Job runs beside the rollout. A trial's lifecycle exited 1 within 2 s with
 * the server's "Permissions Violation for Publish to $JS.API.STREAM.CREATE.RUNPLANE", where the
 * docs promise a service that is not ready until the provisioning has run. Now it waits (kit
 * `untilProvisioned`), says what it waits for, and becomes ready once the stream and its buckets
 * exist.
 *
 * Given a private nats-server with the Runplane users and permissions (libs/devstack
 * natsAuthConfig, as deploy/nats/accounts.conf): when the lifecycle's bundle (what a deployment
 * runs) starts with nothing provisioned, or with its heartbeat bucket missing, then it does not
 * exit, says it waits for the provisioning (naming the stream, then the bucket), and is ready once
 * the admin has provisioned.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { natsAuthConfig, newNatsUsers } from '@runplane/devstack';
import { EventLog, provisionBus } from '@runplane/eventlog';
import { TestNatsServer } from '../../../test/support/nats-server.js';
import { testNatsServerBinary } from '../../../test/support/stack.js';
import { startServiceBundle } from '../../../test/support/service-bundle.js';

const tag = randomBytes(4).toString('hex');
const users = newNatsUsers();
const admin = { user: users.admin.user, pass: users.admin.password };
let server: TestNatsServer;
const started: ChildProcess[] = [];

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: testNatsServerBinary(), config: natsAuthConfig(space, users), auth: admin });
}, 60_000);
afterAll(async () => {
  for (const p of started) p.kill('SIGKILL');
  await server?.cleanup();
});

const space = { stream: `RPTEST_AWP_${tag}`, prefix: `tawp${tag}`, partitions: 2 };

/** The lifecycle's bundle as its Deployment runs it, on the private server as the lifecycle's user. */
function startLifecycle(overrides: NodeJS.ProcessEnv = {}) {
  const svc = startServiceBundle('lifecycle', server.url, { user: users.lifecycle.user, password: users.lifecycle.password }, space, overrides);
  started.push(svc.proc);
  return svc;
}

async function provision(): Promise<void> {
  const log = await EventLog.connect({ natsUrl: server.url, ...admin, ...space, name: 'admin' });
  try {
    await provisionBus(log);
  } finally {
    await log.close();
  }
}

/** Everything provisioned but the heartbeat bucket (as before an upgrade that adds a bucket). */
async function provisionedWithoutHeartbeats(): Promise<void> {
  await provision();
  const log = await EventLog.connect({ natsUrl: server.url, ...admin, ...space, name: 'admin' });
  await log.jsm.streams.delete(`KV_${space.prefix}_heartbeats`);
  await log.close();
}

describe('a service started before the provisioning', () => {
  it('given nothing provisioned, when the lifecycle starts, then it waits for the stream, saying so, and is ready once the admin has provisioned', async () => {
    const svc = startLifecycle();
    await svc.until('waiting line', () => /waiting for the provisioning/.test(svc.out.stderr));
    expect(svc.out.stderr).toContain(`stream ${space.stream} does not exist`);
    expect(svc.out.stderr).toContain('runplane provision');
    expect(svc.out.stderr).not.toMatch(/failed to start/);
    expect(svc.out.exit).toBeNull();
    await provision();
    await svc.until('ready line', () => /ready on/.test(svc.out.stdout));
    expect(svc.out.exit).toBeNull();
    svc.proc.kill('SIGTERM');
    await svc.until('exit', () => svc.out.exit !== null);
    expect(svc.out.exit).toBe(0);
  }, 90_000);

  it('given the stream but not its heartbeat bucket (an upgrade that adds a bucket), when the lifecycle starts, then it waits for that bucket and is ready once it is provisioned', async () => {
    await provisionedWithoutHeartbeats();
    const svc = startLifecycle();
    // said in the service's log (a JSON line of the partition ownership's logger)
    const logged = () => svc.out.stdout + svc.out.stderr;
    await svc.until('waiting line', () => /waiting for the provisioning/.test(logged()));
    expect(logged()).toContain(`bucket ${space.prefix}_heartbeats does not exist (JetStream stream KV_${space.prefix}_heartbeats)`);
    expect(svc.out.exit).toBeNull();
    await provision();
    await svc.until('ready line', () => /ready on/.test(svc.out.stdout));
    svc.proc.kill('SIGTERM');
    await svc.until('exit', () => svc.out.exit !== null);
    expect(svc.out.exit).toBe(0);
  }, 90_000);

  it('given its bucket not provisioned, when the waiting lifecycle is stopped (a rollout, a scale-down), then it says it stopped while starting and exits 0, not by the signal', async () => {
    await provisionedWithoutHeartbeats();
    const svc = startLifecycle();
    await svc.until('waiting line', () => /waiting for the provisioning/.test(svc.out.stdout + svc.out.stderr));
    svc.proc.kill('SIGTERM');
    await svc.until('exit', () => svc.out.exit !== null);
    expect(svc.out.exit).toBe(0);
    expect(svc.out.stderr).toContain('stopped while starting, before it was ready');
    expect(svc.out.stderr).not.toMatch(/failed to start/);
  }, 60_000);

  it('given a stream name its permissions do not name, when the lifecycle starts, then it fails at once, saying to check RUNPLANE_STREAM or render the permissions for it (not a wait)', async () => {
    const svc = startLifecycle({ RUNPLANE_STREAM: `OTHER_${tag}` });
    await svc.until('exit', () => svc.out.exit !== null);
    expect(svc.out.exit).toBe(1);
    expect(svc.out.stderr).toContain(`may not read a stream of that name`);
    expect(svc.out.stderr).toContain(`runplane docs nats-auth --stream OTHER_${tag}`);
    expect(svc.out.stderr).not.toMatch(/waiting for the provisioning/);
  }, 60_000);
});
