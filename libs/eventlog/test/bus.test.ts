import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventCatalog, EventTypes } from '@runplane/contracts';
import {
  accountOf,
  BUS_SERVICES,
  BUS_USERS,
  busPermissions,
  consumerFilters,
  consumerImports,
  downstreamAccountOf,
  DEFAULT_DOWNSTREAM_CONSUMERS,
  DEPLOYED_SPACE,
  downstreamConsumerNames,
  downstreamPasswordVariable,
  downstreamPermissions,
  downstreamUserName,
  durableNamesOf,
  inboxPrefixOf,
  natsUserName,
  natsUserOptions,
  OPS_ACCOUNT,
  opsImports,
  PARTITIONS_METADATA_KEY,
  passwordVariable,
  renderNatsAuthorization,
  runSubjectTokensOf,
  SERVICES_ACCOUNT,
} from '@runplane/eventlog';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

describe('NATS users and permissions (libs/eventlog bus.ts)', () => {
  it('deploy/nats/accounts.conf is the one rendered from bus.ts (regenerate: npm run runplane --silent -- docs nats-auth > deploy/nats/accounts.conf)', () => {
    expect(readFileSync(join(root, 'deploy', 'nats', 'accounts.conf'), 'utf8')).toBe(renderNatsAuthorization(DEPLOYED_SPACE, 'env'));
  });

  it("deploy/nats/values-auth.yaml gives nats-server every user's password variable (a missing one stops the server at start-up)", () => {
    const values = readFileSync(join(root, 'deploy', 'nats', 'values-auth.yaml'), 'utf8');
    for (const user of BUS_USERS) {
      expect(values).toContain(`${passwordVariable(user)}:`);
      expect(values).toContain(`secretKeyRef: { name: runplane-nats-users, key: ${user} }`);
    }
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS) {
      expect(values).toContain(`${downstreamPasswordVariable(name)}:`);
      expect(values).toContain(`secretKeyRef: { name: runplane-nats-users, key: ${name} }`);
    }
  });

  it('deploy/nats/stream-RUNPLANE.json creates the stream with the deployed partition count in its metadata (RUNPLANE_PARTITIONS cannot change it later)', () => {
    const stream = JSON.parse(readFileSync(join(root, 'deploy', 'nats', 'stream-RUNPLANE.json'), 'utf8')) as {
      subjects: string[];
      metadata: Record<string, string>;
    };
    expect(stream.subjects).toEqual([`${DEPLOYED_SPACE.prefix}.run.>`]);
    expect(stream.metadata).toEqual({ [PARTITIONS_METADATA_KEY]: String(DEPLOYED_SPACE.partitions) });
  });

  it('derives Run-subject publish rights from the event catalogue: only the lifecycle may publish settlements (K9), recovery fences the executors', () => {
    const tokens = Object.fromEntries(BUS_SERVICES.map((s) => [s, runSubjectTokensOf(s)]));
    expect(tokens).toEqual({
      admission: ['admission'],
      runtime: ['runtime'],
      tools: ['tools'],
      publication: ['publication'],
      // recovery appends nothing on its own subject any more: the runtime records its own lease grant with its first event
      recovery: ['runtime', 'tools'],
      lifecycle: ['lifecycle'],
      projector: [],
    });
    // every event type's owner can publish it
    for (const t of EventTypes) expect(runSubjectTokensOf(EventCatalog[t].owner).length).toBeGreaterThan(0);
    const perms = busPermissions(DEPLOYED_SPACE);
    const settlers = Object.entries(perms)
      .filter(([, p]) => p.publish.allow.some((s) => s === 'rp.run.*.lifecycle.*' || s === '>'))
      .map(([u]) => u);
    expect(settlers.sort()).toEqual(['admin', 'lifecycle']);
  });

  it('lets no service user delete or purge the Run stream or its messages, nor delete a durable consumer', () => {
    const perms = busPermissions(DEPLOYED_SPACE);
    for (const user of [...BUS_SERVICES, 'ops'] as const) {
      const { allow, deny } = perms[user].publish;
      expect(allow.filter((s) => /STREAM\.(DELETE|PURGE\.RUNPLANE$|MSG\.DELETE|CREATE|UPDATE)/.test(s))).toEqual([]);
      expect(deny).toEqual(
        expect.arrayContaining([
          '$JS.API.STREAM.PURGE.RUNPLANE',
          '$JS.API.STREAM.MSG.DELETE.>',
          '$JS.API.CONSUMER.DELETE.RUNPLANE.rp-lifecycle-p0',
          '$JS.API.CONSUMER.DELETE.RUNPLANE.rp-lifecycle-p7',
        ]),
      );
    }
  });

  it('gives each service one durable per partition, on the subjects of that partition only (every subject for the owners that keep folds from deliveries), and lets it create, pull, ack and unpin only its own', () => {
    expect(durableNamesOf(DEPLOYED_SPACE, 'runtime')).toEqual(Array.from({ length: 8 }, (_, p) => `rp-runtime-p${p}`));
    // the hot-path owners take every subject of their partitions (their folds are kept from the deliveries, no read on the hot path)
    for (const service of ['runtime', 'tools', 'publication', 'lifecycle', 'recovery'] as const)
      expect(consumerFilters(DEPLOYED_SPACE, service, 3)).toEqual(['rp.run.*.*.3']);
    expect(consumerFilters(DEPLOYED_SPACE, 'admission', 3)).toEqual(['rp.run.*.runtime.3', 'rp.run.*.lifecycle.3']);
    expect(consumerFilters(DEPLOYED_SPACE, 'projector', 5)).toEqual(['rp.run.*.*.5']);
    const perms = busPermissions(DEPLOYED_SPACE);
    expect(perms.tools.publish.allow).toEqual(
      expect.arrayContaining([
        '$JS.API.CONSUMER.CREATE.RUNPLANE.rp-tools-p7',
        '$JS.API.CONSUMER.UNPIN.RUNPLANE.rp-tools-p7',
        '$JS.ACK.RUNPLANE.rp-tools-p7.>',
      ]),
    );
    expect(perms.tools.publish.deny).toEqual(
      expect.arrayContaining(['$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.rp-lifecycle-p2', '$JS.API.CONSUMER.UNPIN.RUNPLANE.rp-runtime-p0']),
    );
    // a process writes only its own service's membership keys
    expect(perms.tools.publish.allow).toContain('$KV.rp_heartbeats.tools.>');
    expect(perms.tools.publish.allow).not.toContain('$KV.rp_heartbeats.>');
  });

  it('gives each downstream durable a user of its own, alone in an account of its own: it reads the stream and uses its own durable, nothing else', () => {
    expect(DEFAULT_DOWNSTREAM_CONSUMERS).toEqual(['downstream-1', 'downstream-2', 'downstream-3', 'downstream-4']);
    const { publish, subscribe } = downstreamPermissions(DEPLOYED_SPACE, 'downstream-1');
    expect(downstreamUserName('downstream-1')).toBe('downstream-1');
    expect(downstreamPasswordVariable('downstream-1')).toBe('RUNPLANE_NATS_PASSWORD_DOWNSTREAM_1');
    expect(publish.allow).toEqual([
      '$JS.API.INFO',
      '$JS.API.STREAM.INFO.RUNPLANE',
      '$JS.API.DIRECT.GET.RUNPLANE',
      '$JS.API.DIRECT.GET.RUNPLANE.rp.run.>',
      '$JS.API.STREAM.MSG.GET.RUNPLANE',
      '$JS.API.CONSUMER.INFO.RUNPLANE.downstream-1',
      '$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.downstream-1',
      '$JS.ACK.RUNPLANE.downstream-1.>',
    ]);
    // another downstream's durable is not among them: one downstream service cannot move another's position
    expect(publish.allow.filter((p) => /downstream-[234]/.test(p))).toEqual([]);
    // every subject it may publish is imported by its account, and nothing of another durable
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS) {
      const own = consumerImports(DEPLOYED_SPACE, name).map((i) => i.subject);
      expect(own).toEqual(downstreamPermissions(DEPLOYED_SPACE, name).publish.allow);
      expect(own.filter((p) => /downstream-/.test(p) && !p.includes(`.${name}`))).toEqual([]);
      expect(
        consumerImports(DEPLOYED_SPACE, name)
          .filter((i) => i.response === 'stream')
          .map((i) => i.subject),
      ).toEqual(['$JS.API.DIRECT.GET.RUNPLANE', '$JS.API.DIRECT.GET.RUNPLANE.rp.run.>', `$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.${name}`]);
    }
    const imports = consumerImports(DEPLOYED_SPACE, 'downstream-1').map((i) => i.subject);
    // no create, update or delete: a request's body may name a deliver subject (docs/consumers.md)
    expect(imports.filter((p) => /\.(CREATE|DELETE)\./.test(p))).toEqual([]);
    // replies on its own inbox only (per-user reply subjects)
    expect(subscribe.allow).toEqual(['_INBOX_downstream-1.>']);
    const conf = renderNatsAuthorization(DEPLOYED_SPACE, 'env');
    // one account per downstream user, alone in it, importing only its own durable
    expect(downstreamAccountOf('downstream-1')).toBe('DOWNSTREAM_1');
    expect(conf).toContain(`{ service: "$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.downstream-1", accounts: ["DOWNSTREAM_1"], response: stream }`);
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS) {
      const block = conf.slice(
        conf.indexOf(`  ${downstreamAccountOf(name)} {`),
        conf.indexOf('\n  }', conf.indexOf(`  ${downstreamAccountOf(name)} {`)),
      );
      expect(block.match(/user: "[^"]+"/g)).toEqual([`user: "${name}"`]);
      expect(block.match(/downstream-[A-Za-z0-9_-]+/g)!.every((n) => n === name)).toBe(true);
      expect(block).not.toContain('jetstream');
    }
    expect(conf).toContain(`{ service: { account: "${SERVICES_ACCOUNT}", subject: "$JS.ACK.RUNPLANE.downstream-1.>" } }`);
    for (const name of DEFAULT_DOWNSTREAM_CONSUMERS)
      expect(conf).toContain(`user: "${name}"\n          password: $${downstreamPasswordVariable(name)}`);
    expect(conf).not.toContain('runplane-consumer');
    // no service and not ops may pull from, take over or delete a downstream durable
    const perms = busPermissions(DEPLOYED_SPACE);
    for (const user of BUS_USERS.filter((u) => u !== 'admin'))
      expect(perms[user].publish.deny).toEqual(
        expect.arrayContaining([
          '$JS.API.CONSUMER.DELETE.RUNPLANE.downstream-1',
          '$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.downstream-2',
          '$JS.API.CONSUMER.CREATE.RUNPLANE.downstream-3',
        ]),
      );
    // a deployment's own names, each with the prefix and its own password
    expect(downstreamPermissions(DEPLOYED_SPACE, 'downstream-webhooks').publish.allow).toContain(
      '$JS.API.CONSUMER.MSG.NEXT.RUNPLANE.downstream-webhooks',
    );
    const fixed = Object.fromEntries(BUS_USERS.map((u) => [u, `pw-${u}`])) as Record<(typeof BUS_USERS)[number], string>;
    expect(() => renderNatsAuthorization(DEPLOYED_SPACE, { ...fixed, downstream: {} }, ['downstream-a'])).toThrow(RangeError);
    expect(renderNatsAuthorization(DEPLOYED_SPACE, { ...fixed, downstream: { 'downstream-a': 'pw-a' } }, ['downstream-a'])).toContain(
      'user: "downstream-a"\n          password: "pw-a"',
    );
    // two names whose password variables would be one
    expect(() => renderNatsAuthorization(DEPLOYED_SPACE, 'env', ['downstream-a-b', 'downstream-a_b'])).toThrow(RangeError);
    expect(() => downstreamConsumerNames(['webhooks'])).toThrow(RangeError);
    expect(() => downstreamConsumerNames(['downstream-a.b'])).toThrow(RangeError);
    expect(() => downstreamConsumerNames(['downstream-*'])).toThrow(RangeError);
  });

  it("puts ops alone in its own account, importing only the Run stream's reads: no consumer, no bucket, no Run subject, and its replies stay in its account", () => {
    expect(accountOf('ops')).toBe(OPS_ACCOUNT);
    expect(BUS_USERS.filter((u) => accountOf(u) !== SERVICES_ACCOUNT)).toEqual(['ops']);
    const imports = opsImports(DEPLOYED_SPACE).map((i) => i.subject);
    const { publish } = busPermissions(DEPLOYED_SPACE).ops;
    // it may publish exactly what its account imports
    expect(publish.allow).toEqual(imports);
    expect(
      imports.filter((p) => p.startsWith('rp.') || p.startsWith('$KV') || p.startsWith('$O') || p.includes('KV_') || p.includes('OBJ_')),
    ).toEqual([]);
    // no consumer of any kind (whole-log reads are batched direct gets, answered as a stream of messages)
    expect(imports.filter((p) => p.includes('CONSUMER'))).toEqual([]);
    const conf = renderNatsAuthorization(DEPLOYED_SPACE, 'env');
    expect(conf).not.toContain(`accounts: ["${OPS_ACCOUNT}"]`);
    expect(conf).toContain(
      `{ service: "$JS.API.DIRECT.GET.RUNPLANE", accounts: [${[...DEFAULT_DOWNSTREAM_CONSUMERS.map(downstreamAccountOf), OPS_ACCOUNT].map((a) => `"${a}"`).join(', ')}], response: stream }`,
    );
    expect(conf).toContain(
      `{ service: "$JS.API.STREAM.INFO.RUNPLANE", accounts: [${[...DEFAULT_DOWNSTREAM_CONSUMERS.map(downstreamAccountOf), OPS_ACCOUNT].map((a) => `"${a}"`).join(', ')}] }`,
    );
    const opsBlock = conf.slice(conf.indexOf(`  ${OPS_ACCOUNT} {`));
    expect(opsBlock).toContain('user: "runplane-ops"');
    expect(opsBlock).not.toContain('jetstream');
  });

  it("gives each user but the admin replies on its own inbox only, the prefix its connections set: no user may read another's replies", () => {
    const perms = busPermissions(DEPLOYED_SPACE);
    for (const user of BUS_USERS) {
      if (user === 'admin') continue;
      const inboxes = perms[user].subscribe.allow.filter((s) => s.startsWith('_INBOX'));
      expect(inboxes).toEqual([`_INBOX_${natsUserName(user)}.>`]);
      // the prefix a connection as this user takes (EventLog, RunStream, the heartbeat worker)
      expect(natsUserOptions(natsUserName(user), 'pw')).toEqual({
        user: natsUserName(user),
        pass: 'pw',
        inboxPrefix: `_INBOX_${natsUserName(user)}`,
      });
      // nothing else a client could receive replies on: not the default inbox, not another user's
      expect(perms[user].subscribe.allow.filter((s) => s !== inboxes[0] && (s.startsWith('_') || s === '>' || s.startsWith('*')))).toEqual([]);
    }
    // no connection without a user takes a prefix (a server without authorization: the client default)
    expect(natsUserOptions(undefined, undefined)).toEqual({});
    // a user name that is no single subject token could make one inbox cover another's
    for (const bad of ['', 'runplane.consumer', 'a b', 'runplane-*', '>']) expect(() => inboxPrefixOf(bad)).toThrow(RangeError);
  });
});
