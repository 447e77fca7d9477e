/**
 * `runplane provision` (docs/cli.md, docs/operations.md "NATS users and permissions") on a
 * nats-server with the Runplane users and permissions: as the admin it creates the stream, every
 * bucket and the downstream durables, and a second run creates nothing; as the ops user it is
 * refused with a reason that names the admin user it needs, and creates nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { natsCaEnvOf, natsEnvOf, startSecuredNats, startSecuredNatsCluster, type SecuredNats } from '@runplane/devstack';
import { EventLog, StreamNotFound } from '@runplane/eventlog';
import { provision } from '../dist/provision.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_PROV_${tag}`, prefix: `tprov${tag}`, partitions: 8 };
const stateDir = mkdtempSync(join(tmpdir(), 'rp-provision-'));
let nats: SecuredNats;

beforeAll(async () => {
  nats = await startSecuredNats({ stateDir, space, downstream: ['downstream-1'] });
}, 60_000);
afterAll(async () => {
  await nats?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

const envAs = (user: 'admin' | 'ops') => ({
  NATS_URL: nats.url,
  ...natsCaEnvOf(nats),
  ...natsEnvOf(nats.users, user),
  RUNPLANE_STREAM: space.stream,
  RUNPLANE_SUBJECT_PREFIX: space.prefix,
});

describe('runplane provision', () => {
  it('given no NATS_URL, then it is refused before anything connects, naming the setting: it never provisions the default server', async () => {
    const { NATS_URL: _url, ...unnamed } = envAs('admin');
    const lines: string[] = [];
    const refused = await provision(unnamed, (l) => lines.push(l), ['downstream-1']).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(refused?.message).toMatch(
      /^NATS_URL is not set: name the NATS server to provision .* never takes the default nats:\/\/127\.0\.0\.1:4222\)/,
    );
    expect(lines).toEqual([]);
  });

  it('given the ops user, then it is refused with a reason naming the admin user, and nothing is created', async () => {
    const lines: string[] = [];
    const refused = await provision(envAs('ops'), (l) => lines.push(l), ['downstream-1']).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(refused?.message).toMatch(
      /^only the NATS admin user may create the stream, buckets and durable consumers, not user runplane-ops: run it with NATS_USER=runplane-admin and its password in NATS_PASSWORD \(RUNPLANE_NATS_PASSWORD_ADMIN of the Secret runplane-nats;/,
    );
    expect(refused?.message).toMatch(/NATS said: .*permissions violation/i);
    expect(lines).toEqual([`provisioning stream ${space.stream} on NATS at ${nats.url}`]);
    // the admin finds no stream: nothing was created
    const { user, password: pass } = nats.users.admin;
    const opened = await EventLog.connect({ natsUrl: nats.url, user, pass, caFile: nats.caFile, ...space, create: false }).catch((e: unknown) => e);
    expect(opened).toBeInstanceOf(StreamNotFound);
  }, 60_000);

  it('given no NATS user, or the admin user with a wrong password, then it is refused with a reason naming the admin user it needs', async () => {
    const { NATS_USER: _user, NATS_PASSWORD: _pass, ...anonymous } = envAs('admin');
    for (const [env, who] of [
      [anonymous, 'a connection without NATS_USER'],
      [{ ...envAs('admin'), NATS_PASSWORD: 'not-the-password' }, 'user runplane-admin'],
    ] as const) {
      const refused = await provision(env, () => undefined, ['downstream-1']).then(
        () => null,
        (e: unknown) => e as Error,
      );
      expect(refused?.message).toContain(
        `NATS refused ${who} (no user, or a wrong password); provisioning needs the NATS admin user: run it with NATS_USER=runplane-admin`,
      );
      expect(refused?.message).toMatch(/NATS said: .*authorization violation/i);
    }
  }, 60_000);

  it('given the admin user, then it creates the stream, the buckets and the durable, and a second run changes nothing', async () => {
    const first: string[] = [];
    expect(await provision(envAs('admin'), (l) => first.push(l), ['downstream-1'])).toBe(0);
    expect(first[0]).toBe(`provisioning stream ${space.stream} on NATS at ${nats.url}`);
    expect(first[1]).toMatch(new RegExp(`^${space.stream}: 1 replica\\(s\\)`));
    expect(first.at(-1)).toMatch(/^downstream durable downstream-1: NATS user /);
    // one server: one replica is all there is, nothing to warn about
    expect(first.filter((l) => l.startsWith('warning'))).toEqual([]);
    const second: string[] = [];
    expect(await provision(envAs('admin'), (l) => second.push(l), ['downstream-1'])).toBe(0);
    // the same lines, but nothing created or put back the second time
    expect(second).toEqual(first.map((l) => l.replace(/; created$/, '')));
    expect(second.at(-1)).not.toMatch(/created|put back/);
  }, 60_000);

  it('given a 3-node cluster and the default of one replica, then it warns that the node holding them is a single point of loss, naming the setting', async () => {
    const clusterDir = mkdtempSync(join(tmpdir(), 'rp-provision-cluster-'));
    const cspace = { stream: `RPTEST_PROVC_${tag}`, prefix: `tprovc${tag}`, partitions: 8 };
    const cluster = await startSecuredNatsCluster({ stateDir: clusterDir, space: cspace });
    try {
      const lines: string[] = [];
      const env = {
        NATS_URL: cluster.url,
        ...natsCaEnvOf(cluster),
        ...natsEnvOf(cluster.users, 'admin'),
        RUNPLANE_STREAM: cspace.stream,
        RUNPLANE_SUBJECT_PREFIX: cspace.prefix,
      };
      expect(await provision(env, (l) => lines.push(l), ['downstream-1'])).toBe(0);
      expect(lines.filter((l) => l.startsWith('warning'))).toEqual([
        expect.stringMatching(/^warning: NATS at .* is a cluster \(.+\), but \d+ of these have 1 replica: .*Set RUNPLANE_NATS_REPLICAS=3 /),
      ]);
    } finally {
      await cluster.stop();
      rmSync(clusterDir, { recursive: true, force: true });
    }
  }, 120_000);
});
