/**
 * A service whose NATS permissions name fewer partitions than its stream has: the broker refuses it
 * the consumers of the others at every try. A trial's lifecycle, so configured, retried for ever
 * (136 permission violations in 65 s), never ready and never failed. Now the refusal is taken as
 * permanent (kit `permissionViolationOf`: the client reports it as a failed request, which was
 * retried as transient) and the start fails, saying how to render the permissions for this stream.
 *
 * Given a private nats-server with the Runplane users and permissions rendered for 8 partitions
 * (libs/devstack natsAuthConfig, as deploy/nats/accounts.conf), and the stream created with 16:
 * when the lifecycle's bundle (what a deployment runs) starts, then it exits 1 within seconds, its
 * last line naming the refused consumer and the `docs nats-auth` options for 16 partitions.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { natsAuthConfig, newNatsUsers } from '@runplane/devstack';
import { EventLog, provisionBus } from '@runplane/eventlog';
import { TestNatsServer } from '../../../test/support/nats-server.js';
import { testNatsServerBinary } from '../../../test/support/stack.js';
import { startServiceBundle } from '../../../test/support/service-bundle.js';

const tag = randomBytes(4).toString('hex');
const users = newNatsUsers();
const space = { stream: `RPTEST_CRF_${tag}`, prefix: `tcrf${tag}` };
let server: TestNatsServer;

beforeAll(async () => {
  const admin = { user: users.admin.user, pass: users.admin.password };
  server = await TestNatsServer.start({ bin: testNatsServerBinary(), config: natsAuthConfig({ ...space, partitions: 8 }, users), auth: admin });
  // the admin provisions the stream (with 16 partitions in its metadata) and the buckets, as
  // `runplane provision` does: the permissions name 8
  const log = await EventLog.connect({ natsUrl: server.url, ...admin, ...space, partitions: 16, name: 'admin' });
  await provisionBus(log);
  await log.close();
}, 60_000);
afterAll(async () => {
  await server?.cleanup();
});

describe('a service refused its partition consumers by the broker', () => {
  it('given permissions rendered for 8 partitions and a stream of 16, when the lifecycle starts, then it fails at once, naming the consumer and how to render the permissions', async () => {
    const svc = startServiceBundle(
      'lifecycle',
      server.url,
      { user: users.lifecycle.user, password: users.lifecycle.password },
      { ...space, partitions: 16 },
    );
    const killer = setTimeout(() => svc.proc.kill('SIGKILL'), 45_000);
    await svc.until('exit', () => svc.out.exit !== null, 50_000).finally(() => clearTimeout(killer));
    const { stdout, stderr, exit: code } = svc.out;
    expect(stdout).not.toContain('ready on');
    expect(code).toBe(1);
    const last = JSON.parse(stderr.trim().split('\n').at(-1)!) as { level: number; msg: string };
    expect(last.level).toBe(60);
    expect(last.msg).toMatch(
      new RegExp(`^lifecycle failed to start: the NATS server refuses this service the consumer ${space.prefix}-lifecycle-p(8|9|1[0-5]) `),
    );
    expect(last.msg).toContain(`runplane docs nats-auth --stream ${space.stream} --prefix ${space.prefix} --partitions 16`);
    // refused once per partition, not retried: no "retrying" line for a refused consumer
    expect(stderr).not.toMatch(/could not start a partition consumer yet; retrying[^\n]*Permissions Violation/);
  }, 60_000);
});
