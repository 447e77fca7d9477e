/**
 * NATS servers for tests, all of the supported release (2.12 or later) that
 * scripts/fetch-nats-server.sh caches (fetched on first use; libs/devstack ensureNatsServerBinary):
 * the suite's shared server (`NATS_URL`, started by test/support/global-setup.js), and servers and
 * 3-node clusters a test starts itself. A started server runs with JetStream on a free loopback
 * port with its own temporary store, requiring the suite's user and TLS unless given a config of
 * its own ({@link SUITE_NATS}), and can be stopped, killed, restarted on the same port and store,
 * frozen and thawed: the base for fault-injection tests. The machine's own nats-server (2.9.10)
 * is no longer a target and is never used.
 *
 * Started processes never outlive the test process: each is watched by a tiny `sh` that SIGKILLs
 * it and removes its folder when the test process dies in any way (its stdin pipe closes: normal
 * exit, crash, SIGKILL), and outside Jest an exit hook does the same at once. Tests should still
 * `cleanup()` in afterAll (describeEachNatsServer does), which stops them without delay.
 */
import { afterAll, beforeAll, describe, expect } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, openSync, closeSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type ConnectionOptions, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { natsTlsOptions, natsUserOptions } from '@runplane/eventlog';
// the package's parts, not its index: the index loads the whole local stack (PostgreSQL, projections)
import {
  clusterNodeSpecs,
  compareVersions,
  ensureNatsServerBinary,
  jetStreamVersion,
  natsServerVersion,
  NATS_SERVER_MIN_VERSION,
  PortTaken,
  startOnFreePorts,
  portTakenIn,
} from '@runplane/devstack/nats-server';
import { freePortOutsideEphemeral } from '@runplane/devstack/ports';
import { natsTlsConfig } from '@runplane/devstack/tls';

/** The repository root (this file is test/support/nats-server.ts). */
const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/** Where scripts/fetch-nats-server.sh caches current releases: `<dir>/<version>/nats-server`. */
export const NATS_SERVER_CACHE = join(repoRoot, '.cache', 'nats-server');

/**
 * The suite's shared server (started by test/support/global-setup.js before any test file, which
 * sets `NATS_URL`); tests use their own stream names on it and never stop it. It refuses a
 * connection without the suite's user and requires TLS: connect through {@link SHARED_NATS},
 * {@link suiteNatsOptions} or {@link suiteNatsEnv}, never with the bare URL.
 */
export const SHARED_NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';

/**
 * The suite's NATS user, its password and the CA the servers' certificate chains to (`NATS_USER`,
 * `NATS_PASSWORD`, `NATS_CA_FILE`, set by test/support/global-setup.js): valid on the shared
 * server and on every server {@link TestNatsServer} starts without a config of its own, so a
 * process spawned with `process.env` reaches either. `pass` for `EventLog.connect`, `password`
 * for consumer's `openRunStream`.
 * @throws Error at import when global-setup.js did not set them (a test run outside Jest's set-up).
 */
export const SUITE_NATS: { user: string; pass: string; password: string; caFile: string } = (() => {
  const { NATS_USER: user, NATS_PASSWORD: pass, NATS_CA_FILE: caFile } = process.env;
  if (!user || pass === undefined || !caFile)
    throw new Error(
      'the suite nats-server credentials are not set up: NATS_USER, NATS_PASSWORD and NATS_CA_FILE come from test/support/global-setup.js',
    );
  return { user, pass, password: pass, caFile };
})();

/** The shared server as the options of `EventLog.connect` / consumer's `openRunStream`: its URL and {@link SUITE_NATS}. */
export const SHARED_NATS = { natsUrl: SHARED_NATS_URL, ...SUITE_NATS };

/**
 * Connect options (`@nats-io/transport-node` `connect`) for `servers` (default the shared server;
 * any server started with the suite's user): the suite's user with its inbox prefix (eventlog
 * natsUserOptions) and TLS verified against the suite's CA, plus `extra`.
 */
export function suiteNatsOptions<T extends object>(servers: string = SHARED_NATS_URL, extra: T = {} as T): ConnectionOptions & T {
  return {
    servers: servers.split(','),
    ...natsUserOptions(SUITE_NATS.user, SUITE_NATS.pass),
    ...natsTlsOptions(servers, SUITE_NATS.caFile),
    ...extra,
  };
}

/**
 * The environment that makes a spawned process (a service, the CLI) use `url` (default the shared
 * server) as the suite's user: `NATS_URL`, `NATS_USER`, `NATS_PASSWORD`, `NATS_CA_FILE`.
 */
export function suiteNatsEnv(url: string = SHARED_NATS_URL): { NATS_URL: string; NATS_USER: string; NATS_PASSWORD: string; NATS_CA_FILE: string } {
  return { NATS_URL: url, NATS_USER: SUITE_NATS.user, NATS_PASSWORD: SUITE_NATS.pass, NATS_CA_FILE: SUITE_NATS.caFile };
}

/**
 * The nats-server configuration that makes a server require the suite's user and TLS with the
 * shared server's certificate (made by global-setup.js beside the CA: `server-cert.pem`,
 * `server-key.pem`; it names 127.0.0.1, so it serves any loopback port).
 */
export function suiteNatsConfig(): string {
  const dir = dirname(SUITE_NATS.caFile);
  return [
    `authorization { users: [ { user: ${JSON.stringify(SUITE_NATS.user)}, password: ${JSON.stringify(SUITE_NATS.pass)} } ] }`,
    natsTlsConfig({ certFile: join(dir, 'server-cert.pem'), keyFile: join(dir, 'server-key.pem') }),
  ].join('\n');
}

export interface NatsServerOptions {
  /** Path of the nats-server binary to run. */
  bin: string;
  /** Port to listen on (default: a free loopback port). */
  port?: number;
  /**
   * Text of a server config file (passed with `-c`; the command-line flags still win). Without
   * one the server requires the suite's user and TLS ({@link suiteNatsConfig}; connect with
   * {@link SUITE_NATS}); a config of its own brings its own users (and `auth` for the probe).
   */
  config?: string;
  /** Extra command-line arguments. */
  args?: string[];
  /** How long to wait for the server to answer with JetStream (default 15 s). */
  readyTimeoutMs?: number;
  /**
   * A user the readiness probe connects as, when `config` requires one (libs/devstack
   * natsAuthConfig), and the CA it verifies the server against when `config` requires TLS.
   */
  auth?: { user: string; pass: string; caFile?: string };
}

/** Every started server process that has not exited yet (killed on process exit). */
const live = new Set<ChildProcess>();
/** Temporary folders of servers not cleaned up yet (removed on process exit). */
const dirs = new Set<string>();

/**
 * Kills and removes everything on process exit. Under Jest this never fires (each test file gets
 * its own `process` object whose 'exit' is not emitted), so the per-server watchdog is what holds.
 */
function onExit(): void {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      /* already gone */
    }
  }
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
}
let exitHookInstalled = false;
function ensureExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', onExit);
}

/**
 * A nats-server process this test started, with JetStream, on `127.0.0.1:<port>`, storing in its
 * own temporary folder. Start one with `TestNatsServer.start()`.
 */
export class TestNatsServer {
  /** `nats://127.0.0.1:<port>`; stays the same across restarts. */
  readonly url: string;
  /** The JetStream store (`-sd`); kept across restarts, removed by `cleanup()`. */
  readonly storeDir: string;
  /** The server's log file (stdout and stderr of every run). */
  readonly logFile: string;
  /** Server version as reported in its INFO (e.g. "2.15.1"), set once it answered. */
  version = 'unknown';

  private child: ChildProcess | null = null;
  private watchdog: ChildProcess | null = null;
  /** While the server is down between a kill and a new start: removes its folder when this process dies. */
  private folderWatchdog: ChildProcess | null = null;
  private cleanedUp = false;
  private frozen = false;

  private constructor(
    readonly bin: string,
    readonly port: number,
    private readonly baseDir: string,
    private readonly configFile: string | null,
    private readonly extraArgs: string[],
    private readonly readyTimeoutMs: number,
    private readonly auth: { user: string; pass: string; caFile?: string } | null = null,
  ) {
    this.url = `nats://127.0.0.1:${port}`;
    this.storeDir = join(baseDir, 'store');
    this.logFile = join(baseDir, 'server.log');
  }

  /**
   * Starts `bin -js -sd <tmp>/store -a 127.0.0.1 -p <port>` and resolves once the server answers
   * JetStream API requests. On a port clash (free port taken meanwhile) it retries on another one.
   * @throws Error with the tail of the server log when it exits or does not answer in time.
   */
  static async start(opts: NatsServerOptions): Promise<TestNatsServer> {
    if (!existsSync(opts.bin)) throw new Error(`nats-server binary ${opts.bin} does not exist`);
    ensureExitHook();
    return startOnFreePorts(async () => {
      // RUNPLANE_TEST_NATS_DIR: a RAM-backed folder when the suite's global set-up found one
      const baseDir = mkdtempSync(join(process.env.RUNPLANE_TEST_NATS_DIR ?? tmpdir(), 'rp-nats-'));
      dirs.add(baseDir);
      let configFile: string | null = null;
      // without a config of its own, a server requires the suite's user and TLS, as the shared one does
      const secured = opts.config === undefined;
      const config = secured ? suiteNatsConfig() : opts.config;
      if (config !== undefined) {
        configFile = join(baseDir, 'server.conf');
        writeFileSync(configFile, config, { mode: 0o600 });
      }
      const auth = opts.auth ?? (secured ? SUITE_NATS : null);
      // below the ephemeral range: a restart on the same port must find it free (devstack ports.ts)
      const port = opts.port ?? (await freePortOutsideEphemeral('127.0.0.1'));
      const server = new TestNatsServer(opts.bin, port, baseDir, configFile, opts.args ?? [], opts.readyTimeoutMs ?? 15_000, auth);
      try {
        await server.launch();
        return server;
      } catch (e) {
        await server.cleanup();
        // a port given by the caller is not exchanged for another
        throw !opts.port && portTakenIn(String((e as Error).message)) ? new PortTaken(e) : e;
      }
    });
  }

  /** The running process id, or null when stopped. */
  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  /** True while the process runs (frozen counts as running). */
  get running(): boolean {
    return this.child !== null;
  }

  /** Stops gracefully: SIGTERM (after SIGCONT if frozen), waits; SIGKILL after `graceMs`. */
  async stop(graceMs = 10_000): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exited = this.exited(child);
    child.kill('SIGTERM');
    if (this.frozen) this.thaw();
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  }

  /** Kills the process with SIGKILL (a crash: nothing is flushed or closed) and waits for it. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const exited = this.exited(child);
    child.kill('SIGKILL');
    await exited;
  }

  /**
   * Starts the server again on the same port, store and config, stopping it gracefully first if
   * it still runs (call `kill()` before for a crash-restart). Resolves once it answers again.
   */
  async restart(): Promise<void> {
    await this.stop();
    await this.launch();
  }

  /**
   * A NATS outage of about `downMs`: stops the server gracefully, keeps it down for `downMs`, then
   * starts it again on the same port and store (the stream and buckets survive). Resolves with the
   * moments it went down and came back (ms since the epoch) once it answers again.
   */
  async bounce(downMs: number): Promise<{ downAt: number; upAt: number }> {
    await this.stop();
    const downAt = Date.now();
    await new Promise((r) => setTimeout(r, downMs));
    await this.launch();
    return { downAt, upAt: Date.now() };
  }

  /**
   * Suspends the process (SIGSTOP): connections stay open but nothing answers. Resolves once the
   * kernel reports every thread stopped (SIGSTOP is asynchronous; a running thread could still
   * answer right after `kill()` returned).
   */
  async freeze(timeoutMs = 5000): Promise<void> {
    const child = this.child;
    if (!child?.pid) throw new Error('nats-server is not running');
    child.kill('SIGSTOP');
    this.frozen = true;
    const deadline = Date.now() + timeoutMs;
    while (!allThreadsStopped(child.pid)) {
      if (Date.now() > deadline) throw new Error(`nats-server pid ${child.pid} did not stop within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  /** Resumes a frozen process (SIGCONT). */
  thaw(): void {
    if (!this.child) return;
    this.child.kill('SIGCONT');
    this.frozen = false;
  }

  /** Kills the process if it still runs and removes its store, config and log. Idempotent. */
  async cleanup(): Promise<void> {
    this.cleanedUp = true;
    await this.kill();
    rmSync(this.baseDir, { recursive: true, force: true });
    dirs.delete(this.baseDir);
    this.folderWatchdog?.kill('SIGKILL');
    this.folderWatchdog = null;
  }

  /** The last `lines` lines of the server log (for error messages). */
  logTail(lines = 20): string {
    try {
      return readFileSync(this.logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '(no log)';
    }
  }

  private exited(child: ChildProcess): Promise<void> {
    if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    return new Promise((r) => child.once('exit', () => r()));
  }

  private async launch(): Promise<void> {
    if (this.child) throw new Error(`nats-server on ${this.url} is already running`);
    const args = [
      ...(this.configFile ? ['-c', this.configFile] : []),
      '-js',
      '-sd',
      this.storeDir,
      '-a',
      '127.0.0.1',
      '-p',
      String(this.port),
      ...this.extraArgs,
    ];
    // output straight to a file: the server never blocks on a pipe the test does not drain
    const out = openSync(this.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn(this.bin, args, { stdio: ['ignore', out, out] });
    } finally {
      closeSync(out);
    }
    this.child = child;
    this.frozen = false;
    live.add(child);
    child.unref();
    let spawnError: Error | null = null;
    child.once('error', (e) => (spawnError = e));
    // when this process dies in any way (its stdin pipe closes), the watchdog SIGKILLs the server
    // and removes its folder; under Jest it is the only exit guarantee (see onExit)
    this.folderWatchdog?.kill('SIGKILL');
    this.folderWatchdog = null;
    const watchdog = child.pid
      ? outlivingShell('read _ || { kill -KILL "$1" 2>/dev/null; sleep 0.2; rm -rf "$2"; }', [String(child.pid), this.baseDir])
      : null;
    this.watchdog = watchdog;
    child.once('exit', () => {
      live.delete(child);
      if (this.child === child) this.child = null;
      this.frozen = false;
      // the server is gone: retire its watchdog without letting it signal anything, and until the
      // server is started again (a test that killed it) or cleaned up, keep one that only removes
      // the folder when this process dies (a Ctrl-C while a test has the server down)
      if (this.watchdog === watchdog) this.watchdog = null;
      watchdog?.kill('SIGKILL');
      if (!this.cleanedUp && this.child === null) this.folderWatchdog = outlivingShell('read _ || rm -rf "$1"', [this.baseDir]);
    });

    const deadline = Date.now() + this.readyTimeoutMs;
    for (;;) {
      if (spawnError) throw new Error(`cannot start ${this.bin}: ${(spawnError as Error).message}`);
      if (this.child !== child) {
        throw new Error(`${this.bin} exited (${child.exitCode ?? child.signalCode}) before answering on ${this.url}:\n${this.logTail()}`);
      }
      const version = await jetStreamVersion(this.url, 1000, this.auth ?? undefined);
      if (version) {
        this.version = version;
        return;
      }
      if (Date.now() > deadline) {
        await this.kill();
        throw new Error(`${this.bin} did not answer with JetStream on ${this.url} within ${this.readyTimeoutMs} ms:\n${this.logTail()}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/**
 * `sh -c 'trap "" HUP INT QUIT; <script>' sh <args>` with its stdin a pipe from this process: the
 * script's `read _` returns when this process dies in any way (kill -9 included), and the shell
 * runs in a session of its own and ignores the terminal's signals (a Ctrl-C reaches the whole
 * process group) so that it outlives them to act. Unreferenced: it never keeps this process alive.
 */
function outlivingShell(script: string, args: string[]): ChildProcess {
  // a session of its own: the group's signals never reach it, not even before its trap is set
  const shell = spawn('sh', ['-c', `trap "" HUP INT QUIT; ${script}`, 'sh', ...args], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  shell.on('error', () => undefined);
  shell.stdin?.on('error', () => undefined);
  shell.unref();
  (shell.stdin as unknown as { unref?: () => void } | null)?.unref?.();
  return shell;
}

/** True when every thread of `pid` is stopped (state T in /proc; true where /proc is missing). */
function allThreadsStopped(pid: number): boolean {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return true;
  }
  return tids.every((tid) => {
    try {
      // "<tid> (<comm>) <state> ...": the state follows the last ')'
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      return /^[Tt]$/.test(stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3));
    } catch {
      return true; // the thread is gone
    }
  });
}

/**
 * Reads the INFO line a NATS server sends first on a new connection.
 * @throws when nothing answers at `url` within `timeoutMs`.
 */
export function readServerInfo(url: string, timeoutMs = 2000): Promise<{ version: string; jetstream?: boolean; [k: string]: unknown }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = tcpConnect({ host: u.hostname, port: Number(u.port || 4222) });
    let buf = '';
    const fail = (e: Error) => {
      socket.destroy();
      reject(e);
    };
    socket.setTimeout(timeoutMs, () => fail(new Error(`no INFO from ${url} within ${timeoutMs} ms`)));
    socket.on('error', fail);
    socket.on('data', (d) => {
      buf += d.toString('utf8');
      const end = buf.indexOf('\r\n');
      if (end < 0) return;
      socket.destroy();
      const line = buf.slice(0, end);
      if (!line.startsWith('INFO ')) return reject(new Error(`${url} did not start with INFO: ${line.slice(0, 80)}`));
      try {
        resolve(JSON.parse(line.slice(5)) as { version: string; jetstream?: boolean; [k: string]: unknown });
      } catch (e) {
        reject(e instanceof Error ? e : new Error(String(e)));
      }
    });
  });
}

/** `nats-server --version` of a binary ("2.15.1"), or null when it does not run. */
export const binaryVersion = natsServerVersion;

/**
 * The nats-server binary tests start: `RUNPLANE_NATS_SERVER_BIN` when set, else the newest release
 * of 2.12 or later cached in `.cache/nats-server/<version>/nats-server`, fetched on first use.
 * @throws Error with one line saying how to get one when it cannot be had (the tests fail).
 */
export function currentNatsServerBinary(): { bin: string; version: string } {
  const found = ensureNatsServerBinary(repoRoot);
  if (compareVersions(found.version, NATS_SERVER_MIN_VERSION) < 0)
    throw new Error(`nats-server ${found.version} is older than ${NATS_SERVER_MIN_VERSION}`);
  return found;
}

/** One NATS server a test suite runs against; `setup()` before use, `teardown()` after. */
export interface NatsServerUnderTest {
  /** `current`: a started supported release (the only kind left: the machine's 2.9.10 is no longer a target). */
  kind: 'current';
  /** The server version ("2.15.1"). */
  version: string;
  /** Describe title naming version and origin, e.g. "nats-server 2.15.1 (current, started from ...)". */
  title: string;
  /** Why this server is skipped, or null when it runs (always null: a missing server fails instead). */
  skip: string | null;
  /** The server URL, valid after `setup()`. */
  readonly url: string;
  /** The started server (after `setup()`), for fault injection. */
  readonly server: TestNatsServer | null;
  /** Starts the server; resolves with its URL. */
  setup(): Promise<string>;
  /** Kills and removes the started server. */
  teardown(): Promise<void>;
}

/**
 * The servers every NATS-facing test runs against: the supported release, started privately per
 * suite (a list, so a suite can be run over several releases again).
 * @throws Error saying how to get one when no supported nats-server can be had.
 */
export async function natsServersUnderTest(): Promise<NatsServerUnderTest[]> {
  const current = currentNatsServerBinary();
  let started: TestNatsServer | null = null;
  return [
    {
      kind: 'current',
      version: current.version,
      title: `nats-server ${current.version} (current, started from ${current.bin.replace(repoRoot, '')})`,
      skip: null,
      get url() {
        if (!started) throw new Error('the nats-server is not set up yet (setup() in beforeAll)');
        return started.url;
      },
      get server() {
        return started;
      },
      async setup() {
        started ??= await TestNatsServer.start({ bin: current.bin });
        return started.url;
      },
      async teardown() {
        await started?.cleanup();
        started = null;
      },
    },
  ];
}

/**
 * Prints "testing on <title>: <test file>" to stderr, one line per server and test file, so
 * non-verbose runs (where describe titles are not shown) also record which versions ran.
 */
export function recordServer(title: string): void {
  process.stderr.write(`testing on ${title}: ${relative(repoRoot, expect.getState().testPath ?? '?')}\n`);
}

/**
 * `describe.each` over `servers`: one describe block per server, titled with its version, that
 * sets the server up before the block's own hooks and tears it down after them; skipped servers
 * become `describe.skip` blocks, so their tests show as skipped with the reason in the title.
 * Write the body with `server.url` read inside hooks or tests (not at collection time).
 */
export function describeEachNatsServer(servers: NatsServerUnderTest[], body: (server: NatsServerUnderTest) => void): void {
  for (const server of servers) {
    (server.skip ? describe.skip : describe)(server.title, () => {
      beforeAll(async () => {
        await server.setup();
        recordServer(server.title);
      });
      body(server);
      // declared after the body's hooks, so it runs after them (afterAll runs in declaration order)
      afterAll(async () => {
        await server.teardown();
      });
    });
  }
}

/** A nats-server binary a fault-injection test starts (and kills, restarts, freezes) itself. */
export interface NatsServerBinaryUnderTest {
  kind: 'current';
  bin: string;
  version: string;
  /** Describe title, e.g. "nats-server 2.15.1 (current, /.cache/nats-server/2.15.1/nats-server)". */
  title: string;
  skip: string | null;
}

/**
 * The binaries fault-injection tests start privately: the supported release.
 * @throws Error saying how to get one when no supported nats-server can be had.
 */
export function natsServerBinariesUnderTest(): NatsServerBinaryUnderTest[] {
  const current = currentNatsServerBinary();
  return [{ kind: 'current', ...current, title: `nats-server ${current.version} (current, ${current.bin.replace(repoRoot, '')})`, skip: null }];
}

/**
 * Resolves on the connection's next `reconnect` status (rejects after `timeoutMs`). Call it BEFORE
 * killing or restarting the server. Measured here: a JetStream API request buffered while the
 * client was still reconnecting timed out on 2.15.1 (not on 2.9.10); one sent after the
 * `reconnect` status was answered on both.
 */
export function nextReconnect(nc: NatsConnection, timeoutMs = 15_000): Promise<void> {
  const statuses = nc.status()[Symbol.asyncIterator]();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no reconnect within ${timeoutMs} ms`)), timeoutMs);
  });
  const reconnect = (async () => {
    for (;;) {
      const next = await statuses.next();
      if (next.done) throw new Error('connection closed before it reconnected');
      if (next.value.type === 'reconnect') return;
    }
  })();
  return Promise.race([reconnect, timeout]).finally(() => {
    clearTimeout(timer);
    void statuses.return?.();
  });
}

export interface NatsClusterTestOptions {
  /** Path of the nats-server binary (default: {@link currentNatsServerBinary}). */
  bin?: string;
  /** Number of nodes (default 3). */
  nodes?: number;
  /**
   * Configuration every node gets (e.g. natsAuthConfig of libs/devstack: the Runplane users);
   * default {@link suiteNatsConfig}: the suite's user and TLS, as a lone {@link TestNatsServer}.
   */
  config?: string;
  /** A user the readiness probe connects as, when `config` requires one (and the CA, when it requires TLS). */
  auth?: { user: string; pass: string; caFile?: string };
  /** How long each node may take to answer with JetStream (default 30 s: the cluster elects its meta leader first). */
  readyTimeoutMs?: number;
}

/**
 * A JetStream cluster of nats-server processes this test started on loopback ports (as
 * libs/devstack `startNatsCluster`, with the watchdogs of {@link TestNatsServer}): each node a
 * {@link TestNatsServer} with its own store, client and cluster port, a common cluster name and
 * routes to the others, so each can be stopped, killed (-9) and restarted on its port and store.
 */
export class TestNatsCluster {
  private constructor(
    /** The nodes, `n1`, `n2`, ... in order. */
    readonly nodes: TestNatsServer[],
    /** Their server names (`n1`...), as STREAM.INFO names the leader and replicas. */
    readonly names: string[],
  ) {}

  /**
   * Starts every node at once (a node alone has no JetStream meta leader, so none answers before a
   * majority runs) and resolves once each answers JetStream API requests.
   * @throws Error with the node's log tail when a node exits or does not answer in time.
   */
  static async start(opts: NatsClusterTestOptions = {}): Promise<TestNatsCluster> {
    // a port chosen for a node was taken before it could bind it: the whole cluster on new ports
    return startOnFreePorts(() =>
      TestNatsCluster.startOnce(opts).catch((e: unknown) => {
        throw portTakenIn(String((e as Error).message)) ? new PortTaken(e) : e;
      }),
    );
  }

  /** One attempt of {@link start}, on new free ports; every node started is cleaned up when one fails. */
  private static async startOnce(opts: NatsClusterTestOptions): Promise<TestNatsCluster> {
    const bin = opts.bin ?? currentNatsServerBinary().bin;
    const specs = await clusterNodeSpecs(opts.nodes ?? 3, () => '');
    const clusterName = `rpt${Math.random().toString(36).slice(2, 8)}`;
    const routes = specs.map((n) => `nats-route://127.0.0.1:${n.clusterPort}`).join(', ');
    const started = await Promise.allSettled(
      specs.map((spec) =>
        TestNatsServer.start({
          bin,
          port: spec.clientPort,
          config: [
            opts.config ?? suiteNatsConfig(),
            `server_name: ${spec.name}`,
            `cluster {`,
            `  name: ${clusterName}`,
            `  listen: 127.0.0.1:${spec.clusterPort}`,
            `  routes: [${routes}]`,
            `}`,
            '',
          ].join('\n'),
          readyTimeoutMs: opts.readyTimeoutMs ?? 30_000,
          ...(opts.auth ? { auth: opts.auth } : opts.config === undefined ? { auth: SUITE_NATS } : {}),
        }),
      ),
    );
    const nodes = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failures = started.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failures.length > 0) {
      await Promise.all(nodes.map((n) => n.cleanup()));
      // a node whose port was taken is the failure to report (the others may only have lost their
      // peer): {@link start} tries the cluster again on new ports for it
      throw (failures.find((f) => portTakenIn(String((f.reason as Error).message))) ?? failures[0]!).reason;
    }
    return new TestNatsCluster(
      nodes,
      specs.map((s) => s.name),
    );
  }

  /** Every node's client URL, comma-separated (the services' `NATS_URL`). */
  get url(): string {
    return this.nodes.map((n) => n.url).join(',');
  }

  /** The node whose server name is `name` (e.g. the stream leader STREAM.INFO names). */
  byName(name: string): TestNatsServer {
    const i = this.names.indexOf(name);
    if (i < 0) throw new Error(`no node named ${name} (nodes: ${this.names.join(', ')})`);
    return this.nodes[i]!;
  }

  /** Kills every node and removes their stores. Idempotent. */
  async cleanup(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.cleanup()));
  }
}

/**
 * Subscribes `subject` on `nc` and waits for the server's answer (a flush: nats-server answers a
 * subscription it refuses with `-ERR` before the flush's PONG). `errors` holds the permissions
 * violation of a refused subscription; `received` whatever the subscription got (none once refused).
 */
export async function trySubscribe(nc: NatsConnection, subject: string): Promise<{ errors: Error[]; received: Msg[] }> {
  const errors: Error[] = [];
  const received: Msg[] = [];
  nc.subscribe(subject, {
    callback: (err, m) => {
      if (err) errors.push(err);
      else received.push(m);
    },
  });
  await nc.flush();
  return { errors, received };
}
