/**
 * The TLS connect option of every NATS connection (tls.ts, `NATS_CA_FILE`): with a CA the client
 * requires TLS and verifies against it; a `tls://` URL requires TLS without one; a missing, empty
 * or non-PEM file is refused naming the setting. The connections themselves are tested against a
 * server in libs/devstack/test/nats-tls.test.ts.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDevNatsTls } from '@runplane/devstack/tls';
import { checkNatsCaFile, natsTlsOptions, natsUrlRequiresTls } from '@runplane/eventlog';

const dir = mkdtempSync(join(tmpdir(), 'rp-tlsopt-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('natsTlsOptions', () => {
  it('with a CA bundle: TLS required, verified against it', async () => {
    const { caFile } = await createDevNatsTls(dir);
    expect(natsTlsOptions('nats://127.0.0.1:4222', caFile)).toEqual({ tls: { caFile } });
  });

  it('without one: TLS required only by a tls:// URL (any server of a list), else nothing', () => {
    expect(natsTlsOptions('nats://a:4222', undefined)).toEqual({});
    expect(natsTlsOptions('nats://a:4222, tls://b:4222', undefined)).toEqual({ tls: {} });
    expect(natsUrlRequiresTls('TLS://a:4222')).toBe(true);
    expect(natsUrlRequiresTls('nats://tls:4222')).toBe(false);
  });

  it('refuses a missing, empty or non-PEM file, naming NATS_CA_FILE', () => {
    expect(() => natsTlsOptions('nats://a:4222', join(dir, 'none.pem'))).toThrow(/^NATS_CA_FILE=.*none\.pem: cannot read the NATS CA bundle/);
    const empty = join(dir, 'empty.pem');
    writeFileSync(empty, '');
    expect(() => checkNatsCaFile(empty)).toThrow(/^NATS_CA_FILE=.*empty\.pem: no PEM certificate/);
    const broken = join(dir, 'broken.pem');
    writeFileSync(broken, '-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n');
    expect(() => checkNatsCaFile(broken)).toThrow(/^NATS_CA_FILE=.*broken\.pem: not a valid PEM certificate/);
  });
});
