/**
 * `runplane docs nats-auth` renders the NATS users and permissions for the deployment's own stream,
 * subject prefix and partition count. It rendered only the default (RUNPLANE, rp, 8): a trial that
 * provisioned 16 partitions got permissions for p0-p7 alone, and its lifecycle was refused the
 * consumers of p8-p15 at every attempt, never ready.
 */
import { describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));
const accountsConf = fileURLToPath(new URL('../../../deploy/nats/accounts.conf', import.meta.url));

/** Runs `runplane docs nats-auth` with `args` and `env` (without the caller's RUNPLANE_STREAM, prefix and partitions). */
function natsAuth(args: string[], env: Record<string, string> = {}) {
  const base = { ...process.env };
  delete base.RUNPLANE_STREAM;
  delete base.RUNPLANE_SUBJECT_PREFIX;
  delete base.RUNPLANE_PARTITIONS;
  return spawnSync(process.execPath, [CLI, 'docs', 'nats-auth', ...args], { env: { ...base, ...env }, encoding: 'utf8' });
}

describe('runplane docs nats-auth', () => {
  it('given no option, then it prints the deployment file as committed (deploy/nats/accounts.conf)', () => {
    const r = natsAuth([]);
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(readFileSync(accountsConf, 'utf8'));
  });

  it('given --stream, --prefix and --partitions, then every permission names that space, every partition included, and the header says how to render it again', () => {
    const r = natsAuth(['--stream', 'RP2', '--prefix', 'xx', '--partitions', '16']);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('$JS.API.CONSUMER.CREATE.RP2.xx-lifecycle-p15');
    expect(r.stdout).not.toContain('.RUNPLANE.');
    expect(r.stdout).toContain('npm run runplane --silent -- docs nats-auth --stream RP2 --prefix xx --partitions 16 >');
  });

  it('given the space in the environment (as the services read it), then it is used when no option names it', () => {
    const r = natsAuth([], { RUNPLANE_PARTITIONS: '12' });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('rp-lifecycle-p11');
    expect(r.stdout).not.toContain('rp-lifecycle-p12');
  });

  it('given a partition count out of range, then it refuses with the setting named and prints nothing', () => {
    const r = natsAuth(['--partitions', '999']);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^runplane: Invalid configuration: RUNPLANE_PARTITIONS: /);
  });
});
