/**
 * The bounded shutdown of a service process (shutdown.ts, docs/operations.md "Stopping a
 * service"): a service whose NATS server is frozen (SIGSTOP) and whose event handler never
 * finishes still exits within `RUNPLANE_SHUTDOWN_GRACE_SECONDS` of a SIGTERM, with exit code 1 and
 * a JSON line naming what it could not finish; a second signal exits at once. Before the bound, such
 * a process waited for its handler for ever (a pod held until SIGKILL).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';
import { connect } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { admittedEvent } from '../../../test/support/events.js';
import { EventLog } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

const current = currentNatsServerBinary();
const fixture = fileURLToPath(new URL('./fixtures/hanging-service.mjs', import.meta.url));
const tag = randomBytes(4).toString('hex');
let server: TestNatsServer;
let child: ChildProcess | undefined;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: current.bin });
});
afterEach(() => {
  server.thaw();
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});
afterAll(async () => {
  await server.cleanup();
});

type Line = Record<string, unknown> & { level: number; msg: string };

/** A started fixture process: its JSON lines so far, a wait for a line, and its exit. */
interface Started {
  proc: ChildProcess;
  lines: Line[];
  line(match: (l: Line) => boolean): Promise<Line>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

/** Spawns the fixture on its own stream (created through the returned log) with the shutdown bound `graceSeconds`. */
async function spawnFixture(name: string, graceSeconds: number): Promise<{ proc: ChildProcessByStdio<null, Readable, Readable>; log: EventLog }> {
  const stream = `RPTEST_SHUT_${name}_${tag}`;
  const prefix = `tsh${name}${tag}`;
  const log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream, prefix });
  const proc = spawn(process.execPath, [fixture], {
    env: {
      ...process.env,
      NODE_OPTIONS: '',
      NATS_URL: server.url,
      RUNPLANE_STREAM: stream,
      RUNPLANE_SUBJECT_PREFIX: prefix,
      FIXTURE_PORT: '0',
      RUNPLANE_SHUTDOWN_GRACE_SECONDS: String(graceSeconds),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child = proc;
  return { proc, log };
}

/** Starts the fixture on its own stream with `graceSeconds`, appends one event, resolves once its handler runs. */
async function startHanging(name: string, graceSeconds: number): Promise<Started> {
  const { proc, log } = await spawnFixture(name, graceSeconds);
  const lines: Line[] = [];
  const waiters: { match: (l: Line) => boolean; resolve: (l: Line) => void }[] = [];
  let stderr = '';
  createInterface({ input: proc.stderr }).on('line', (text) => {
    stderr += `${text}\n`;
    let l: Line;
    try {
      l = JSON.parse(text) as Line;
    } catch {
      return;
    }
    lines.push(l);
    for (const w of [...waiters]) if (w.match(l)) w.resolve(l);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    proc.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })),
  );
  const line = (match: (l: Line) => boolean) =>
    new Promise<Line>((resolve, reject) => {
      const seen = lines.find(match);
      if (seen) return resolve(seen);
      waiters.push({ match, resolve });
      void exited.then(() => reject(new Error(`the fixture exited before the awaited line; stderr:\n${stderr}`)));
    });
  const ready = new Promise<void>((resolve, reject) => {
    createInterface({ input: proc.stdout }).on('line', (l) => /ready on http/.test(l) && resolve());
    void exited.then(() => reject(new Error(`the fixture exited before it was ready; stderr:\n${stderr}`)));
  });
  await ready;
  const runId = `run-${name}-${tag}`;
  await log.append(admittedEvent(runId), 0);
  await line((l) => l.msg === 'fixture handler started');
  await log.close();
  return { proc, lines, line, exited };
}

describe('SIGTERM while the NATS server is frozen (SIGSTOP) and a handler never finishes', () => {
  it('exits 1 within RUNPLANE_SHUTDOWN_GRACE_SECONDS, its last line the JSON error naming the stage and the handler in flight', async () => {
    const s = await startHanging('bound', 3);
    await server.freeze();
    const at = Date.now();
    s.proc.kill('SIGTERM');
    const { code, signal, at: exitedAt } = await s.exited;
    const ms = exitedAt - at;
    process.stdout.write(`SHUTDOWN | frozen NATS, handler in flight, grace 3 s: exited ${code} after ${ms} ms\n`);
    expect({ code, signal }).toEqual({ code: 1, signal: null });
    expect(ms).toBeGreaterThanOrEqual(2_900);
    expect(ms).toBeLessThan(3_000 + 5_000);
    expect(s.lines.at(-1)).toMatchObject({
      level: 50,
      service: 'projector',
      context: 'shutdown',
      msg: expect.stringMatching(/^shutdown bound passed/),
      stage: 'closing consumers',
      handlersInFlight: 1,
      handlers: [{ runId: `run-bound-${tag}`, eventType: 'run.admitted', seq: 1 }],
    });
  }, 60_000);

  it('a second signal exits at once (130 after SIGINT), naming what was left', async () => {
    const s = await startHanging('second', 60);
    await server.freeze();
    s.proc.kill('SIGTERM');
    await s.line((l) => l.context === 'shutdown' && /^stopping/.test(l.msg));
    const at = Date.now();
    s.proc.kill('SIGINT');
    const { code, signal, at: exitedAt } = await s.exited;
    process.stdout.write(`SHUTDOWN | second signal: exited ${code} after ${exitedAt - at} ms\n`);
    expect({ code, signal }).toEqual({ code: 130, signal: null });
    expect(exitedAt - at).toBeLessThan(5_000);
    expect(s.lines.at(-1)).toMatchObject({
      level: 50,
      context: 'shutdown',
      signal: 'SIGINT',
      firstSignal: 'SIGTERM',
      msg: expect.stringMatching(/^second signal: exiting at once/),
      handlers: [{ runId: `run-second-${tag}`, eventType: 'run.admitted', seq: 1 }],
    });
  }, 60_000);
});

describe('SIGTERM while a client holds a request open (a Content-Length and never the body)', () => {
  it('closes that connection after the HTTP grace and exits 0 well within the bound (it waited for the bound and exited 1)', async () => {
    // a bound of 6 s: the HTTP grace is then 2 s (a third of it; 5 s, HTTP_SHUTDOWN_GRACE_MS, under a bound of 15 s or more)
    const { proc, log } = await spawnFixture('http', 6);
    const exited = new Promise<{ code: number | null; at: number }>((resolve) => proc.once('exit', (code) => resolve({ code, at: Date.now() })));
    const url = await new Promise<URL>((resolve, reject) => {
      createInterface({ input: proc.stdout }).on('line', (l) => {
        const m = /ready on (http\S+)/.exec(l);
        if (m) resolve(new URL(m[1]!));
      });
      void exited.then(() => reject(new Error('the fixture exited before it was ready')));
    });
    await log.close();
    const socket = connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
    const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
    socket.on('error', () => undefined);
    socket.write(`POST /v1/anything HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a":1}`);
    const at = Date.now();
    proc.kill('SIGTERM');
    const { code, at: exitedAt } = await exited;
    const closedAt = await closed;
    process.stdout.write(
      `SHUTDOWN | a request held open, grace 6 s: connection closed after ${closedAt - at} ms, exited ${code} after ${exitedAt - at} ms\n`,
    );
    // 0: it did not wait for the bound (which exits 1)
    expect(code).toBe(0);
    expect(exitedAt - at).toBeLessThan(6_000);
    // the request had its HTTP grace before its connection was closed
    expect(closedAt - at).toBeGreaterThanOrEqual(1_900);
    expect(closedAt - at).toBeLessThan(6_000);
  }, 60_000);
});

describe('a drain the shutdown bound would cut', () => {
  it('stops start-up in one line naming both settings (tools, RUNPLANE_DRAIN_SECONDS 30 >= RUNPLANE_SHUTDOWN_GRACE_SECONDS 25)', async () => {
    const main = fileURLToPath(new URL('../../../apps/tools/dist/main.bundle.js', import.meta.url));
    const proc = spawn(process.execPath, [main], {
      env: { ...process.env, NATS_URL: server.url, TOOLS_PORT: '0', RUNPLANE_DRAIN_SECONDS: '30', RUNPLANE_SHUTDOWN_GRACE_SECONDS: '25' },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
    expect(code).toBe(1);
    expect(JSON.parse(stderr.trim().split('\n').at(-1)!)).toMatchObject({
      level: 60,
      service: 'tools',
      msg: 'tools failed to start: Invalid configuration: RUNPLANE_DRAIN_SECONDS (30) must be below RUNPLANE_SHUTDOWN_GRACE_SECONDS (25): the shutdown bound would cut the drain',
    });
  }, 60_000);
});
