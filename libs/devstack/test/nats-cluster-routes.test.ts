/**
 * The local cluster's routes authenticate (libs/devstack `startNatsCluster`): another nats-server
 * on the machine that routes to a node without the cluster's route credentials is refused, so it
 * cannot read or write what the cluster carries past the client users; with them it joins (the
 * check can fail).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import getPort from 'get-port';
import { repoRoot, startNatsCluster, type NatsCluster } from '@runplane/devstack';
import { SUITE_NATS, suiteNatsConfig, suiteNatsOptions } from '../../../test/support/nats-server.js';

let dir: string;
let cluster: NatsCluster;
const rogues: ChildProcess[] = [];
const connections: NatsConnection[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'rp-routes-'));
  // the cluster's client ports require the suite's user and TLS; the rogue servers below are anyone's
  cluster = await startNatsCluster({ nodes: 3, stateDir: join(dir, 'cluster'), config: suiteNatsConfig(), auth: SUITE_NATS, root: repoRoot() });
}, 60_000);
afterAll(async () => {
  await Promise.all(connections.map((c) => c.close().catch(() => undefined)));
  for (const r of rogues) r.kill('SIGKILL');
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a nats-server of its own routing to node n1 (with `auth` in the route URL, or none), and a client on it. */
async function rogue(name: string, auth: string): Promise<NatsConnection> {
  const port = await getPort({ host: '127.0.0.1' });
  const conf = join(dir, `${name}.conf`);
  writeFileSync(
    conf,
    [
      `server_name: ${name}`,
      `listen: 127.0.0.1:${port}`,
      `cluster { name: runplane, listen: 127.0.0.1:${await getPort({ host: '127.0.0.1' })}, routes: [nats-route://${auth}127.0.0.1:${cluster.nodes[0]!.clusterPort}] }`,
    ].join('\n'),
  );
  const child = spawn(cluster.server.bin, ['-c', conf, '-l', join(dir, `${name}.log`)], { stdio: 'ignore' });
  rogues.push(child);
  for (let i = 0; ; i++) {
    try {
      // a dial that hangs while the server starts (a full run at load 14 saw one time out after
      // the client's default 20 s, the whole case's budget) is dropped after 2 s and tried again
      const nc = await connect({ servers: `nats://127.0.0.1:${port}`, reconnect: false, timeout: 2_000 });
      connections.push(nc);
      return nc;
    } catch (e) {
      if (i > 100) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** Whether a message published on the rogue reaches a subscriber on n1 within `ms` (polling by republishing). */
async function reaches(from: NatsConnection, ms: number): Promise<boolean> {
  const n1 = await connect(suiteNatsOptions(cluster.nodes[0]!.url));
  connections.push(n1);
  const subject = `probe.${Math.random().toString(36).slice(2)}`;
  const sub = n1.subscribe(subject, { max: 1 });
  await n1.flush();
  const got = (async () => {
    for await (const _ of sub) return true;
    return false;
  })();
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    from.publish(subject, 'x');
    const done = await Promise.race([got, new Promise((r) => setTimeout(() => r(null), 100))]);
    if (done) return true;
  }
  sub.unsubscribe();
  return false;
}

describe('the routes of the local cluster', () => {
  it('refuse a nats-server without the route credentials (it is told authorization failed, nothing crosses)', async () => {
    const nc = await rogue('rogue-a', '');
    const log = join(dir, 'rogue-a.log');
    const refused = async () => {
      for (let i = 0; i < 200; i++) {
        if (/authorization/i.test(readFileSync(log, { encoding: 'utf8', flag: 'a+' }))) return true;
        await new Promise((r) => setTimeout(r, 50));
      }
      return false;
    };
    expect(await refused()).toBe(true);
    expect(await reaches(nc, 1_500)).toBe(false);
  }, 30_000);

  it('admit one with them (so the refusal above is the credentials)', async () => {
    const nc = await rogue('rogue-b', `${cluster.routes.user}:${cluster.routes.password}@`);
    expect(await reaches(nc, 10_000)).toBe(true);
  }, 30_000);
});
