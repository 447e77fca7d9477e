// Jest global set-up (jest.config.js): starts the suite's shared nats-server, the supported
// release cached by scripts/fetch-nats-server.sh (fetched on first use; the run fails with one line
// saying how to get one when it cannot be had), with JetStream on a free loopback port and a
// temporary store, and sets NATS_URL for every test file (the workers inherit it). The server runs as
// a deployment's does: it refuses a connection without a user and requires TLS. One suite-wide user
// with every permission (a fresh random password) and a private CA made for this run (libs/devstack
// createDevNatsTls) are handed to the workers as NATS_USER, NATS_PASSWORD and NATS_CA_FILE, which
// the services (EventLog.fromEnv) read; tests connect through test/support/nats-server.ts
// (SHARED_NATS, sharedNatsOptions, sharedNatsEnv). Tests use their own stream names on it; files
// that inject faults start servers of their own (test/support/nats-server.ts). Plain JavaScript:
// Jest loads it before any transform applies. It also turns on Node's compile cache for the
// workers and every process they start (NODE_COMPILE_CACHE, libs/devstack compile-cache.ts).
// A watchdog shell kills the server and removes its folder when this Jest process dies in any way.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import getPort from 'get-port';
import { compileCacheEnv, createDevNatsTls, ensureNatsServerBinary, jetStreamAnswers, natsTlsConfig } from '@runplane/devstack';

/** The suite-wide NATS user of the shared server (every permission; not one of the Runplane users). */
export const SUITE_NATS_USER = 'runplane-suite';

export default async function globalSetup() {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const { bin, version } = ensureNatsServerBinary(root);
  const dir = mkdtempSync(join(tmpdir(), 'rp-nats-shared-'));
  const port = await getPort({ host: '127.0.0.1' });
  const tls = await createDevNatsTls(join(dir, 'tls'));
  const password = randomBytes(18).toString('base64url');
  const config = join(dir, 'server.conf');
  writeFileSync(
    config,
    [
      // no permissions block: the suite's user may do everything (tests create streams, consumers and
      // buckets of every name); the broker's per-service permissions are proven on the stacks' own servers
      `authorization { users: [ { user: ${JSON.stringify(SUITE_NATS_USER)}, password: ${JSON.stringify(password)} } ] }`,
      natsTlsConfig(tls),
    ].join('\n'),
    { mode: 0o600 },
  );
  const child = spawn(bin, ['-c', config, '-js', '-sd', join(dir, 'store'), '-a', '127.0.0.1', '-p', String(port), '-l', join(dir, 'server.log')], {
    stdio: 'ignore',
  });
  child.unref();
  const watchdog = spawn('sh', ['-c', 'read _ || { kill -KILL "$1" 2>/dev/null; sleep 0.2; rm -rf "$2"; }', 'sh', String(child.pid), dir], {
    stdio: ['pipe', 'ignore', 'ignore'],
  });
  watchdog.on('error', () => undefined);
  watchdog.unref();
  watchdog.stdin.unref?.();
  const url = `nats://127.0.0.1:${port}`;
  const deadline = Date.now() + 15_000;
  const auth = { user: SUITE_NATS_USER, pass: password, caFile: tls.caFile };
  while (!(await jetStreamAnswers(url, 1000, auth))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the suite's nats-server ${bin} did not answer on ${url} (log: ${join(dir, 'server.log')})`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  process.env.NATS_URL = url;
  process.env.NATS_USER = SUITE_NATS_USER;
  process.env.NATS_PASSWORD = password;
  process.env.NATS_CA_FILE = tls.caFile;
  // black-box tests drive the services by hand, without tokens (the services warn that authentication
  // is off); test/e2e/auth.test.ts starts its own stack with authentication on
  process.env.RUNPLANE_AUTH_DISABLED ??= 'true';
  // every process a test starts (the workers, services, CLIs) reuses the modules compiled by the ones
  // before it (libs/devstack compile-cache.ts): about an eighth of a stack's start-up CPU
  Object.assign(process.env, compileCacheEnv(process.env));
  process.stderr.write(
    `\nshared test nats-server ${version} (${bin.replace(root, '')}) on ${url}, user ${SUITE_NATS_USER}, TLS (CA ${tls.caFile})\n`,
  );
  globalThis.__RUNPLANE_SHARED_NATS__ = { child, watchdog, dir };
}
