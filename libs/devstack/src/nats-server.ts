/**
 * The nats-server a local Runplane starts (the demo, `up`, the tests, the bench): the current
 * release (2.12 or later) cached by scripts/fetch-nats-server.sh, fetched on first use; never the
 * machine's own older server. And a JetStream cluster of such servers on loopback ports.
 */
import { randomBytes } from 'node:crypto';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { retry, retryPolicies } from '@runplane/kit/retry';
import { freePortOutsideEphemeral } from './ports.js';
import { natsTlsOptions, natsUserOptions } from '@runplane/eventlog';

/** The oldest nats-server Runplane supports (docs/event-log.md, "What the design relies on"). */
export const NATS_SERVER_MIN_VERSION = '2.12.0';

/** One line saying how to get a supported nats-server, for errors. */
export const HOW_TO_GET_NATS_SERVER = `run scripts/fetch-nats-server.sh (it caches nats-server 2.12+ from Debian's packages in .cache/nats-server), or set RUNPLANE_NATS_SERVER_BIN to a nats-server ${NATS_SERVER_MIN_VERSION} or later (release binaries: https://github.com/nats-io/nats-server/releases)`;

/**
 * How many sets of free ports a start tries ({@link startNatsCluster}, the devstack's
 * `startSecuredNats`, the tests' servers): a free port can be taken by another process between the
 * look and the server's bind when tests and stacks start side by side (kit policy `portTaken`).
 */
export const PORT_ATTEMPTS = retryPolicies.portTaken.retries + 1;

/**
 * Runs `start` (given the attempt number, 1 to {@link PORT_ATTEMPTS}) and, while it fails with a
 * {@link PortTaken} (a port it chose was taken meanwhile), runs it again at once (kit policy
 * `portTaken`): each attempt must pick new free ports and leave nothing of its failure running.
 * @returns what the first successful attempt returned.
 * @throws the error of the last attempt (a PortTaken's `cause`), or of the first that failed for another reason.
 */
export async function startOnFreePorts<T>(start: (attempt: number) => Promise<T>): Promise<T> {
  try {
    return await retry('portTaken', start, { shouldRetry: ({ error }) => error instanceof PortTaken });
  } catch (e) {
    throw e instanceof PortTaken ? e.cause : e;
  }
}

/**
 * True when what a nats-server wrote (its log since this start, or an error quoting it) says a port
 * it was to listen on, client or cluster, was taken: the one failure a start on other free ports
 * cures.
 */
export function portTakenIn(serverOutput: string): boolean {
  return /address already in use/i.test(serverOutput);
}

/**
 * A start's failure that {@link startOnFreePorts} cures by another attempt: a port was taken
 * ({@link portTakenIn} of what the server logged). `cause` is the start's own error, the one a
 * caller sees after the last attempt.
 */
export class PortTaken extends Error {
  constructor(override readonly cause: unknown) {
    super(cause instanceof Error ? cause.message : String(cause));
    this.name = 'PortTaken';
  }
}

/**
 * How long a start waits for a nats-server of an earlier start to leave a kept store, ms: a server
 * whose starter died is stopped by its guard (SIGTERM, SIGKILL 5 s later; libs/devstack index.ts).
 */
export const STORE_RELEASE_TIMEOUT_MS = 15_000;

/** The pid file a nats-server started on the store of `dir` writes (`-P`), beside that store. */
export function natsPidFile(dir: string): string {
  return join(dir, 'nats-server.pid');
}

/**
 * Resolves once no nats-server started with `-P pidFile` runs any more: a store that survives its
 * starter (the demo's and `up`'s `.runplane/nats/store`) must never be opened by a second server
 * while the first still holds it (seen: a `kill -9` of `up`, then `up` again at once, started the
 * new server while the old one was still shutting down, and it found the store's state outdated).
 * The pid file's process is that server only while its command line names the pid file (a pid
 * can be given to another process); none, a process gone or a zombie is a free store. Reads
 * `/proc` (Linux); elsewhere it does not wait.
 * @param what the store, for the error.
 * @throws Error naming the process and the store when it still runs after `timeoutMs`.
 */
export async function waitForStoreReleased(pidFile: string, what: string, timeoutMs = STORE_RELEASE_TIMEOUT_MS): Promise<void> {
  const holder = (): number | null => {
    try {
      const pid = Number.parseInt(readFileSync(pidFile, 'utf8').trim(), 10);
      if (!Number.isInteger(pid) || pid <= 0) return null;
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(pidFile) ? pid : null;
    } catch {
      return null;
    }
  };
  const deadline = Date.now() + timeoutMs;
  for (let pid = holder(); pid !== null; pid = holder()) {
    if (Date.now() > deadline)
      throw new Error(
        `nats-server ${pid} of an earlier start still runs on ${what} after ${timeoutMs / 1000} s: stop it (kill ${pid}) and start again`,
      );
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The size of `file` in bytes, 0 when it does not exist (where a start's own part of a kept log begins). */
export function sizeOf(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

/** What was written to `file` past byte `from` ('' when it cannot be read). */
export function textSince(file: string, from: number): string {
  try {
    return readFileSync(file).subarray(from).toString('utf8');
  } catch {
    return '';
  }
}

/** `: <the last non-empty line of file written past byte from>`, or nothing when there is none. */
export function lastLineOf(file: string, from: number): string {
  const last = textSince(file, from).trim().split('\n').at(-1)?.trim();
  return last ? `: ${last}` : '';
}

/** `nats-server --version` of a binary ("2.15.1"), or null when it does not run. */
export function natsServerVersion(bin: string): string | null {
  try {
    const out = execFileSync(bin, ['--version'], { encoding: 'utf8', timeout: 10_000 });
    return /v(\d+\.\d+\.\d+\S*)/.exec(out)?.[1] ?? null;
  } catch {
    return null;
  }
}

/** Compares two dotted versions numerically ("2.9.10" < "2.12.0"): negative, 0 or positive. */
export function compareVersions(a: string, b: string): number {
  const x = a.split(/[.-]/).map((p) => Number.parseInt(p, 10) || 0);
  const y = b.split(/[.-]/).map((p) => Number.parseInt(p, 10) || 0);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** A nats-server binary and its version. */
export interface NatsServerBinary {
  bin: string;
  version: string;
}

/**
 * The supported nats-server already at hand: `RUNPLANE_NATS_SERVER_BIN` when set (it must run and
 * be {@link NATS_SERVER_MIN_VERSION} or later), else the newest such release cached in
 * `<root>/.cache/nats-server/<version>/nats-server`. Null when there is none (see
 * {@link ensureNatsServerBinary}, which fetches one).
 * @throws Error when `RUNPLANE_NATS_SERVER_BIN` names a binary that does not run or is too old.
 */
export function findNatsServerBinary(root: string, env: NodeJS.ProcessEnv = process.env): NatsServerBinary | null {
  const override = env.RUNPLANE_NATS_SERVER_BIN;
  if (override) {
    const version = natsServerVersion(override);
    if (!version) throw new Error(`RUNPLANE_NATS_SERVER_BIN=${override} does not run (nats-server --version)`);
    if (compareVersions(version, NATS_SERVER_MIN_VERSION) < 0) {
      throw new Error(
        `RUNPLANE_NATS_SERVER_BIN=${override} is nats-server ${version}, older than ${NATS_SERVER_MIN_VERSION}: ${HOW_TO_GET_NATS_SERVER}`,
      );
    }
    return { bin: override, version };
  }
  const cache = join(root, '.cache', 'nats-server');
  const found: NatsServerBinary[] = [];
  for (const dir of existsSync(cache) ? readdirSync(cache) : []) {
    const bin = join(cache, dir, 'nats-server');
    if (!existsSync(bin)) continue;
    const version = natsServerVersion(bin);
    if (version && compareVersions(version, NATS_SERVER_MIN_VERSION) >= 0) found.push({ bin, version });
  }
  found.sort((a, b) => compareVersions(b.version, a.version));
  return found[0] ?? null;
}

/**
 * The supported nats-server, fetched on first use: {@link findNatsServerBinary}, else runs
 * `scripts/fetch-nats-server.sh` once (its progress on stderr) and looks again.
 * @throws Error with one line saying how to get one when it cannot be had.
 */
export function ensureNatsServerBinary(root: string, env: NodeJS.ProcessEnv = process.env): NatsServerBinary {
  const found = findNatsServerBinary(root, env);
  if (found) return found;
  const script = join(root, 'scripts', 'fetch-nats-server.sh');
  let why = '';
  try {
    execFileSync('bash', [script], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 15 * 60_000 });
  } catch (e) {
    const err = e as { stdout?: string; stderr?: string; message: string };
    why = `${err.stdout ?? ''}${err.stderr ?? ''}`.trim().split('\n').pop() ?? err.message;
  }
  const fetched = findNatsServerBinary(root, env);
  if (fetched) return fetched;
  throw new Error(`No nats-server ${NATS_SERVER_MIN_VERSION} or later could be had${why ? ` (${why})` : ''}: ${HOW_TO_GET_NATS_SERVER}.`);
}

/** A user a probe connects as (none: no user), and the CA bundle it verifies a TLS server against (`NATS_CA_FILE`). */
export interface NatsProbeAuth {
  user?: string;
  pass?: string;
  caFile?: string;
}

/** True when a NATS server answers JetStream API requests at `url` (a cluster: once it has a meta leader). */
export async function jetStreamAnswers(url: string, timeoutMs = 1000, auth?: NatsProbeAuth): Promise<boolean> {
  return (await jetStreamVersion(url, timeoutMs, auth)) !== null;
}

/**
 * The version of the NATS server at `url` (from its INFO; `unknown` when it sends none) once it
 * answers JetStream API requests, else null: nothing answers within `timeoutMs`, or JetStream does not yet.
 */
export async function jetStreamVersion(url: string, timeoutMs = 1000, auth?: NatsProbeAuth): Promise<string | null> {
  let nc;
  try {
    nc = await connect({
      servers: url,
      timeout: timeoutMs,
      reconnect: false,
      ...natsUserOptions(auth?.user, auth?.pass),
      ...natsTlsOptions(url, auth?.caFile),
    });
  } catch {
    return null;
  }
  try {
    await jetstreamManager(nc, { timeout: timeoutMs });
    return nc.info?.version ?? 'unknown';
  } catch {
    return null;
  } finally {
    await nc.close().catch(() => undefined);
  }
}

/** Where one node of a loopback cluster listens and stores. */
export interface NatsClusterNodeSpec {
  /** Server name (`n1`, `n2`, ...), unique in the cluster (JetStream's raft groups need it). */
  name: string;
  clientPort: number;
  clusterPort: number;
  /** JetStream store folder of this node. */
  storeDir: string;
}

/** The user and password every node of a cluster requires of a route (`routePassword`: hex, URL-safe). */
export interface RouteCredentials {
  user: string;
  password: string;
}

/** Fresh route credentials for one cluster: user `route`, 24 random bytes in hex. */
export const newRouteCredentials = (): RouteCredentials => ({ user: 'route', password: randomBytes(24).toString('hex') });

/**
 * The configuration file of one node of a loopback JetStream cluster: `config` (e.g. the
 * Runplane users of natsAuthConfig) followed by the node's name, client port, JetStream store and
 * the cluster block with a route to every node (its own route is ignored by the server). With
 * `routes` credentials a node accepts only routes that present them (another nats-server on the
 * machine cannot join the cluster and read or write the stream past the client users), and dials
 * the others with them.
 */
export function natsClusterNodeConfig(
  config: string,
  clusterName: string,
  node: NatsClusterNodeSpec,
  all: readonly NatsClusterNodeSpec[],
  routes?: RouteCredentials,
): string {
  const auth = routes ? `${routes.user}:${routes.password}@` : '';
  return [
    config,
    `server_name: ${node.name}`,
    `listen: 127.0.0.1:${node.clientPort}`,
    `jetstream { store_dir: ${JSON.stringify(node.storeDir)} }`,
    `cluster {`,
    `  name: ${clusterName}`,
    `  listen: 127.0.0.1:${node.clusterPort}`,
    ...(routes ? [`  authorization { user: ${JSON.stringify(routes.user)}, password: ${JSON.stringify(routes.password)} }`] : []),
    `  routes: [${all.map((n) => `nats-route://${auth}127.0.0.1:${n.clusterPort}`).join(', ')}]`,
    `}`,
    '',
  ].join('\n');
}

/**
 * Free loopback ports for `n` nodes (a client and a cluster port each), below the ephemeral range:
 * a node killed and started again on its ports must find them free (ports.ts).
 */
export async function clusterNodeSpecs(n: number, dirOf: (name: string) => string): Promise<NatsClusterNodeSpec[]> {
  const taken = new Set<number>();
  const port = async () => {
    for (;;) {
      const p = await freePortOutsideEphemeral('127.0.0.1');
      if (!taken.has(p)) {
        taken.add(p);
        return p;
      }
    }
  };
  const specs: NatsClusterNodeSpec[] = [];
  for (let i = 1; i <= n; i++) specs.push({ name: `n${i}`, clientPort: await port(), clusterPort: await port(), storeDir: dirOf(`n${i}`) });
  return specs;
}

/** One node of a {@link NatsCluster}. */
export interface NatsClusterNode extends NatsClusterNodeSpec {
  /** `nats://127.0.0.1:<clientPort>` (the same across restarts). */
  url: string;
  /** The node's log file, `<stateDir>/<name>/server.log` (appended to across starts and runs). */
  logFile: string;
  /** The running process id, or null while stopped. */
  readonly pid: number | null;
  /** Stops the node gracefully (SIGTERM; SIGKILL after 10 s) and waits for it to exit. */
  stop(): Promise<void>;
  /** Kills the node with SIGKILL (a crash) and waits for it to exit. */
  kill(): Promise<void>;
  /** Starts the node again (same ports, store and config); resolves once it answers JetStream requests. */
  start(): Promise<void>;
  /** `stop()` (if running) then `start()`. */
  restart(): Promise<void>;
}

/** A JetStream cluster of nats-server processes on loopback ports. */
export interface NatsCluster {
  /** Every node's client URL, comma-separated: the services' `NATS_URL`. */
  url: string;
  nodes: NatsClusterNode[];
  /** The binary and its version. */
  server: NatsServerBinary;
  /** What a route must present to join (every node requires it). */
  routes: RouteCredentials;
  /** Stops every node (gracefully). */
  stop(): Promise<void>;
}

export interface NatsClusterOptions {
  /** Number of nodes (3: a majority survives the loss of one). */
  nodes: number;
  /** Each node stores under `<stateDir>/<name>` (its config and log beside its store). */
  stateDir: string;
  /** Configuration shared by every node (e.g. natsAuthConfig: the Runplane users and permissions). */
  config: string;
  /** A user the readiness probe connects as when `config` requires one (and the CA when it requires TLS). */
  auth?: NatsProbeAuth;
  /** The cluster's name (default `runplane`). */
  clusterName?: string;
  /** The binary (default: {@link ensureNatsServerBinary} of `root`). */
  server?: NatsServerBinary;
  /** Repository root (for the cached binary). */
  root: string;
  /** Keeps track of started processes (e.g. to stop them on a signal); default none. */
  track?: (child: ChildProcess) => ChildProcess;
  /** How long to wait for the cluster to answer JetStream requests, ms (default 30 s). */
  readyTimeoutMs?: number;
  /**
   * The ports of the first attempt, two per node in order (client and cluster port of `n1`, then
   * `n2`, ...); default free ones. A port another process holds is given up for free ones.
   */
  ports?: readonly number[];
}

/**
 * Starts `nodes` nats-server processes forming one JetStream cluster on loopback (distinct store
 * folders, client and cluster ports, a common cluster name, routes to each other, the same
 * `config` on each), and resolves once every node answers JetStream API requests (the cluster
 * has elected its meta leader). When a node exits because a port chosen for it was taken
 * meanwhile ({@link portTakenIn} of what it logged this start), every node is stopped and the
 * cluster starts again on new free ports, up to {@link PORT_ATTEMPTS} times.
 * @throws Error with the node's log file when a node exits for another reason or the cluster is
 *   not ready in time; the nodes started are stopped first.
 */
export async function startNatsCluster(opts: NatsClusterOptions): Promise<NatsCluster> {
  const server = opts.server ?? ensureNatsServerBinary(opts.root);
  const clusterName = opts.clusterName ?? 'runplane';
  const readyTimeoutMs = opts.readyTimeoutMs ?? 30_000;
  // routes authenticate: a nats-server of anyone else on the machine cannot join the cluster
  const routeCredentials = newRouteCredentials();
  const storeOf = (name: string) => join(opts.stateDir, name, 'store');
  return startOnFreePorts(async (attempt) => {
    const specs = attempt === 1 && opts.ports ? givenNodeSpecs(opts.nodes, opts.ports, storeOf) : await clusterNodeSpecs(opts.nodes, storeOf);
    const nodes = specs.map((spec) => clusterNode(spec, specs, { ...opts, server, clusterName, readyTimeoutMs, routeCredentials }));
    const stopAll = async () => {
      await Promise.all(nodes.map((n) => n.stop()));
    };
    // what each node's kept log held before this start: only what it writes now explains a failure
    const logFrom = nodes.map((n) => sizeOf(n.logFile));
    try {
      // all at once: a node alone has no JetStream meta leader, so none answers before a majority runs
      await Promise.all(nodes.map((n) => n.start()));
      return { url: nodes.map((n) => n.url).join(','), nodes, server, routes: routeCredentials, stop: stopAll };
    } catch (e) {
      await stopAll();
      throw nodes.some((n, i) => portTakenIn(textSince(n.logFile, logFrom[i]!))) ? new PortTaken(e) : e;
    }
  });
}

/** The specs of `n` nodes on the given ports: client and cluster port of `n1`, then of `n2`, ... */
function givenNodeSpecs(n: number, ports: readonly number[], storeOf: (name: string) => string): NatsClusterNodeSpec[] {
  if (ports.length !== 2 * n) throw new Error(`${n} nodes need ${2 * n} ports (a client and a cluster port each), not ${ports.length}`);
  return Array.from({ length: n }, (_, i) => ({
    name: `n${i + 1}`,
    clientPort: ports[2 * i]!,
    clusterPort: ports[2 * i + 1]!,
    storeDir: storeOf(`n${i + 1}`),
  }));
}

/** One node of {@link startNatsCluster}: its config and log written under `<stateDir>/<name>`, not started. */
function clusterNode(
  spec: NatsClusterNodeSpec,
  all: readonly NatsClusterNodeSpec[],
  opts: NatsClusterOptions & { server: NatsServerBinary; clusterName: string; readyTimeoutMs: number; routeCredentials: RouteCredentials },
): NatsClusterNode {
  const dir = join(opts.stateDir, spec.name);
  mkdirSync(dir, { recursive: true });
  const configFile = join(dir, 'server.conf');
  const logFile = join(dir, 'server.log');
  const pidFile = natsPidFile(dir);
  writeFileSync(configFile, natsClusterNodeConfig(opts.config, opts.clusterName, spec, all, opts.routeCredentials), { mode: 0o600 });
  const url = `nats://127.0.0.1:${spec.clientPort}`;
  let child: ChildProcess | null = null;
  const exited = (c: ChildProcess) =>
    c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise<void>((r) => c.once('exit', () => r()));
  const node: NatsClusterNode = {
    ...spec,
    url,
    logFile,
    get pid() {
      return child?.pid ?? null;
    },
    async stop() {
      const c = child;
      if (!c) return;
      const done = exited(c);
      c.kill('SIGTERM');
      const timer = setTimeout(() => c.kill('SIGKILL'), 10_000);
      await done;
      clearTimeout(timer);
    },
    async kill() {
      const c = child;
      if (!c) return;
      const done = exited(c);
      c.kill('SIGKILL');
      await done;
    },
    async start() {
      if (child) throw new Error(`node ${spec.name} (${url}) is already running`);
      await waitForStoreReleased(pidFile, spec.storeDir);
      // a process group of its own: a terminal's Ctrl-C goes to the CLI, which stops it after the services
      const c = spawn(opts.server.bin, ['-c', configFile, '-l', logFile, '-P', pidFile], { stdio: 'ignore', detached: true });
      opts.track?.(c);
      child = c;
      c.once('exit', () => {
        if (child === c) child = null;
      });
      const deadline = Date.now() + opts.readyTimeoutMs;
      while (!(await jetStreamAnswers(url, 1000, opts.auth))) {
        if (child !== c) throw new Error(`nats-server ${spec.name} exited before answering on ${url}${lastLineOf(logFile, 0)} (log: ${logFile})`);
        if (Date.now() > deadline)
          throw new Error(`nats-server ${spec.name} did not answer JetStream requests on ${url} within ${opts.readyTimeoutMs} ms (log: ${logFile})`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    async restart() {
      await node.stop();
      await node.start();
    },
  };
  return node;
}
