/**
 * A local stack started again on a kept store (`npm run runplane -- up` after `npm run demo`, or
 * with another RUNPLANE_PARTITIONS) takes the partition count of the Run stream the store holds, as
 * every service's event log does (the stream wins): the server's permissions name the stream's
 * partitions, so each service may create its consumers on all of them. Before, they named the
 * configured count: with fewer, the services' consumers of the other partitions were refused
 * (Permissions Violation) and `up` failed after 60 s with an empty reason. The same holds for a
 * kept cluster store (`up --cluster`).
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { startSecuredNats, startSecuredNatsCluster, storedPartitionCount, type SecuredNats } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';

const dir = mkdtempSync(join(tmpdir(), 'rp-kept-parts-'));
const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_KEPT_PARTS_${tag}`, prefix: `tkp${tag}`, partitions: 4 };
const started: SecuredNats[] = [];
afterAll(async () => {
  for (const n of started) await n.stop();
  rmSync(dir, { recursive: true, force: true });
});

const adminOf = (n: SecuredNats) => ({ user: n.users.admin.user, pass: n.users.admin.password, ...(n.caFile ? { caFile: n.caFile } : {}) });
const durablesInConfig = (config = join(dir, 'nats', 'server.conf')) =>
  [...readFileSync(config, 'utf8').matchAll(new RegExp(`${space.prefix}-runtime-p(\\d+)`, 'g'))].map((m) => Number(m[1]));

describe("a kept store's Run stream decides the partition count", () => {
  it('given a store whose stream has 4 partitions, when started again asking for 2 (or 8), then the permissions name its 4 and the start says so', async () => {
    const first = await startSecuredNats({ stateDir: dir, space });
    started.push(first);
    expect(first.partitions).toBe(4);
    expect(first.newLog).toBe(true);
    const log = await EventLog.connect({ natsUrl: first.url, ...space, name: 'kept-parts-test', ...adminOf(first) });
    await log.ensureStream();
    await log.close();
    expect(await storedPartitionCount(first.url, adminOf(first), space.stream)).toBe(4);
    await first.stop();
    started.pop();

    for (const asked of [2, 8]) {
      const again = await startSecuredNats({ stateDir: dir, space: { ...space, partitions: asked } });
      started.push(again);
      expect(again.partitions).toBe(4);
      expect(again.newLog).toBe(false);
      expect(again.note).toContain(`the kept stream ${space.stream} has 4 partitions, used instead of the ${asked} configured`);
      expect(Math.max(...durablesInConfig())).toBe(3);
      // the services' view agrees: a log connected with the asked count takes the stream's
      const service = await EventLog.connect({ natsUrl: again.url, ...space, partitions: asked, name: 'kept-parts-test', ...adminOf(again) });
      service.onPartitionsMismatch = () => undefined;
      await service.ensureStream();
      expect(service.space.partitions).toBe(4);
      await service.close();
      await again.stop();
      started.pop();
    }
  }, 90_000);

  it('given a store without the stream, when started, then the count asked for is used and nothing is said', async () => {
    const fresh = await startSecuredNats({ stateDir: join(dir, 'fresh'), space: { ...space, stream: `${space.stream}_FRESH`, partitions: 2 } });
    started.push(fresh);
    expect(fresh.partitions).toBe(2);
    expect(fresh.newLog).toBe(true);
    expect(fresh.note).not.toContain('kept stream');
    expect(await storedPartitionCount(fresh.url, adminOf(fresh), `${space.stream}_FRESH`)).toBeNull();
  }, 60_000);

  it('given a cluster store whose stream has 4 partitions (up --cluster), when started again asking for 2, then the permissions of every node name its 4 and the start says so', async () => {
    const clusterDir = join(dir, 'cluster');
    const first = await startSecuredNatsCluster({ stateDir: clusterDir, space });
    started.push(first);
    expect(first.partitions).toBe(4);
    const log = await EventLog.connect({ natsUrl: first.url, ...space, replicas: 3, name: 'kept-parts-test', ...adminOf(first) });
    await log.ensureStream();
    await log.close();
    await first.stop();
    started.pop();

    expect(first.newLog).toBe(true);
    const again = await startSecuredNatsCluster({ stateDir: clusterDir, space: { ...space, partitions: 2 } });
    started.push(again);
    expect(again.partitions).toBe(4);
    expect(again.newLog).toBe(false);
    expect(again.note).toContain(`the kept stream ${space.stream} has 4 partitions, used instead of the 2 configured`);
    for (const node of again.cluster!.nodes)
      expect(Math.max(...durablesInConfig(join(clusterDir, 'nats-cluster', node.name, 'server.conf')))).toBe(3);
  }, 180_000);
});
