/**
 * TLS of a local stack's nats-server (libs/devstack tls.ts, startSecuredNats) and of every client
 * connection (libs/eventlog tls.ts, `NATS_CA_FILE`): a client with the stack's private CA connects
 * over TLS, and the heartbeat worker thread too; a client without it, with another CA, or over
 * plain TCP is refused before it sends its password; a CA set against a server without TLS is
 * refused; a bad `NATS_CA_FILE` stops the start naming the setting.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { createDevNatsTls, natsCaEnvOf, provisionAsAdmin, startSecuredNats, type SecuredNats } from '@runplane/devstack';
import { EventLog, natsUserOptions, ProcessHeartbeat } from '@runplane/eventlog';

const tag = randomBytes(3).toString('hex');
const space = { stream: `RPTEST_TLS_${tag}`, prefix: `ttls${tag}`, partitions: 1 };
const dir = mkdtempSync(join(tmpdir(), 'rp-tls-'));
let nats: SecuredNats;
let plain: SecuredNats;
let admin: { user: string; pass: string };

beforeAll(async () => {
  nats = await startSecuredNats({ stateDir: join(dir, 'tls'), space });
  plain = await startSecuredNats({ stateDir: join(dir, 'plain'), space, tls: false });
  admin = { user: nats.users.admin.user, pass: nats.users.admin.password };
}, 60_000);

afterAll(async () => {
  await nats?.stop();
  await plain?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** What the server answers a client that speaks plain NATS protocol on its port (no TLS handshake). */
function plainTcpAnswer(url: string): Promise<string> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: u.hostname, port: Number(u.port) });
    let buf = '';
    socket.setTimeout(5_000, () => {
      socket.destroy();
      resolve(buf);
    });
    socket.on('error', reject);
    socket.on('data', (d) => {
      buf += d.toString('utf8');
      if (buf.startsWith('INFO ') && buf.includes('\r\n') && !buf.includes('CONNECT_SENT')) {
        buf += 'CONNECT_SENT\n';
        socket.write(`CONNECT ${JSON.stringify({ user: admin.user, pass: admin.pass, verbose: false, pedantic: false })}\r\nPING\r\n`);
      }
    });
    socket.on('close', () => resolve(buf));
  });
}

describe('a local stack with TLS on', () => {
  it('makes a private CA and starts the server requiring TLS', () => {
    expect(nats.caFile).toMatch(/ca\.pem$/);
    expect(nats.note).toMatch(/TLS required/);
    expect(plain.caFile).toBeUndefined();
  });

  it('lets a client with the CA connect over TLS, as its user', async () => {
    const log = await EventLog.connect({ natsUrl: nats.url, ...space, name: 'tls-admin', ...admin, caFile: nats.caFile! });
    try {
      expect(log.nc.info?.tls_required).toBe(true);
      expect(await log.readRun('00000000-0000-4000-8000-000000000000')).toEqual([]);
    } finally {
      await log.close();
    }
  });

  it('provisions as admin and runs the heartbeat worker thread over TLS with the CA', async () => {
    const env = {
      NATS_URL: nats.url,
      ...natsCaEnvOf(nats),
      RUNPLANE_STREAM: space.stream,
      RUNPLANE_SUBJECT_PREFIX: space.prefix,
      RUNPLANE_PARTITIONS: '1',
    };
    await provisionAsAdmin(env, nats.users, []);
    const beat = await ProcessHeartbeat.start({ natsUrl: nats.url, ...admin, caFile: nats.caFile! }, space, { service: 'tls', instance: tag }, 3_000);
    // resolved: the worker connected over TLS and wrote its first beat
    await beat.stop();
  });

  it('refuses a client without the CA: the self-made certificate does not verify against the system CAs', async () => {
    await expect(connect({ servers: nats.url, ...natsUserOptions(admin.user, admin.pass), reconnect: false, timeout: 3_000 })).rejects.toThrow(
      /certificate/i,
    );
  });

  it("refuses a client whose CA is another one (a server that is not the deployment's is not trusted)", async () => {
    const other = await createDevNatsTls(join(dir, 'other-ca'));
    await expect(EventLog.connect({ natsUrl: nats.url, ...space, name: 'other-ca', ...admin, caFile: other.caFile })).rejects.toThrow(
      /cannot connect to NATS at .*certificate.*\(NATS_CA_FILE=.*other-ca.*: set it to the CA that signed the server's certificate\)/i,
    );
  });

  it('refuses plain TCP: the server answers a plaintext CONNECT with an error, never a PONG', async () => {
    const answer = await plainTcpAnswer(nats.url);
    expect(answer).toMatch(/^INFO .*"tls_required":true/);
    expect(answer).not.toMatch(/PONG/);
  });

  it('refuses a server without TLS when the CA is set (the client requires TLS)', async () => {
    await expect(
      EventLog.connect({
        natsUrl: plain.url,
        ...space,
        name: 'needs-tls',
        user: plain.users.admin.user,
        pass: plain.users.admin.password,
        caFile: nats.caFile!,
      }),
    ).rejects.toThrow(/does not support 'tls'/);
  });

  it('stops at start-up on a missing or non-PEM NATS_CA_FILE, naming the setting', async () => {
    await expect(EventLog.connect({ natsUrl: nats.url, ...space, ...admin, caFile: join(dir, 'missing.pem') })).rejects.toThrow(
      /^NATS_CA_FILE=.*missing\.pem: cannot read/,
    );
    const junk = join(dir, 'junk.pem');
    writeFileSync(junk, 'not a certificate\n');
    await expect(
      EventLog.fromEnv('junk', { NATS_URL: nats.url, NATS_CA_FILE: junk, RUNPLANE_STREAM: space.stream, RUNPLANE_SUBJECT_PREFIX: space.prefix }),
    ).rejects.toThrow(/^NATS_CA_FILE=.*junk\.pem: no PEM certificate/);
  });
});
