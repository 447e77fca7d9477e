/**
 * A whole local Runplane: starts NATS with JetStream (the Runplane users and TLS switched on), finds PostgreSQL and creates the
 * database, starts the scripted model server and every service as its own process, and stops them
 * cleanly. Used by `npm run demo` and the end-to-end tests, so both exercise the same processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, writeFileSync, type WriteStream } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import getPort from 'get-port';
import pg from 'pg';
import { BusConfig, natsServerList } from '@runplane/contracts';
import { isTransientNatsError } from '@runplane/kit';
import { retry } from '@runplane/kit/retry';
import {
  DEFAULT_DOWNSTREAM_CONSUMERS,
  downstreamConsumerNames,
  downstreamUserName,
  BUS_USERS,
  EventLog,
  natsUserName,
  natsTlsOptions,
  natsUserOptions,
  PARTITIONS_METADATA_KEY,
  provisionBus,
  renderNatsAuthorization,
  type BusUser,
  type SubjectSpace,
} from '@runplane/eventlog';
import { findRepoRoot } from '@runplane/holdings';
import { databaseNameOf, databaseUrlWith, dropDatabase as dropNamedDatabase, ensureDatabase } from '@runplane/projections';
import {
  ensureNatsServerBinary,
  lastLineOf,
  natsPidFile,
  portTakenIn,
  PortTaken,
  sizeOf,
  startNatsCluster,
  startOnFreePorts,
  textSince,
  waitForStoreReleased,
  type NatsCluster,
  type NatsProbeAuth,
} from './nats-server.js';
import { createDevNatsTls, natsTlsConfig } from './tls.js';
import { createDevSigning, signingEnvOf, type DevSigning } from './signing.js';
import { serviceAllocatorEnv } from './allocator.js';
import { compileCacheEnv } from './compile-cache.js';
import { inspectionCacheEnv } from './inspection-cache.js';
import { freePortOutsideEphemeral } from './ports.js';

export * from './nats-server.js';
export * from './auth.js';
export * from './tls.js';
export * from './signing.js';
export * from './state-lock.js';
export * from './allocator.js';
export * from './compile-cache.js';
export * from './inspection-cache.js';
export * from './ports.js';

/**
 * The file a service process runs: its bundle, `apps/<service>/dist/main.bundle.js`, which
 * `npm run build` makes (scripts/bundle-services.mjs; deploy/k8s starts the same file).
 * @throws Error naming the file and `npm run build` when it is missing.
 */
export function serviceEntry(root: string, service: string): string {
  const file = join(root, `apps/${service}/dist/main.bundle.js`);
  if (!existsSync(file)) throw new Error(`${file} is missing: run \`npm run build\` (it bundles every service)`);
  return file;
}

/**
 * Node flags every service process starts with (the same value as `NODE_OPTIONS` in
 * deploy/k8s/base/config.env; a test keeps the two equal). `--max-semi-space-size=4` caps V8's young
 * generation at 2 x 4 MiB: by default it grows to 2 x 16-32 MiB while the modules load and never
 * shrinks again in an idle service, about 20 MiB of resident memory per process for nothing
 * (docs/performance.md, idle RSS). W1 throughput and CPU per Run were not measurably different.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=4'];

/** The service processes, in start order. `projector` keeps the PostgreSQL projections. */
export const SERVICES = ['projector', 'lifecycle', 'recovery', 'publication', 'tools', 'runtime', 'admission'] as const;
export type ServiceName = (typeof SERVICES)[number];

/**
 * The repository root: the nearest ancestor of this module holding nx.json (`findRepoRoot` of
 * `@runplane/holdings`, the one implementation).
 * @throws Error when there is none (the module runs outside a checkout).
 */
export function repoRoot(): string {
  const root = findRepoRoot(dirname(fileURLToPath(import.meta.url)));
  if (root === null) throw new Error('cannot find the repository root (nx.json)');
  return root;
}

/**
 * True when a NATS server answers at `url` (one, or a comma-separated list: any of them) within
 * `timeoutMs`, as `auth`'s user when given, verifying a TLS server against `auth.caFile`.
 */
export async function natsReachable(url: string, timeoutMs = 1500, auth?: NatsProbeAuth): Promise<boolean> {
  try {
    const nc = await connect({
      servers: natsServerList(url),
      timeout: timeoutMs,
      reconnect: false,
      ...natsUserOptions(auth?.user, auth?.pass),
      ...natsTlsOptions(url, auth?.caFile),
    });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}

/** A nats-server a local stack uses (SecuredNats: one it started with the Runplane users). */
export interface NatsHandle {
  url: string;
  /** Set when this process started its own nats-server (stopped by `stop()`). */
  child: ChildProcess | null;
  note: string;
  stop(): Promise<void>;
}

/** Suffix of the projection database (and embedded-database folder) used with a NATS this process started. */
export const FALLBACK_NATS_SUFFIX = '_devnats';

/**
 * The projection database for a stack on `nats`: `databaseUrl` as configured when the stack uses
 * a NATS it did not start; a database of its own (`<name>_devnats_<8 hex of the state folder's
 * path>`, same server; without `stateDir`, `<name>_devnats`) when `nats` is a
 * server this process started (`demo` and `up` always start their own, with the Runplane users
 * switched on). Projections are rebuilt from the log they were built
 * from, so rows from the fallback server's log must never sit in the database of the machine's
 * own log, where a later rebuild against the real log would find rows it cannot explain.
 */
export function projectionDatabaseFor(databaseUrl: string, nats: Pick<SecuredNats, 'child' | 'cluster'>, stateDir?: string): string {
  if (nats.child === null && !nats.cluster) return databaseUrl;
  // one log per state folder (the server's store lives there): one database per state folder too,
  // so two clones (or two state folders) never share projections built from different logs (K11)
  const store = stateDir ? `_${createHash('sha256').update(resolve(stateDir)).digest('hex').slice(0, 8)}` : '';
  return databaseUrlWith(databaseUrl, `${databaseNameOf(databaseUrl)}${FALLBACK_NATS_SUFFIX}${store}`);
}

/** One NATS user's credentials, as a service gets them (`NATS_USER`, `NATS_PASSWORD`). */
export interface NatsCredentials {
  user: string;
  password: string;
}
/**
 * Credentials of every Runplane NATS user (libs/eventlog bus.ts `BUS_USERS`), and in `downstream`
 * of each downstream durable consumer's own user, by the durable's name (`downstream-1`: user
 * `downstream-1`, eventlog's `downstreamUserName`).
 */
export type NatsUsers = Record<BusUser, NatsCredentials> & {
  downstream: Readonly<Record<string, NatsCredentials>>;
  /**
   * The stack's event signing keys, once made ({@link startSecuredNats} or {@link startStack}):
   * {@link natsEnvOf} and {@link downstreamEnvOf} then add the signing settings of the user.
   */
  signing?: DevSigning;
};

const newPassword = (): string => randomBytes(18).toString('base64url');

/**
 * Fresh random credentials for every Runplane NATS user and for the user of each downstream
 * durable consumer of `downstream` (default eventlog's `DEFAULT_DOWNSTREAM_CONSUMERS`); a local
 * stack's, never stored in the repository.
 * @throws RangeError when a downstream name is not one (eventlog's `downstreamConsumerNames`).
 */
export function newNatsUsers(downstream: readonly string[] = DEFAULT_DOWNSTREAM_CONSUMERS): NatsUsers {
  const fixed = Object.fromEntries(BUS_USERS.map((u) => [u, { user: natsUserName(u), password: newPassword() }])) as Record<BusUser, NatsCredentials>;
  const own = Object.fromEntries(downstreamConsumerNames(downstream).map((n) => [n, { user: downstreamUserName(n), password: newPassword() }]));
  return { ...fixed, downstream: own };
}

/**
 * The environment variables that make a process connect as `user`: its NATS user and password,
 * and when the stack has signing keys ({@link NatsUsers.signing}) the public keys every reader
 * checks signatures with, plus the user's own private key when it is a service that owns facts.
 */
export function natsEnvOf(
  users: NatsUsers,
  user: BusUser,
): { NATS_USER: string; NATS_PASSWORD: string; RUNPLANE_SIGNING_PUBLIC_KEYS_FILE?: string; RUNPLANE_SIGNING_KEY_FILE?: string } {
  return { NATS_USER: users[user].user, NATS_PASSWORD: users[user].password, ...(users.signing ? signingEnvOf(users.signing, user) : {}) };
}

/**
 * The environment variables that make a downstream service connect as the user of its durable
 * consumer `name` (`NATS_USER`, `NATS_PASSWORD`, and `RUNPLANE_CONSUMER_NAME`, the example's).
 * @throws RangeError when `users` has no user for `name`.
 */
export function downstreamEnvOf(
  users: NatsUsers,
  name: string,
): { NATS_USER: string; NATS_PASSWORD: string; RUNPLANE_CONSUMER_NAME: string; RUNPLANE_SIGNING_PUBLIC_KEYS_FILE?: string } {
  const own = users.downstream[name];
  if (!own) throw new RangeError(`no NATS user for downstream durable consumer ${name} (has: ${Object.keys(users.downstream).join(', ')})`);
  return {
    NATS_USER: own.user,
    NATS_PASSWORD: own.password,
    RUNPLANE_CONSUMER_NAME: name,
    ...(users.signing ? { RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: users.signing.publicKeysFile } : {}),
  };
}

/**
 * The nats-server configuration (the `authorization` block of libs/eventlog bus.ts, the same
 * permissions as deploy/nats/accounts.conf) for a subject space with these credentials;
 * `downstream` names the downstream durable consumers, each with its own user of
 * `users.downstream` (default: eventlog's `DEFAULT_DOWNSTREAM_CONSUMERS`).
 * @throws RangeError when a downstream name has no user in `users.downstream`.
 */
export function natsAuthConfig(space: SubjectSpace, users: NatsUsers, downstream?: readonly string[]): string {
  const passwords = {
    ...(Object.fromEntries(BUS_USERS.map((u) => [u, users[u].password])) as Record<BusUser, string>),
    downstream: Object.fromEntries(Object.entries(users.downstream).map(([n, c]) => [n, c.password])),
  };
  return downstream ? renderNatsAuthorization(space, passwords, downstream) : renderNatsAuthorization(space, passwords);
}

/**
 * The nats-server binary a local stack starts: the supported release (2.12 or later,
 * `RUNPLANE_NATS_SERVER_BIN` or the newest cached by scripts/fetch-nats-server.sh, which runs on
 * first use), never an older one found on PATH.
 * @throws Error with one line saying how to get one when it cannot be had.
 */
export function natsServerBinary(): string {
  return ensureNatsServerBinary(repoRoot()).bin;
}

/** How long a nats-server the local stack starts has to answer by default, ms ({@link startSecuredNats} `readyTimeoutMs`). */
export const NATS_READY_TIMEOUT_MS = 10_000;

/** A nats-server the local stack started with the Runplane users switched on. */
export interface SecuredNats extends NatsHandle {
  users: NatsUsers;
  /**
   * The private CA the server's certificate chains to (createDevNatsTls), when it requires TLS:
   * every client's `NATS_CA_FILE` ({@link natsCaEnvOf}).
   */
  caFile?: string;
  /** The cluster, when {@link startSecuredNatsCluster} started one (`url` then lists every node). */
  cluster?: NatsCluster;
  /**
   * The partition count the server's permissions were written for: the kept stream's when its store
   * holds the Run stream already (the stream wins, as every service's event log takes it), else the
   * one asked for. Set by {@link startSecuredNats} and {@link startSecuredNatsCluster}.
   */
  partitions?: number;
  /**
   * True when the store held no Run stream when the server started (a new store, or one put in
   * place of the kept one): a log with no Run yet, whose projections any earlier database of the
   * same state folder cannot be ({@link forgetProjectionsOfAnotherLog}). False for a kept stream;
   * unset when the start could not tell. Set by {@link startSecuredNats} and {@link startSecuredNatsCluster}.
   */
  newLog?: boolean;
}

/**
 * What a server's store holds of the Run stream `stream`, read as `auth` (the admin): null when
 * the stream does not exist (a new store, or one that never held it), else its partition count
 * (its `runplane_partitions` metadata; null when it says none: an older stream).
 */
export async function storedStream(url: string, auth: NatsProbeAuth, stream: string): Promise<{ partitions: number | null } | null> {
  const nc = await connect({
    servers: natsServerList(url),
    timeout: 5_000,
    reconnect: false,
    ...natsUserOptions(auth.user, auth.pass),
    ...natsTlsOptions(url, auth.caFile),
  });
  try {
    const jsm = await jetstreamManager(nc, { timeout: 5_000 });
    const info = await jsm.streams.info(stream).catch((e: unknown) => {
      if (/stream not found/i.test(String((e as Error)?.message))) return null;
      throw e;
    });
    if (!info) return null;
    const stored = info.config.metadata?.[PARTITIONS_METADATA_KEY];
    return { partitions: stored !== undefined && /^\d+$/.test(stored) ? Number(stored) : null };
  } finally {
    await nc.close();
  }
}

/**
 * The partition count a Run stream was created with (its `runplane_partitions` metadata), or null
 * when the stream does not exist yet or says nothing (an older stream), read as `auth` (the admin).
 */
export async function storedPartitionCount(url: string, auth: NatsProbeAuth, stream: string): Promise<number | null> {
  return (await storedStream(url, auth, stream))?.partitions ?? null;
}

/** `NATS_CA_FILE` for a client of `nats` when it requires TLS, else nothing. */
export function natsCaEnvOf(nats: Pick<SecuredNats, 'caFile'>): { NATS_CA_FILE: string } | Record<string, never> {
  return nats.caFile ? { NATS_CA_FILE: nats.caFile } : {};
}

/**
 * Starts a nats-server of its own (never reconfiguring one that already runs) on a free loopback
 * port, with JetStream storing under `stateDir`/nats (kept between runs) and the Runplane users and
 * permissions of {@link natsAuthConfig} switched on: a connection without a user is refused, each
 * service may publish only the facts it owns (K9). With `tls` (the default) the server requires
 * TLS, with a certificate of a private CA made anew in `stateDir`/nats/tls (createDevNatsTls):
 * `caFile` is the clients' `NATS_CA_FILE`. `downstream`: the downstream durable consumers, each
 * with a user of its own (default: eventlog's `DEFAULT_DOWNSTREAM_CONSUMERS`).
 * @throws Error with one line saying how to get nats-server when it cannot be had.
 */
export async function startSecuredNats(opts: {
  stateDir: string;
  space: SubjectSpace;
  users?: NatsUsers;
  downstream?: readonly string[];
  /** Require TLS (default true). */
  tls?: boolean;
  /** How long the server has to answer, ms (default {@link NATS_READY_TIMEOUT_MS}); then it is stopped and the start fails. */
  readyTimeoutMs?: number;
  /** The port to try first (default: a free one); a port another process holds is given up for a free one. */
  port?: number;
}): Promise<SecuredNats> {
  const bin = natsServerBinary();
  const dir = join(opts.stateDir, 'nats');
  mkdirSync(dir, { recursive: true });
  // a server of an earlier start (its starter killed, its guard stopping it) must leave the store first
  const pidFile = natsPidFile(dir);
  await waitForStoreReleased(pidFile, join(dir, 'store'));
  // every service signs its events with a key of its own, made anew beside the server's files
  const given = opts.users ?? newNatsUsers(opts.downstream);
  const users = { ...given, signing: given.signing ?? createDevSigning(join(dir, 'signing')) };
  const tls = (opts.tls ?? true) ? await createDevNatsTls(join(dir, 'tls')) : null;
  const config = join(dir, 'server.conf');
  let space = opts.space;
  let adopted = '';
  const writeConfig = () =>
    writeFileSync(config, natsAuthConfig(space, users, opts.downstream) + (tls ? `\n${natsTlsConfig(tls)}` : ''), { mode: 0o600 });
  writeConfig();
  const logFile = join(dir, 'server.log');
  const admin = { user: users.admin.user, pass: users.admin.password, ...(tls ? { caFile: tls.caFile } : {}) };
  const readyTimeoutMs = opts.readyTimeoutMs ?? NATS_READY_TIMEOUT_MS;
  /**
   * Starts the server on `port` and waits until it answers; resolves with the process, or rejects
   * with a readable reason ({@link PortTaken} when the port was taken) once it stopped it again.
   */
  const launch = async (port: number): Promise<{ child: ChildProcess; url: string }> => {
    // the log is kept between runs: only what this start writes explains its failure
    const logFrom = sizeOf(logFile);
    const child = track(
      spawn(bin, ['-c', config, '-a', '127.0.0.1', '-p', String(port), '-js', '-sd', join(dir, 'store'), '-l', logFile, '-P', pidFile], {
        stdio: 'ignore',
        // a process group of its own: a Ctrl-C stops it after the services (stopEverything)
        detached: true,
      }),
    );
    stopping.set(child, { graceMs: 10_000, serves: true });
    const url = `nats://127.0.0.1:${port}`;
    const deadline = Date.now() + readyTimeoutMs;
    while (!(await natsReachable(url, 500, admin))) {
      const exited = child.exitCode !== null || child.signalCode !== null;
      if (exited || Date.now() > deadline) {
        // a server that does not answer is stopped before the error: nothing of this start is left running
        await stopChild(child, 2_000);
        const how = exited ? `exited (${child.exitCode ?? child.signalCode})` : `did not answer within ${readyTimeoutMs / 1000} s`;
        const failure = new Error(`nats-server failed to start: ${bin} ${how} at ${url}${lastLineOf(logFile, logFrom)} (log: ${logFile})`);
        throw exited && portTakenIn(textSince(logFile, logFrom)) ? new PortTaken(failure) : failure;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    return { child, url };
  };
  // a free port can be taken by another process between the look and the server's bind (tests
  // and stacks start side by side): the server then exits saying so, and the start takes another
  return startOnFreePorts(async (attempt) => {
    const port = attempt === 1 && opts.port !== undefined ? opts.port : await getPort({ host: '127.0.0.1' });
    let { child, url } = await launch(port);
    // a store kept from an earlier start may hold the Run stream with another partition count:
    // every service takes the stream's (event-log.ts adoptPartitions), so the permissions must
    // name its partitions, not the ones asked for (else the consumers of the others are refused
    // and the services never get ready): the server starts again, on the same port, with the stream's count
    const kept = await storedStream(url, admin, space.stream).catch(() => undefined);
    const stored = kept?.partitions ?? null;
    if (stored !== null && stored !== space.partitions) {
      await stopChild(child);
      adopted = `; the kept stream ${space.stream} has ${stored} partitions, used instead of the ${space.partitions} configured (RUNPLANE_PARTITIONS)`;
      space = { ...space, partitions: stored };
      writeConfig();
      ({ child, url } = await launch(port));
    }
    return {
      url,
      child,
      users,
      ...(tls ? { caFile: tls.caFile } : {}),
      partitions: space.partitions,
      newLog: kept === null,
      note: `started ${bin} -js on ${url} with the Runplane users${tls ? `, TLS required (CA ${tls.caFile})` : ''} (config ${config})${adopted}`,
      stop: () => stopChild(child),
    };
  });
}

/**
 * Starts a JetStream cluster of `nodes` (default 3) nats-server processes on loopback ports
 * ({@link startNatsCluster}), each storing under `stateDir`/nats-cluster/<node> (kept between
 * runs; the ports are new each time, the routes follow), with the Runplane users and permissions
 * of {@link natsAuthConfig}, and with `tls` (the default) TLS required on every node's client port
 * as {@link startSecuredNats}. `url` lists every node (the services' `NATS_URL`); create the stream
 * and buckets with `RUNPLANE_NATS_REPLICAS=3`. A kept store whose Run stream has another partition
 * count than `space` asks for decides it (`partitions`, said in `note`), as in {@link startSecuredNats}.
 * @throws Error with one line saying how to get nats-server when it cannot be had.
 */
export async function startSecuredNatsCluster(opts: {
  stateDir: string;
  space: SubjectSpace;
  users?: NatsUsers;
  nodes?: number;
  /** Require TLS (default true). */
  tls?: boolean;
}): Promise<SecuredNats> {
  const dir = join(opts.stateDir, 'nats-cluster');
  const given = opts.users ?? newNatsUsers();
  const users = { ...given, signing: given.signing ?? createDevSigning(join(dir, 'signing')) };
  const tls = (opts.tls ?? true) ? await createDevNatsTls(join(dir, 'tls')) : null;
  const auth = { user: users.admin.user, pass: users.admin.password, ...(tls ? { caFile: tls.caFile } : {}) };
  let space = opts.space;
  const start = () =>
    startNatsCluster({
      nodes: opts.nodes ?? 3,
      stateDir: dir,
      config: natsAuthConfig(space, users) + (tls ? `\n${natsTlsConfig(tls)}` : ''),
      auth,
      root: repoRoot(),
      // a node serves the services: stopped after them (stopEverything)
      track: (child) => {
        stopping.set(child, { graceMs: 10_000, serves: true });
        return track(child);
      },
    });
  let cluster = await start();
  // as startSecuredNats: a kept store's Run stream decides the partition count the permissions
  // name (every service takes the stream's); the cluster starts again with it when it differs
  let adopted = '';
  const kept = await storedStreamOfCluster(cluster.url, auth, space.stream);
  const stored = kept?.partitions ?? null;
  if (stored !== null && stored !== space.partitions) {
    await cluster.stop();
    adopted = `; the kept stream ${space.stream} has ${stored} partitions, used instead of the ${space.partitions} configured (RUNPLANE_PARTITIONS)`;
    space = { ...space, partitions: stored };
    cluster = await start();
  }
  const started = cluster;
  return {
    url: started.url,
    child: null,
    cluster: started,
    users,
    ...(tls ? { caFile: tls.caFile } : {}),
    partitions: space.partitions,
    newLog: kept === null,
    note: `started a ${started.nodes.length}-node JetStream cluster (nats-server ${started.server.version}) on ${started.url} with the Runplane users${tls ? `, TLS required (CA ${tls.caFile})` : ''} (store ${dir})${adopted}`,
    stop: () => started.stop(),
  };
}

/**
 * {@link storedStream} on a cluster just started: its JetStream answers once the nodes have
 * elected a meta leader (and the stream's leader), so a passing failure (a timeout, no responders,
 * a 503) is tried again for up to {@link BUS_PROVISIONING_PATIENCE_MS}.
 */
async function storedStreamOfCluster(url: string, auth: NatsProbeAuth, stream: string): Promise<{ partitions: number | null } | null> {
  return retry('busProvisioning', () => storedStream(url, auth, stream), {
    maxRetryTime: BUS_PROVISIONING_PATIENCE_MS,
    shouldRetry: ({ error }) => isTransientNatsError(error),
  });
}

/** How long {@link provisionAsAdmin} repeats a provisioning that failed for a passing NATS reason, ms. */
export const BUS_PROVISIONING_PATIENCE_MS = 60_000;

/**
 * Creates the Run stream, the buckets and the downstream durable consumers (libs/eventlog
 * `provisionBus`; `downstream` as given to {@link startSecuredNats}, default eventlog's
 * `DEFAULT_DOWNSTREAM_CONSUMERS`) as the admin user, before any service starts: the services' users
 * may not create them. A passing NATS failure (a timeout while a cluster elects the stream's leader,
 * no responders, a 503) is tried again for up to {@link BUS_PROVISIONING_PATIENCE_MS}.
 */
export async function provisionAsAdmin(env: NodeJS.ProcessEnv, users: NatsUsers | null, downstream?: readonly string[]): Promise<void> {
  const bus = BusConfig.parse({ ...env, ...(users ? natsEnvOf(users, 'admin') : {}) });
  // a cluster answers JetStream requests before it has elected every stream's leader: the first
  // request about an existing stream (the connect's, or the provisioning's) can time out, so the
  // whole (idempotent) set-up is repeated on a new connection
  await retry(
    'busProvisioning',
    async () => {
      const log = await EventLog.connect({
        natsUrl: bus.NATS_URL,
        stream: bus.RUNPLANE_STREAM,
        prefix: bus.RUNPLANE_SUBJECT_PREFIX,
        name: 'runplane-provision',
        duplicateWindowMs: bus.RUNPLANE_DUPLICATE_WINDOW_MS,
        partitions: bus.RUNPLANE_PARTITIONS,
        replicas: bus.RUNPLANE_NATS_REPLICAS,
        ...(bus.NATS_USER ? { user: bus.NATS_USER, pass: bus.NATS_PASSWORD ?? '' } : {}),
        ...(bus.NATS_CA_FILE ? { caFile: bus.NATS_CA_FILE } : {}),
      });
      try {
        await (downstream ? provisionBus(log, downstream) : provisionBus(log));
      } finally {
        await log.close();
      }
    },
    { maxRetryTime: BUS_PROVISIONING_PATIENCE_MS, shouldRetry: ({ error }) => isTransientNatsError(error) },
  );
}

/**
 * The bus of `space` on `nats` provisioned as its admin user ({@link provisionAsAdmin}: the Run
 * stream, the buckets and the `downstream` durables), and the admin's event log on it, open (the
 * caller closes it): where a test of the users and their permissions starts.
 */
export async function provisionedAdminLog(nats: SecuredNats, space: SubjectSpace, downstream: readonly string[]): Promise<EventLog> {
  const env = {
    NATS_URL: nats.url,
    ...natsCaEnvOf(nats),
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    RUNPLANE_PARTITIONS: String(space.partitions),
  };
  await provisionAsAdmin(env, nats.users, downstream);
  return EventLog.connect({
    natsUrl: nats.url,
    ...space,
    name: 'admin',
    user: nats.users.admin.user,
    pass: nats.users.admin.password,
    ...(nats.caFile ? { caFile: nats.caFile } : {}),
  });
}

/**
 * Why PostgreSQL refused a connection for a passing reason, or null when the reason is lasting (no
 * server listening, an unknown host, a refused login): a connect timeout on a loaded machine, too
 * many clients (53300), a server starting or shutting down (57P03).
 */
export function passingDatabaseRefusal(e: unknown): string | null {
  const err = e as { code?: string; message?: string };
  if (err?.code === '53300') return 'too many clients';
  if (err?.code === '57P03') return 'the server is starting or stopping';
  if (/timeout|timed out|Connection terminated unexpectedly/i.test(err?.message ?? '')) return 'the connect timed out';
  return null;
}

/**
 * True when PostgreSQL accepts a connection at `url` within `patienceMs` (default 30,000 ms).
 * A refusal for a passing reason ({@link passingDatabaseRefusal}) is tried again under the
 * `databaseBusy` policy: a CI run saw a stack's start call PostgreSQL unreachable while 96 Runs
 * of another file held the machine, so a 2 s connect timeout alone said "not reachable" of a
 * server that was there. A server that does not listen answers false at once, so the CLI falls
 * back to its embedded database without waiting.
 */
export async function postgresReachable(url: string, patienceMs = 30_000): Promise<boolean> {
  try {
    await retry(
      'databaseBusy',
      async () => {
        const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
        client.on('error', () => undefined);
        try {
          await client.connect();
        } finally {
          await client.end().catch(() => undefined);
        }
      },
      { maxRetryTime: patienceMs, shouldRetry: ({ error }) => passingDatabaseRefusal(error) !== null },
    );
    return true;
  } catch {
    return false;
  }
}

/**
 * Makes sure the database named in `databaseUrl` exists (created through the server's `postgres`
 * database when missing, by `ensureDatabase` of `@runplane/projections`). Returns false when the
 * server is not reachable.
 * @throws when the name is not a plain lowercase identifier or the server refuses.
 */
export async function ensureDatabaseExists(databaseUrl: string): Promise<boolean> {
  const admin = databaseUrlWith(databaseUrl, 'postgres');
  if (!(await postgresReachable(admin))) return false;
  await ensureDatabase(admin, databaseNameOf(databaseUrl));
  return true;
}

/** Drops the database named in `databaseUrl` (test clean-up), terminating its connections first; true when there was one. */
export async function dropDatabase(databaseUrl: string): Promise<boolean> {
  return dropNamedDatabase(databaseUrlWith(databaseUrl, 'postgres'), databaseNameOf(databaseUrl));
}

/**
 * Drops the stack's own projection database (`databaseUrl`, {@link projectionDatabaseFor}) when
 * its NATS holds a new log (`nats.newLog`: the state folder's store was replaced, the database
 * stayed): its Runs are not in this log, and the projector would refuse it (K11; apps/projector
 * projection-source.ts). Never the configured database itself (`configuredUrl`), and nothing when
 * PostgreSQL is not reachable.
 * @returns true when a database was dropped (the caller says so; ensureDatabaseExists creates it anew).
 */
export async function forgetProjectionsOfAnotherLog(nats: Pick<SecuredNats, 'newLog'>, databaseUrl: string, configuredUrl: string): Promise<boolean> {
  if (nats.newLog !== true || databaseNameOf(databaseUrl) === databaseNameOf(configuredUrl)) return false;
  if (!(await postgresReachable(databaseUrlWith(databaseUrl, 'postgres'), 5_000))) return false;
  return dropDatabase(databaseUrl);
}

/** Every process this module started and that has not exited yet. */
const running = new Set<ChildProcess>();

/**
 * How each process this module started is stopped by {@link stopEverything}: its grace between
 * SIGTERM and SIGKILL (a service's {@link stopGraceMs}), and whether it serves the others (the
 * nats-server and the scripted model: stopped once the services have exited, so a draining
 * runtime or tools process can still hand its Runs over and finish its model call).
 */
const stopping = new WeakMap<ChildProcess, { graceMs: number; serves: boolean }>();

/**
 * Stops every process this module started, e.g. from a signal handler while a stack is still
 * starting: the services first, each with its own grace (a runtime or tools process drains and
 * hands its Runs over, docs/recovery.md), then what they use (scripted model, nats-server). Each
 * process runs in a process group of its own (`detached`), so a Ctrl-C in the terminal reaches the
 * CLI alone, which stops them with one SIGTERM each: a second signal would make a service exit at
 * once, its drain unfinished (a trial's `up`, 5 of 5 stops).
 */
export async function stopEverything(): Promise<void> {
  const serves = (c: ChildProcess) => stopping.get(c)?.serves === true;
  await Promise.all([...running].filter((c) => !serves(c)).map((c) => stopChild(c, stopping.get(c)?.graceMs)));
  await Promise.all([...running].map((c) => stopChild(c, stopping.get(c)?.graceMs)));
}

/** The pids of every process this module started that has not exited yet (tests check that a failed start left none). */
export function runningProcesses(): number[] {
  return [...running].map((c) => c.pid ?? -1);
}

function track(child: ChildProcess): ChildProcess {
  running.add(child);
  const watchdog = child.pid === undefined ? null : outliveGuard(child.pid);
  child.once('exit', () => {
    running.delete(child);
    // the process is gone: retire its guard before it could signal a pid given to another process
    watchdog?.kill('SIGKILL');
  });
  // a binary that cannot be started emits 'error' (and no 'exit'): the start that awaits it fails on its own
  child.once('error', () => {
    running.delete(child);
    watchdog?.kill('SIGKILL');
  });
  return child;
}

/**
 * How long a process of a stack whose starter died has after SIGTERM before its guard sends
 * SIGKILL, in tenths of a second (5 s).
 */
const ORPHAN_GRACE_TENTHS = 50;

/**
 * A guard that stops process `pid` when this process dies in any way, kill -9 included (no exit
 * handler of ours runs then): a `sh` whose stdin is a pipe from this process sees it close, then
 * sends SIGTERM, and SIGKILL after {@link ORPHAN_GRACE_TENTHS} if the process still runs. Without
 * it a killed `runplane up`, demo or test left its nats-server and services running, and the next
 * `up` took over the state folder's lock from the dead process and started a second nats-server
 * on the store the first still held. The guard runs in a session of its own and also ignores SIGHUP,
 * SIGINT and SIGQUIT, so what a closed terminal or a Ctrl-C sends to the whole process group never
 * stops it (a hangup killed the guards with the CLI and left the nats-server, which takes SIGHUP as
 * a reload, running). It never keeps this process alive
 * (unref'd) and is killed once its process exits. Null when `sh` cannot be started (the stack
 * still runs, unguarded).
 */
function outliveGuard(pid: number): ChildProcess | null {
  try {
    const guard = spawn(
      'sh',
      [
        '-c',
        'trap "" HUP INT QUIT; read _ || { kill -TERM "$1" 2>/dev/null; i=0; while kill -0 "$1" 2>/dev/null && [ "$i" -lt "$2" ]; do sleep 0.1; i=$((i+1)); done; [ "$i" -ge "$2" ] && kill -KILL "$1" 2>/dev/null; }',
        'sh',
        String(pid),
        String(ORPHAN_GRACE_TENTHS),
      ],
      // a session of its own: a signal sent to this process's group (a closed terminal's SIGHUP, a
      // Ctrl-C) never reaches it, not even before its `trap` has run (a CI run's hangup of a starter's
      // group came while its guard was still starting, killed it, and left the nats-server running)
      { stdio: ['pipe', 'ignore', 'ignore'], detached: true },
    );
    guard.on('error', () => undefined);
    guard.stdin?.on('error', () => undefined);
    guard.unref();
    (guard.stdin as unknown as { unref?: () => void } | null)?.unref?.();
    return guard;
  } catch {
    return null;
  }
}

async function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined || !running.has(child)) return;
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

export interface ManagedProcess {
  name: string;
  child: ChildProcess;
  /** The URL the process printed in its ready line. */
  url: string;
  /**
   * SIGTERM, then SIGKILL when it has not exited after `graceMs` (default {@link stopGraceMs} of its
   * environment, like a pod's termination grace: above the process's own shutdown bound).
   */
  stop(graceMs?: number): Promise<void>;
}

/**
 * How long a started process has to print its ready line, ms: a minute. On the 2-core CI machine,
 * beside loaded-liveness's CPU hogs, a runtime took more than 30 s (test/e2e/drain.test.ts, CI
 * 2026-12-01).
 */
export const READY_TIMEOUT_MS = 60_000;

/**
 * Spawns `node ...nodeFlags <script> ...args` and waits for a stdout line matching `ready` (whose
 * first group is the URL). Every output line goes to `log` (a file stream), never to the terminal.
 * `onSpawn` gets the process at once (a caller that may have to stop it before it is ready).
 * @throws Error naming `name` and the last lines it wrote when it exits first or is not ready
 * within `timeoutMs`; the process is stopped before the error either way.
 */
export async function spawnReady(
  name: string,
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  log: WriteStream,
  timeoutMs = READY_TIMEOUT_MS,
  nodeFlags: readonly string[] = [],
  onSpawn?: (child: ChildProcess) => void,
): Promise<ManagedProcess> {
  // a process group of its own: a terminal's Ctrl-C goes to the CLI, which stops it once (stopEverything)
  const child = track(spawn(process.execPath, [...nodeFlags, script, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'], detached: true }));
  stopping.set(child, { graceMs: stopGraceMs(env), serves: name === 'scripted-model' });
  onSpawn?.(child);
  const tail: string[] = [];
  const record = (line: string) => {
    // a line read after the stack's log was closed (a process's last words at a stop) is kept in the tail only
    if (!log.writableEnded) log.write(`[${name}] ${line}\n`);
    tail.push(line);
    if (tail.length > 20) tail.shift();
  };
  createInterface({ input: child.stderr! }).on('line', record);
  // what it wrote last, or that it wrote nothing (a start stopped by Ctrl-C printed a bare colon)
  const lastWords = () => (tail.length > 0 ? `:\n${telling(tail).join('\n')}` : ' (it wrote nothing)');
  const url = await new Promise<string>((resolveUrl, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      const why = new Error(`${name} did not become ready within ${timeoutMs} ms${lastWords()}`);
      void stopChild(child, 2_000).then(() => reject(why));
    }, timeoutMs);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      record(line);
      const m = ready.exec(line);
      if (m?.[1]) {
        clearTimeout(timer);
        resolveUrl(m[1]);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      if (timedOut) return; // stopped for it: the timeout's error says why
      // 'exit' can come before the last of its output is read (a CI run's error said "it wrote
      // nothing" of a process whose reason was still in the pipe): its lines first, within a bound
      void outputRead(child, OUTPUT_DRAIN_MS).then(() => reject(new Error(`${name} exited (${code ?? signal}) before it was ready${lastWords()}`)));
    });
  });
  return { name, child, url, stop: (graceMs?: number) => stopChild(child, graceMs ?? stopGraceMs(env)) };
}

/** How long an exited process's output may still be read before its start's error is made, ms. */
const OUTPUT_DRAIN_MS = 1_000;

/** Resolves when `child`'s stdout and stderr have ended (every line read), or after `boundMs`. */
function outputRead(child: ChildProcess, boundMs: number): Promise<void> {
  const ended = (s: NodeJS.ReadableStream | null) =>
    !s || (s as unknown as { readableEnded: boolean }).readableEnded
      ? Promise.resolve()
      : new Promise<void>((r) => (s.once('end', r), s.once('close', r)));
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<void>((r) => (timer = setTimeout(r, boundMs)));
  return Promise.race([Promise.all([ended(child.stdout), ended(child.stderr)]).then(() => undefined), bound]).finally(() => clearTimeout(timer));
}

/** pino's level from which a log line says why a start failed (50 error, 60 fatal). */
const ERROR_LEVEL = 50;

/**
 * The lines of a process's last output that say why it failed: when some are JSON log lines
 * (pino) of level error or fatal, only their messages (`tools failed to start: listen EADDRINUSE
 * ...`); else every line as written. A trial's port clash printed 20 raw JSON lines, among them
 * "Nest application successfully started" just before the one that said why.
 */
export function telling(lines: readonly string[]): string[] {
  const errors: string[] = [];
  for (const line of lines) {
    let entry: unknown;
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    const e = entry as { level?: unknown; msg?: unknown; err?: { message?: unknown } };
    if (typeof e?.level === 'number' && e.level >= ERROR_LEVEL && typeof e.msg === 'string')
      errors.push(typeof e.err?.message === 'string' && !e.msg.includes(e.err.message) ? `${e.msg}: ${e.err.message}` : e.msg);
  }
  return errors.length > 0 ? errors : [...lines];
}

/**
 * The grace a process gets between SIGTERM and SIGKILL, ms: its shutdown bound
 * (`RUNPLANE_SHUTDOWN_GRACE_SECONDS`, 25 s when unset or not a number; a service exits by then
 * whatever its drain and its connections still wait for) plus 5 s, like a pod's
 * `terminationGracePeriodSeconds` above it.
 */
export function stopGraceMs(env: NodeJS.ProcessEnv): number {
  const grace = Number(env.RUNPLANE_SHUTDOWN_GRACE_SECONDS || 25);
  return ((Number.isFinite(grace) && grace > 0 ? grace : 25) + 5) * 1000;
}

export interface StackOptions {
  /** Environment for every process: NATS_URL, DATABASE_URL, RUNPLANE_STREAM, RUNPLANE_SUBJECT_PREFIX... */
  env: NodeJS.ProcessEnv;
  /** Folder for the processes' log files (created). */
  logDir: string;
  /** Scenario file for the scripted model; absent = its research policy. */
  scenarioFile?: string;
  /** Use this OpenAI-compatible endpoint instead of starting the scripted model. */
  modelBaseUrl?: string;
  /**
   * Listen on the configured ports (`*_PORT` variables, else the defaults 8081-8086, the scripted
   * model on 8090) instead of any free port: for a stack that other commands talk to.
   */
  fixedPorts?: boolean;
  /**
   * The NATS users of a server with permissions switched on ({@link startSecuredNats}): the stream
   * and buckets are created as `admin` first, and each service connects as its own user.
   */
  natsUsers?: NatsUsers;
  /**
   * Replicas per service (default 1 each): several processes of one service with the same
   * environment, for the scale-out tests (docs/operations.md "Scaling"). The HTTP endpoints are the first replica's.
   */
  replicas?: Partial<Record<ServiceName, number>>;
  /**
   * Extra `node` flags for every service process, after {@link SERVICE_NODE_FLAGS}: e.g.
   * `['--cpu-prof', '--cpu-prof-dir=DIR']` for scripts/profile-w1.js (Node 20 refuses `--cpu-prof`
   * in `NODE_OPTIONS`).
   */
  nodeFlags?: readonly string[];
}

export interface Stack {
  /** Current base URLs (a restarted service listens on a new port). */
  readonly endpoints: { admission: string; publication: string };
  /** Base URL (ending in /v1) of the model endpoint the runtime uses. */
  modelUrl: string;
  /** The scripted model process, when one was started. */
  model: ManagedProcess | null;
  /** The first (or only) live replica of each service. */
  services: Map<ServiceName, ManagedProcess>;
  /** Every live replica of each service, in start order (a stopped or exited replica leaves it). */
  replicas: Map<ServiceName, ManagedProcess[]>;
  logFile: string;
  /**
   * The event signing keys the services were given (`natsUsers.signing`, else made in
   * `logDir`/signing): each owner signs with its own, every process checks with the public keys.
   */
  signing: DevSigning;
  /** Stops every replica of one service (SIGTERM, then SIGKILL after the grace period). */
  stopService(name: ServiceName): Promise<void>;
  /**
   * Starts one more process of a service (a new replica with the same environment, plus `env`:
   * e.g. `{ PUBLICATION_PORT: '41234' }` to restart a service on the port it had).
   */
  startService(name: ServiceName, env?: NodeJS.ProcessEnv): Promise<ManagedProcess>;
  /** Stops everything, services first (in reverse start order), then the model server. */
  stop(): Promise<void>;
}

/**
 * The origins of a service at `url` as a browser may name it: its own, and the same port under
 * the other loopback name (`localhost` / `127.0.0.1`) when it listens on loopback. For publication:
 * where the Run viewer is loaded from (admission's CORS origins); for admission: where the viewer
 * may call it (publication's `RUNPLANE_VIEWER_ADMISSION_ORIGINS`).
 */
export function viewerOrigins(url: string): string[] {
  const u = new URL(url);
  const other = u.hostname === '127.0.0.1' ? 'localhost' : u.hostname === 'localhost' ? '127.0.0.1' : null;
  return [u.origin, ...(other ? [`${u.protocol}//${other}${u.port ? `:${u.port}` : ''}`] : [])];
}

/**
 * Starts the scripted model (unless `modelBaseUrl`) and every service, each as its own process:
 * all but admission at once, then admission (it needs publication's URL); resolves once every
 * process printed its ready line.
 * Event signing is on: each service gets its owner's private key and every one the public keys
 * ({@link signingEnvOf}), those of `natsUsers.signing`, else a set made in `logDir`/signing and
 * recorded in `natsUsers.signing` (so {@link natsEnvOf} gives a test or a CLI command the keys).
 */
export async function startStack(opts: StackOptions): Promise<Stack> {
  const root = repoRoot();
  mkdirSync(opts.logDir, { recursive: true });
  const signing = opts.natsUsers?.signing ?? createDevSigning(join(opts.logDir, 'signing'));
  if (opts.natsUsers) opts.natsUsers.signing = signing;
  const logFile = join(opts.logDir, 'services.log');
  const log = createWriteStream(logFile, { flags: 'a' });
  const started: ManagedProcess[] = [];
  const replicas = new Map<ServiceName, ManagedProcess[]>();
  const services = new Map<ServiceName, ManagedProcess>();
  let model: ManagedProcess | null = null;
  /** Every process this start spawned, ready or still starting. */
  const spawned = new Set<ChildProcess>();
  /** Set when a start failed: nothing more is spawned, and what is still starting is stopped. */
  let failed = false;
  const stopAll = async () => {
    for (const p of [...started].reverse()) await p.stop();
    await new Promise<void>((r) => log.end(() => r()));
  };
  /** Stops the processes spawned and not ready yet (they have no stop of their own). */
  const stopStarting = () => Promise.all([...spawned].filter((c) => !started.some((p) => p.child === c)).map((c) => stopChild(c, 2_000)));
  try {
    let modelUrl = opts.modelBaseUrl;
    if (!modelUrl) {
      const args = ['--port', opts.fixedPorts ? (opts.env.SCRIPTED_MODEL_PORT ?? '8090') : '0'];
      if (opts.scenarioFile) args.push('--scenario', resolve(opts.scenarioFile));
      model = await spawnReady(
        'scripted-model',
        join(root, 'apps/scripted-model/dist/main.js'),
        args,
        { ...opts.env, ...compileCacheEnv(opts.env) },
        /listening on (\S+)/,
        log,
        undefined,
        [],
        (c) => spawned.add(c),
      );
      started.push(model);
      modelUrl = model.url;
    }
    const anyPort = {
      ADMISSION_PORT: '0',
      PUBLICATION_PORT: '0',
      RUNTIME_PORT: '0',
      TOOLS_PORT: '0',
      LIFECYCLE_PORT: '0',
      RECOVERY_PORT: '0',
      PROJECTOR_PORT: '0',
    };
    const env: NodeJS.ProcessEnv = {
      NO_COLOR: '1',
      ...opts.env,
      OPENAI_BASE_URL: modelUrl,
      ...(opts.fixedPorts ? {} : anyPort),
    };
    await provisionAsAdmin(env, opts.natsUsers ?? null);
    // admission's address is fixed before anything starts (publication, which starts first, tells
    // the Run viewer the only admission it may call): the configured port, or one free port kept
    // for admission's first live process (a restart while none is alive gets it again), below the
    // ephemeral range so that no outgoing connection takes it before admission binds it (ports.ts)
    const host = env.HOST ?? '127.0.0.1';
    const admissionPort = opts.fixedPorts ? (env.ADMISSION_PORT ?? '8081') : String(await freePortOutsideEphemeral(host));
    const admissionUrl = `http://${host.includes(':') ? `[${host}]` : host}:${admissionPort}`;
    const viewerEnv = (name: ServiceName): NodeJS.ProcessEnv => {
      // admission answers CORS for the Run viewer publication serves (its origin is known once it
      // listens; publication starts first), unless RUNPLANE_CORS_ORIGINS is set
      const publication = services.get('publication');
      if (name === 'admission') {
        return {
          ...((replicas.get('admission') ?? []).length === 0 ? { ADMISSION_PORT: admissionPort } : {}),
          ...(env.RUNPLANE_CORS_ORIGINS === undefined && publication ? { RUNPLANE_CORS_ORIGINS: viewerOrigins(publication.url).join(',') } : {}),
        };
      }
      // the viewer may send the token to that admission only (`RUNPLANE_VIEWER_ADMISSION_ORIGINS`), unless set
      if (name === 'publication' && env.RUNPLANE_VIEWER_ADMISSION_ORIGINS === undefined) {
        return { RUNPLANE_VIEWER_ADMISSION_ORIGINS: viewerOrigins(admissionUrl).join(',') };
      }
      return {};
    };
    const startService = async (name: ServiceName, extra: NodeJS.ProcessEnv = {}) => {
      const own = {
        ...env,
        ...serviceAllocatorEnv(env),
        ...compileCacheEnv(env),
        ...(name === 'tools' ? inspectionCacheEnv(env, (reason) => log.write(`[devstack] ${reason}\n`)) : {}),
        ...signingEnvOf(signing, name),
        ...(opts.natsUsers ? natsEnvOf(opts.natsUsers, name) : {}),
        ...viewerEnv(name),
        ...extra,
      };
      const n = (replicas.get(name)?.length ?? 0) + 1;
      const label = n === 1 ? name : `${name}#${n}`;
      if (failed) throw new Error(`${label} not started: another process of the stack failed to start`);
      const flags = [...SERVICE_NODE_FLAGS, ...(opts.nodeFlags ?? [])];
      const p = await spawnReady(label, serviceEntry(root, name), [], own, /ready on (\S+)/, log, undefined, flags, (c) => spawned.add(c));
      started.push(p);
      const list = replicas.get(name) ?? [];
      list.push(p);
      replicas.set(name, list);
      if (!services.has(name)) services.set(name, p);
      p.child.once('exit', () => {
        const left = (replicas.get(name) ?? []).filter((r) => r !== p);
        replicas.set(name, left);
        if (services.get(name) === p) {
          if (left[0]) services.set(name, left[0]);
          else services.delete(name);
        }
      });
      return p;
    };
    const startReplicas = async (name: ServiceName) => {
      for (let i = 0; i < (opts.replicas?.[name] ?? 1); i++) await startService(name);
    };
    // every service but admission at once (each one's replicas one after another): they meet only
    // through NATS and PostgreSQL, provisioned above, so none waits for another to be ready; then
    // admission, whose CORS origins are publication's URL. Each start waits for its ready line
    // before anything returns, and a failed one stops the rest (below).
    // The first failure (a process that exited, or was not ready in time) fails the start at once,
    // naming that process: the ones still starting are stopped, not waited for (a fresh user's demo
    // whose service exited waited for every other one, up to a minute each).
    const starting = SERVICES.filter((n) => n !== 'admission').map(startReplicas);
    try {
      await Promise.all(starting);
    } catch (e) {
      failed = true;
      await stopStarting();
      await Promise.allSettled(starting);
      throw e;
    }
    // the stop order stays the reverse of SERVICES (the model server last), whichever was ready first
    const rank = (p: ManagedProcess) => (p === model ? -1 : SERVICES.indexOf(p.name.split('#')[0] as ServiceName));
    started.sort((a, b) => rank(a) - rank(b));
    await startReplicas('admission');
    return {
      get endpoints() {
        return { admission: services.get('admission')!.url, publication: services.get('publication')!.url };
      },
      modelUrl,
      model,
      services,
      replicas,
      logFile,
      signing,
      stopService: async (name) => {
        await Promise.all([...(replicas.get(name) ?? [])].map((p) => p.stop()));
      },
      startService,
      stop: stopAll,
    };
  } catch (e) {
    failed = true;
    await stopStarting();
    await stopAll();
    throw e;
  }
}
