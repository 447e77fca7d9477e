import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { EventCatalog, EventTypes } from '@runplane/contracts';
import { BUS_SERVICES, busPermissions, DEPLOYED_SPACE, renderNatsAuthorization, runSubjectTokensOf } from '@runplane/eventlog';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

describe('NATS users and permissions (libs/eventlog bus.ts)', () => {
  it('deploy/nats/accounts.conf is the one rendered from bus.ts (regenerate: npm run runplane -- docs nats-auth > deploy/nats/accounts.conf)', () => {
    expect(readFileSync(join(root, 'deploy', 'nats', 'accounts.conf'), 'utf8')).toBe(renderNatsAuthorization(DEPLOYED_SPACE, 'env'));
  });

  it('derives Run-subject publish rights from the event catalogue: only the lifecycle may publish settlements (K9), recovery fences the executors', () => {
    const tokens = Object.fromEntries(BUS_SERVICES.map((s) => [s, runSubjectTokensOf(s)]));
    expect(tokens).toEqual({
      admission: ['admission'],
      runtime: ['runtime'],
      tools: ['tools'],
      publication: ['publication'],
      recovery: ['runtime', 'tools', 'recovery'],
      lifecycle: ['lifecycle'],
      projector: [],
    });
    // every event type's owner can publish it
    for (const t of EventTypes) expect(runSubjectTokensOf(EventCatalog[t].owner).length).toBeGreaterThan(0);
    const perms = busPermissions(DEPLOYED_SPACE);
    const settlers = Object.entries(perms)
      .filter(([, p]) => p.publish.allow.some((s) => s === 'rp.run.*.lifecycle' || s === '>'))
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
          '$JS.API.CONSUMER.DELETE.RUNPLANE.rp-lifecycle-runtime',
        ]),
      );
    }
  });
});
