/**
 * `runplane audit` says which NATS it reads, and does not pass an unrelated server off as a clean
 * log (K11): its text report names the stream and the NATS URL it reads (and whether `NATS_URL`
 * set it) before anything else; a server without the Run stream fails with exit 1 naming the URL and the
 * settings (`NATS_URL`, what `runplane up` prints), never a stack trace; a stream with no Run
 * fails `--all` the same way instead of "0 clean". The built CLI against the suite's nats-server.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { repoRoot } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';
import { SHARED_NATS_URL } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
let nc: NatsConnection;
let jsm: JetStreamManager;
const created: string[] = [];

beforeAll(async () => {
  nc = await connect({ servers: SHARED_NATS_URL });
  jsm = await jetstreamManager(nc);
});
afterAll(async () => {
  for (const s of created) await jsm.streams.delete(s).catch(() => undefined);
  await nc?.close();
});

/** The built CLI with `env` over this process's environment, `unset` removed (no NATS user: the suite's server has none). */
function cli(args: string[], env: Record<string, string>, unset: string[] = []) {
  const base: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', ...env };
  for (const name of ['NATS_USER', 'NATS_PASSWORD', ...unset]) delete base[name];
  return spawnSync(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), ...args], { env: base, encoding: 'utf8', timeout: 60_000 });
}

describe('runplane audit names the NATS it reads', () => {
  it('given a server without the Run stream, when audit --all runs, then it exits 1 naming the URL, the stream and the settings, with no stack trace', () => {
    const stream = `RPT_AUDIT_NONE_${tag}`;
    const run = cli(['audit', '--all'], { NATS_URL: SHARED_NATS_URL, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: `tan${tag}` });
    expect(run.status).toBe(1);
    expect(run.stdout.split('\n')[0]).toBe(`reading stream ${stream} on NATS at ${SHARED_NATS_URL} (from NATS_URL)`);
    expect(run.stderr).toContain(`stream ${stream} does not exist on NATS at ${SHARED_NATS_URL} (from NATS_URL); nothing was audited`);
    expect(run.stderr).toMatch(/set NATS_URL .*`runplane up` prints them/);
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(run.stdout).not.toMatch(/audited \d|clean/);
  });

  it('given NATS_URL unset, when audit runs, then its first line says it reads the default URL because NATS_URL is not set', () => {
    const run = cli(['audit', '--all'], { RUNPLANE_STREAM: `RPT_AUDIT_DEFAULT_${tag}` }, ['NATS_URL']);
    expect(run.stdout.split('\n')[0]).toBe(
      `reading stream RPT_AUDIT_DEFAULT_${tag} on NATS at nats://127.0.0.1:4222 (NATS_URL is not set: the default)`,
    );
    expect(run.stderr).not.toMatch(/\n\s+at /);
  });

  it('given a Run stream with no Run, when audit --all runs, then it exits 1 saying nothing was audited (not "0 clean"); with --since an empty window is an honest 0', async () => {
    const stream = `RPT_AUDIT_EMPTY_${tag}`;
    const prefix = `tae${tag}`;
    const log = await EventLog.connect({ natsUrl: SHARED_NATS_URL, stream, prefix });
    created.push(stream);
    await log.close();
    const env = { NATS_URL: SHARED_NATS_URL, RUNPLANE_STREAM: stream, RUNPLANE_SUBJECT_PREFIX: prefix };
    const all = cli(['audit', '--all'], env);
    expect(all.status).toBe(1);
    expect(all.stderr).toContain(`stream ${stream} on NATS at ${SHARED_NATS_URL} (from NATS_URL) holds no Run; nothing was audited`);
    expect(all.stdout).not.toMatch(/clean/);
    const since = cli(['audit', '--all', '--since', '2026-01-01T00:00:00Z'], env);
    expect(since.status).toBe(0);
    expect(since.stdout).toContain('audited 0 run(s)');
  });
});
