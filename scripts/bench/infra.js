// Infrastructure the bench starts for itself: a private nats-server with JetStream (so that its CPU
// is the bench's alone and the machine's shared server keeps no bench data), the shared scripted
// model, and the peers' package folder (`bench/`, installed on demand).
import { spawn, execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import getPort from 'get-port';
import {
  createDevNatsTls,
  natsAuthConfig,
  natsReachable,
  natsServerBinary,
  natsTlsConfig,
  newNatsUsers,
  repoRoot,
  spawnReady,
  startNatsCluster,
} from '@runplane/devstack';

/** Waits until `check()` is true, polling every `everyMs`; throws `what` after `timeoutMs`. */
export async function waitFor(check, what, timeoutMs = 30_000, everyMs = 100) {
  const end = Date.now() + timeoutMs;
  for (;;) {
    if (await check().catch(() => false)) return;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Stops a child process: SIGTERM, then SIGKILL after `graceMs`. */
export async function stopProcess(child, graceMs = 10_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const t = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(t);
}

/**
 * The subject space of a Runplane system the bench starts under `tag` (scripts/bench/systems.js
 * `startRunplane`): stream `RPB_<tag>`, subject prefix `<tag>`, the services' default 8 partitions.
 * @param {string} tag
 * @returns {{ stream: string, prefix: string, partitions: number }}
 */
export const benchSpace = (tag) => ({ stream: `RPB_${tag}`, prefix: tag, partitions: 8 });

/**
 * Starts a private `nats-server -js` on a free loopback port with a temporary store directory,
 * as a deployment runs it: the Runplane users and permissions of `space` switched on (libs/devstack
 * natsAuthConfig, fresh passwords; a connection without a user is refused, each service may publish
 * only the facts it owns, K9) and TLS required (a private CA made for it, libs/devstack
 * createDevNatsTls). Every client of the bench connects with `caFile` (`NATS_CA_FILE`) and a user:
 * Runplane's services each as its own (`users`, devstack startStack `natsUsers`), the bench's own
 * connections (settlement watch, raw appends, read cost) as `admin`, which may do everything in
 * the services' account, streams of other names included.
 * @param {string} [binary] the nats-server to run (default: the supported release cached by
 *   scripts/fetch-nats-server.sh, fetched on first use: libs/devstack natsServerBinary).
 * @param {{ space: { stream: string, prefix: string, partitions: number }, cluster?: boolean }} opts
 *   `space`: the subject space of the one Runplane system this server hosts ({@link benchSpace});
 *   `cluster`: a 3-node cluster instead of one server.
 * @returns {{ url: string, caFile: string, users: import('@runplane/devstack').NatsUsers,
 *   admin: { user: string, pass: string }, child: { pid: number }, pids(): number[], replicas: number,
 *   version: string, stop(): Promise<void> }}
 */
export async function startNats(binary, opts) {
  if (!opts?.space) throw new Error('startNats needs the subject space of the Runplane system it hosts (benchSpace(tag))');
  if (opts.cluster) return startNatsClusterForBench(binary, opts.space);
  const bin = binary ?? natsServerBinary();
  const version = execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  const port = await getPort({ host: '127.0.0.1' });
  const dir = mkdtempSync(join(tmpdir(), 'runplane-bench-nats-'));
  const tls = await createDevNatsTls(join(dir, 'tls'));
  const users = newNatsUsers();
  const admin = { user: users.admin.user, pass: users.admin.password };
  const config = join(dir, 'server.conf');
  writeFileSync(config, `${natsAuthConfig(opts.space, users)}\n${natsTlsConfig(tls)}`, { mode: 0o600 });
  const child = spawn(bin, ['-c', config, '-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, 'store'), '-l', join(dir, 'server.log')], {
    stdio: 'ignore',
  });
  const url = `nats://127.0.0.1:${port}`;
  await waitFor(() => natsReachable(url, 500, { ...admin, caFile: tls.caFile }), `nats-server on ${url}`, 15_000);
  return {
    url,
    caFile: tls.caFile,
    users,
    admin,
    child,
    pids: () => [child.pid],
    replicas: 1,
    version,
    stop: async () => {
      await stopProcess(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A 3-node JetStream cluster on loopback ports (libs/devstack startNatsCluster) in a temporary
 * folder, with the users of `space` and TLS as {@link startNats}: `url` lists every node; the
 * Runplane stream and buckets are then created at 3 replicas.
 */
async function startNatsClusterForBench(binary, space) {
  const dir = mkdtempSync(join(tmpdir(), 'runplane-bench-nats-cluster-'));
  const bin = binary ?? natsServerBinary();
  const version = execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
  const tls = await createDevNatsTls(join(dir, 'tls'));
  const users = newNatsUsers();
  const admin = { user: users.admin.user, pass: users.admin.password };
  const cluster = await startNatsCluster({
    nodes: 3,
    stateDir: dir,
    config: `${natsAuthConfig(space, users)}\n${natsTlsConfig(tls)}`,
    auth: { ...admin, caFile: tls.caFile },
    root: repoRoot(),
    server: { bin, version: version.replace(/^.*v/, '') },
  });
  return {
    url: cluster.url,
    caFile: tls.caFile,
    users,
    admin,
    child: { pid: cluster.nodes[0].pid },
    pids: () => cluster.nodes.map((n) => n.pid).filter(Boolean),
    replicas: 3,
    version: `${version}, 3-node cluster`,
    stop: async () => {
      await cluster.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Starts the scripted model server as its own process (shared by every system of the bench). */
export async function startModel(root, logFile) {
  const log = createWriteStream(logFile, { flags: 'a' });
  const p = await spawnReady(
    'scripted-model',
    join(root, 'apps/scripted-model/dist/main.js'),
    ['--port', '0'],
    process.env,
    /listening on (\S+)/,
    log,
  );
  return {
    ...p,
    stop: async () => {
      await p.stop();
      log.end();
    },
  };
}

/**
 * Installs the peers' packages into `bench/node_modules` when missing (`npm install --prefix bench`).
 * @returns null when ready, else the reason it could not be installed.
 */
export function ensurePeerPackages(root) {
  const dir = join(root, 'bench');
  if (existsSync(join(dir, 'node_modules', '@dbos-inc', 'dbos-sdk')) && existsSync(join(dir, 'node_modules', '@restatedev', 'restate-sdk')))
    return null;
  process.stdout.write('installing the peers (npm install --prefix bench) ...\n');
  try {
    execFileSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 300_000 });
    return null;
  } catch (e) {
    return `npm install --prefix bench failed: ${String(e.stderr ?? e.message)
      .trim()
      .split('\n')
      .slice(-3)
      .join(' ')}`;
  }
}
