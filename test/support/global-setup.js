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
// The test nats-servers (this one and those test/support/nats-server.ts starts) keep their stores
// in RUNPLANE_TEST_NATS_DIR, set here to /dev/shm when that is a tmpfs with room to spare
// ({@link testNatsDir}).
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, statfsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import getPort from 'get-port';
import { ABANDONED_AFTER_H, dropAbandonedDatabases, removeAbandonedFolders } from './abandoned.js';
import { compileCacheEnv, createDevNatsTls, ensureNatsServerBinary, jetStreamAnswers, natsTlsConfig } from '@runplane/devstack';

/** The suite-wide NATS user of the shared server (every permission; not one of the Runplane users). */
export const SUITE_NATS_USER = 'runplane-suite';

/** Bytes a RAM-backed folder must have free to hold the suite's nats-server stores (a few hundred MB at most at once). */
const TMPFS_MIN_FREE = 2 * 2 ** 30;
const TMPFS_MAGIC = 0x01021994;

/**
 * Where the test nats-servers keep their stores: RUNPLANE_TEST_NATS_DIR when set, else `/dev/shm`
 * when it is a tmpfs with at least 2 GiB free, else the system's temporary folder. Each active
 * durable consumer rewrites its state file up to 10 times a second (a new file renamed over the
 * old): on this machine's ext4 that was about a third of a server's CPU, and of the suite's
 * services' stacks ~3 % of their CPU (docs/development.md). Only the tests' servers: the bench and
 * the demo keep theirs on disk, as a deployment does.
 */
function testNatsDir() {
  if (process.env.RUNPLANE_TEST_NATS_DIR) return process.env.RUNPLANE_TEST_NATS_DIR;
  try {
    const fs = statfsSync('/dev/shm');
    if (fs.type === TMPFS_MAGIC && fs.bavail * fs.bsize >= TMPFS_MIN_FREE) return '/dev/shm';
  } catch {
    // no /dev/shm here
  }
  return tmpdir();
}

/**
 * Drops the test databases and removes the test folders (the nats-servers' stores among them) that
 * a run killed at once left over 12 hours ago (test/support/abandoned.js), and says so when there
 * were any: every later run on the machine would otherwise see them, and a store in `/dev/shm` stays
 * in memory until the next boot.
 */
async function sweepAbandoned(natsDir) {
  const folders = [...new Set([tmpdir(), natsDir])].flatMap((dir) => removeAbandonedFolders(dir));
  const databases = await dropAbandonedDatabases('postgresql://postgres@127.0.0.1:5432/postgres');
  if (folders.length + databases.length > 0) {
    process.stderr.write(
      `\nremoved what test runs killed over ${ABANDONED_AFTER_H} h ago left behind: ${databases.length} database(s), ${folders.length} folder(s)\n`,
    );
  }
}

export default async function globalSetup() {
  const root = fileURLToPath(new URL('../..', import.meta.url));
  const { bin, version } = ensureNatsServerBinary(root);
  process.env.RUNPLANE_TEST_NATS_DIR = testNatsDir();
  await sweepAbandoned(process.env.RUNPLANE_TEST_NATS_DIR);
  const dir = mkdtempSync(join(process.env.RUNPLANE_TEST_NATS_DIR, 'rp-nats-shared-'));
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
  // when this process dies in any way (its stdin pipe closes), the watchdog SIGKILLs the server and
  // removes its folder; it ignores the terminal's signals (a Ctrl-C reaches the whole process group)
  const watchdog = spawn(
    'sh',
    ['-c', 'trap "" HUP INT QUIT; read _ || { kill -KILL "$1" 2>/dev/null; sleep 0.2; rm -rf "$2"; }', 'sh', String(child.pid), dir],
    // a session of its own: the group's signals never reach it, not even before its trap is set
    { stdio: ['pipe', 'ignore', 'ignore'], detached: true },
  );
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
    `\nshared test nats-server ${version} (${bin.replace(root, '')}) on ${url}, user ${SUITE_NATS_USER}, TLS (CA ${tls.caFile}); test nats-servers store in ${process.env.RUNPLANE_TEST_NATS_DIR}\n`,
  );
  globalThis.__RUNPLANE_SHARED_NATS__ = { child, watchdog, dir };
}
