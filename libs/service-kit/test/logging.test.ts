/**
 * Structured logs of a service started by the shared bootstrap: JSON lines on stderr, the
 * consumer's and the handlers' lines carrying `runId`, `eventType` and `seq` as fields, a
 * request's `Authorization` and `Cookie` redacted, and a SIGTERM that exits 0 without logging an error.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { admittedEvent } from '../../../test/support/events.js';
import { EventLog, partitionOf } from '@runplane/eventlog';
import { currentNatsServerBinary, SUITE_NATS, TestNatsServer } from '../../../test/support/nats-server.js';

// partition consumers need the current server (multi-filter 2.10, pinned priority groups 2.11)
const current = currentNatsServerBinary();
let server: TestNatsServer;
let natsUrl: string;
const tag = randomBytes(4).toString('hex');
const stream = `RPTEST_LOG_${tag}`;
const prefix = `tlg${tag}`;
const fixture = fileURLToPath(new URL('./fixtures/logging-service.mjs', import.meta.url));
let log: EventLog;
let child: ChildProcess | undefined;

beforeAll(async () => {
  server = await TestNatsServer.start({ bin: current.bin });
  natsUrl = server.url;
  log = await EventLog.connect({ ...SUITE_NATS, natsUrl, stream, prefix });
});
afterAll(async () => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await log.destroyStream();
  await log.close();
  await server.cleanup();
});

type Line = Record<string, unknown> & { level: number; msg: string };

describe('service logs (LOG_FORMAT json)', () => {
  it('writes JSON lines with runId, eventType and seq as fields, and exits 0 on SIGTERM without errors', async () => {
    child = spawn(process.execPath, [fixture], {
      env: { ...process.env, NODE_OPTIONS: '', NATS_URL: natsUrl, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: prefix, FIXTURE_PORT: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    const proc = child;
    proc.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
      proc.on('exit', (code, signal) => resolve({ code, signal })),
    );
    const lines = () =>
      stderr
        .split('\n')
        .filter((l) => l.trim() !== '')
        .map((l) => JSON.parse(l) as Line);
    // a minute: the suite runs this beside loaded-liveness's CPU hogs (load 25 on 2 cores), where a
    // Nest process took more than 20 s to print its first line (CI, 2026-12-01)
    const waitFor = async (what: string, found: () => boolean) => {
      for (const deadline = Date.now() + 60_000; !found();) {
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; stdout=${stdout} stderr=${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    };

    await waitFor('the ready line', () => /ready on http/.test(stdout));
    // a request's credentials never reach the log: its bearer token (replayable until it expires) and cookies
    const url = /ready on (http\S+)/.exec(stdout)![1]!;
    await fetch(`${url}/no-such-route`, { headers: { authorization: 'Bearer secret-token-of-a-caller', cookie: 'session=secret-cookie' } });
    await waitFor('the request line', () => lines().some((l) => (l.req as { url?: string } | undefined)?.url === '/no-such-route'));
    const request = lines().find((l) => (l.req as { url?: string } | undefined)?.url === '/no-such-route')!;
    expect((request.req as { headers: Record<string, string> }).headers).toMatchObject({ authorization: '[redacted]', cookie: '[redacted]' });
    expect(stderr).not.toContain('secret-');
    const runId = `run-${tag}`;
    const { seq } = await log.append(admittedEvent(runId), 0);
    await waitFor('the handler line', () => stderr.includes('fixture handled an event'));
    const fields = { runId, eventType: 'run.admitted', seq };
    expect(lines().find((l) => l.msg === 'handler failed; redelivering')).toMatchObject({
      level: 50,
      service: 'projector',
      durable: `${prefix}-projector-p${partitionOf(runId, log.space.partitions)}`,
      delivery: 1,
      ...fields,
    });
    // the handler's own error reaches the consumer (not Nest's "Internal server error")
    expect(JSON.stringify(lines().find((l) => l.msg === 'handler failed; redelivering'))).toContain('first delivery fails on purpose');
    expect(lines().find((l) => l.msg === 'fixture handled an event')).toMatchObject({ level: 40, context: 'fixture', note: 'handled', ...fields });
    expect(stdout.trim().split('\n')).toHaveLength(1);

    const before = lines().length;
    proc.kill('SIGTERM');
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(
      lines()
        .slice(before)
        .filter((l) => l.level >= 50),
    ).toEqual([]);
  });
});

describe('a service that fails to start', () => {
  it('prints nothing on stdout, only JSON lines on stderr shaped as the running service logs them (no colours, no [Nest] banner), the last one naming why; exit 1', async () => {
    const main = fileURLToPath(new URL('../../../apps/admission/dist/main.bundle.js', import.meta.url));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      NATS_URL: natsUrl,
      RUNPLANE_STREAM: `${stream}_FAIL`,
      RUNPLANE_SUBJECT_PREFIX: `${prefix}f`,
      ADMISSION_PORT: '0',
    };
    delete env.RUNPLANE_AUTH_DISABLED; // secure by default: no JWKS, no start
    const proc = spawn(process.execPath, [main], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr.includes('\u001b[')).toBe(false); // no ANSI colours
    expect(stderr).not.toContain('[Nest]');
    // every line one JSON object as pino writes a running service's: a log pipeline parses them all
    const lines = stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { level: unknown; time: unknown; service: unknown; pid: unknown; msg: unknown });
    for (const l of lines)
      expect(l).toMatchObject({ level: expect.any(Number), time: expect.any(Number), service: 'admission', msg: expect.any(String) });
    expect(lines.at(-1)).toMatchObject({
      level: 60,
      msg: expect.stringMatching(
        /^admission failed to start: authentication is not configured: set RUNPLANE_AUTH_JWKS_URL or RUNPLANE_AUTH_JWKS_FILE/,
      ),
    });
  }, 60_000);

  /** Runs a service's bundle (what a deployment runs) with `env` until it exits; its exit code and the `msg` of its last stderr line (a fatal JSON line). */
  async function failedStart(service: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; last: string | undefined; stderr: string }> {
    const main = fileURLToPath(new URL(`../../../apps/${service}/dist/main.bundle.js`, import.meta.url));
    const proc = spawn(process.execPath, [main], {
      env: { ...process.env, RUNPLANE_AUTH_DISABLED: 'true', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
    const last = JSON.parse(stderr.trim().split('\n').at(-1)!) as { level: number; service: string; msg: string };
    expect(last).toMatchObject({ level: 60, service });
    return { code, last: last.msg, stderr };
  }

  it('given an invalid setting, then the one line is JSON too and names the setting (it was the only line, and plain text)', async () => {
    const { code, last } = await failedStart('admission', { RUNPLANE_QUOTA_RUNS_PER_HOUR: 'lots', ADMISSION_PORT: '0' });
    expect(code).toBe(1);
    expect(last).toMatch(/^admission failed to start: Invalid configuration: RUNPLANE_QUOTA_RUNS_PER_HOUR: /);
  }, 60_000);

  it('given NATS unreachable, then the last line names the NATS server it could not reach', async () => {
    const { code, last, stderr } = await failedStart('admission', { NATS_URL: 'nats://127.0.0.1:1', ADMISSION_PORT: '0' });
    expect(code).toBe(1);
    // as the suite's user (NATS_USER of process.env): the line names the user too
    expect(last).toBe(`admission failed to start: cannot connect to NATS at nats://127.0.0.1:1 as ${SUITE_NATS.user}: connection refused`);
    // once, on that fatal line with its stack: Nest's own report of the same error is not printed as well
    const naming = stderr
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { level: number; msg: string; err?: { stack?: string } })
      .filter((l) => l.msg.includes('cannot connect to NATS'));
    expect(naming).toHaveLength(1);
    expect(naming[0]!.err?.stack).toContain('cannot connect to NATS');
  }, 60_000);

  it('given PostgreSQL unreachable, then the projector names the database (password redacted) it could not use', async () => {
    const { code, last } = await failedStart('projector', {
      NATS_URL: natsUrl,
      RUNPLANE_STREAM: `${stream}_PG`,
      RUNPLANE_SUBJECT_PREFIX: `${prefix}p`,
      PROJECTOR_PORT: '0',
      DATABASE_URL: 'postgres://nobody:secret@127.0.0.1:1/rp_unreachable',
    });
    expect(code).toBe(1);
    expect(last).toMatch(
      /^projector failed to start: cannot connect to (or migrate the projection database|PostgreSQL) at postgres:\/\/nobody:\*\*\*@127\.0\.0\.1:1\/rp_unreachable: .*ECONNREFUSED/,
    );
    expect(last).not.toContain('secret');
  }, 60_000);
});
