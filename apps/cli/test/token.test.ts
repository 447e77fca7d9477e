/**
 * `runplane token` (docs/cli.md, README "Quick start"): a token for any principal of the local
 * stack, minted from the signing key `up` generated, that the services configured as `up`
 * configures them (`RUNPLANE_AUTH_JWKS_FILE` of that key) accept as that principal with its
 * scopes; refused with the reason when there is no key or an input is out of range.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { AuthConfig } from '@runplane/contracts';
import { createDevAuth, type DevAuth } from '@runplane/devstack/auth';
import { Authenticator } from '@runplane/service-kit';

const dir = mkdtempSync(join(tmpdir(), 'rp-token-'));
const keyDir = join(dir, 'auth');
let dev: DevAuth;
let services: Authenticator;

beforeAll(async () => {
  dev = await createDevAuth(keyDir); // what `runplane up` does at its start
  services = Authenticator.fromConfig(AuthConfig.parse(dev.env));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));
/** The built CLI's `token` command with `args`. */
const token = (...args: string[]) => spawnSync(process.execPath, [CLI, 'token', ...args], { encoding: 'utf8', timeout: 60_000 });

describe('runplane token', () => {
  it('given the local stack key, then it prints one token the services accept as that principal, without the admin scope', async () => {
    const r = token('--sub', 'eve', '--auth-dir', keyDir);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const lines = r.stdout.split('\n');
    expect(lines).toHaveLength(2); // the token and the final newline: usable as $(runplane token ...)
    const p = await services.authenticate(`Bearer ${lines[0]}`);
    expect(p).toMatchObject({ sub: 'eve', scopes: [], admin: false, unauthenticated: false });
    // one hour by default (plus the 30 s clock-skew allowance)
    expect(p.expiresAt! - Date.now()).toBeGreaterThan(3_500_000);
    expect(p.expiresAt! - Date.now()).toBeLessThanOrEqual(3_630_000);
  }, 60_000);

  it('given --scope runplane:admin twice with another scope and --ttl, then the token carries them and lives that long', async () => {
    const r = token('--sub', 'ops team', '--scope', 'runplane:admin', '--scope', 'reports:read', '--ttl', '120', '--auth-dir', keyDir);
    expect(r.status).toBe(0);
    const p = await services.authenticate(`Bearer ${r.stdout.trim()}`);
    expect(p).toMatchObject({ sub: 'ops team', scopes: ['runplane:admin', 'reports:read'], admin: true });
    expect(p.expiresAt! - Date.now()).toBeLessThanOrEqual(150_000);
  }, 60_000);

  it('given a key of another stack, then the services refuse its token (a token lives with the stack whose key minted it)', async () => {
    const other = join(dir, 'other');
    await createDevAuth(other);
    const r = token('--sub', 'eve', '--auth-dir', other);
    expect(r.status).toBe(0);
    await expect(services.authenticate(`Bearer ${r.stdout.trim()}`)).rejects.toMatchObject({ status: 401 });
  }, 60_000);

  it('given no signing key, then exit 1 saying to start the local stack, and nothing on stdout', () => {
    const r = token('--sub', 'eve', '--auth-dir', join(dir, 'none'));
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`runplane: no signing key in ${join(dir, 'none')}: start the local stack first (npm run runplane -- up)`);
  }, 60_000);

  it.each([
    ['no --sub', [], /required option '--sub <name>'/],
    ['an empty --sub', ['--sub', ''], /--sub must be 1 to 200 characters/],
    ['a --sub of 201 characters', ['--sub', 'x'.repeat(201)], /--sub must be 1 to 200 characters/],
    ['a --sub of only a zero-width space', ['--sub', '\u200b'], /--sub must show something/],
    ['a --sub with a zero-width space in it', ['--sub', 'al\u200bice'], /--sub must show something/],
    [
      'a --sub with a trailing space',
      ['--sub', 'alice '],
      /--sub must show something, with no invisible format character \(zero-width\.\.\.\) and no white space at its start or end/,
    ],
    // the services refuse such a sub (401): a fresh user minted one with exit 0
    ['a --sub with a control character', ['--sub', 'ev\u0001e'], /--sub must be well-formed Unicode without control/],
    ['a --sub with a bidirectional override', ['--sub', 'eve\u202e'], /--sub must be well-formed Unicode without control/],
    ['a --scope with a space', ['--sub', 'eve', '--scope', 'a b'], /--scope "a b" is not a scope/],
    ['--ttl 0', ['--sub', 'eve', '--ttl', '0'], /--ttl must be a whole number of seconds from 1 to 86400/],
    ['--ttl over a day', ['--sub', 'eve', '--ttl', '86401'], /--ttl must be a whole number of seconds from 1 to 86400/],
    ['--ttl 1h', ['--sub', 'eve', '--ttl', '1h'], /--ttl.*must be a non-negative integer/],
  ])(
    'given %s, then exit 1 naming the option, and no token',
    (_label, args, reason) => {
      const r = token(...args, '--auth-dir', keyDir);
      expect(r.status).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(reason);
    },
    60_000,
  );
});
