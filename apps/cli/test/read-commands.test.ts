/**
 * The read commands `runplane up` prints run as printed (every variable they need on the line,
 * values quoted for the shell), and a read refused by the broker's permissions names the server,
 * the user and the credentials it needs (the ops user).
 */
import { describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { askHint, readCommands, shellWord, withReadCredentials } from '@runplane/app-cli';

const env = {
  NATS_URL: 'nats://127.0.0.1:4222',
  NATS_USER: 'runplane-ops',
  NATS_PASSWORD: "pa ss'word$x",
  DATABASE_URL: 'postgresql://postgres:secret@127.0.0.1:5432/runplane_own?sslmode=disable&x=1',
  RUNPLANE_STREAM: 'RUNPLANE',
  RUNPLANE_SUBJECT_PREFIX: 'rp',
};

/**
 * The variables a printed line sets, as a shell sees them with nothing else in its environment, or
 * with what `shell` exports (a user's own settings in the terminal the line is pasted into).
 */
function variablesOf(line: string, shell: Record<string, string> = {}): Record<string, string> {
  const r = spawnSync('bash', ['-c', `${line.replace(/ npm run runplane -- .*$/, '')} env`], { env: shell, encoding: 'utf8' });
  expect(r.status).toBe(0);
  return Object.fromEntries(
    r.stdout
      .split('\n')
      .filter((l) => /^(NATS_|DATABASE_URL|RUNPLANE_)/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

describe('the read commands `runplane up` prints', () => {
  it('each sets what its command needs, exactly as given: the rebuild the DATABASE_URL too', () => {
    const c = readCommands(env);
    const nats = {
      NATS_URL: env.NATS_URL,
      NATS_USER: env.NATS_USER,
      NATS_PASSWORD: env.NATS_PASSWORD,
      RUNPLANE_STREAM: env.RUNPLANE_STREAM,
      RUNPLANE_SUBJECT_PREFIX: env.RUNPLANE_SUBJECT_PREFIX,
    };
    expect(variablesOf(c.timeline)).toEqual(nats);
    expect(variablesOf(c.audit)).toEqual({ ...nats, DATABASE_URL: env.DATABASE_URL });
    expect(variablesOf(c.rebuild)).toEqual({ ...nats, DATABASE_URL: env.DATABASE_URL });
    expect(c.timeline).toMatch(/ npm run runplane -- timeline <runId>$/);
    expect(c.audit).toMatch(/ npm run runplane -- audit --all$/);
    expect(c.rebuild).toMatch(/ npm run runplane -- projections rebuild$/);
  });
  it('names the stream and prefix, the defaults too', () => {
    const c = readCommands({ ...env, RUNPLANE_STREAM: 'OTHER', RUNPLANE_SUBJECT_PREFIX: 'ot' });
    expect(variablesOf(c.audit)).toMatchObject({ RUNPLANE_STREAM: 'OTHER', RUNPLANE_SUBJECT_PREFIX: 'ot' });
  });
  it('names the partition count, the default 8 too (a read with another count warns that it differs from the stream)', () => {
    expect(variablesOf(readCommands({ ...env, RUNPLANE_PARTITIONS: '8' }).timeline)).toMatchObject({ RUNPLANE_PARTITIONS: '8' });
    expect(variablesOf(readCommands({ ...env, RUNPLANE_PARTITIONS: '2' }).timeline)).toMatchObject({ RUNPLANE_PARTITIONS: '2' });
  });
  it('given a shell that exports other stream settings, when a line is pasted into it, then the values of the stack are used', () => {
    const shell = { RUNPLANE_PARTITIONS: '2', RUNPLANE_STREAM: 'MINE', RUNPLANE_SUBJECT_PREFIX: 'me' };
    expect(variablesOf(readCommands({ ...env, RUNPLANE_PARTITIONS: '8' }).audit, shell)).toMatchObject({
      RUNPLANE_PARTITIONS: '8',
      RUNPLANE_STREAM: 'RUNPLANE',
      RUNPLANE_SUBJECT_PREFIX: 'rp',
    });
  });
  it('quotes only what the shell would split or expand', () => {
    expect(shellWord('nats://127.0.0.1:4222')).toBe('nats://127.0.0.1:4222');
    expect(shellWord("it's $HOME")).toBe(`'it'\\''s $HOME'`);
  });
});

describe('a read refused by the broker', () => {
  const bus = { NATS_URL: 'nats://10.0.0.9:4222', NATS_USER: 'downstream-1', RUNPLANE_STREAM: 'RUNPLANE' };
  it('says which server refused whom, and that the ops user is needed', async () => {
    const refused = withReadCredentials('audit', bus, () =>
      Promise.reject(new Error('Permissions Violation for Publish to "$JS.API.CONSUMER.CREATE.RUNPLANE"')),
    );
    await expect(refused).rejects.toThrow(
      /^audit: NATS at nats:\/\/10\.0\.0\.9:4222 refused user downstream-1 a read of stream RUNPLANE \(Permissions Violation.*\)\. audit reads with the ops user's credentials: NATS_USER=runplane-ops .*RUNPLANE_NATS_PASSWORD_OPS/,
    );
  });
  it('passes any other error through unchanged', async () => {
    const other = new Error('cannot connect to NATS at nats://10.0.0.9:4222');
    await expect(withReadCredentials('timeline', bus, () => Promise.reject(other))).rejects.toBe(other);
    await expect(withReadCredentials('timeline', bus, () => Promise.resolve(7))).resolves.toBe(7);
  });
});

describe('the ask line `runplane up` prints last', () => {
  it("names the stack's admission and publication, so a terminal's own defaults cannot send it to another stack", () => {
    expect(askHint({ admission: 'http://127.0.0.1:18081', publication: 'http://127.0.0.1:18082' })).toBe(
      'npm run runplane -- ask --admission http://127.0.0.1:18081 --publication http://127.0.0.1:18082 "Compare the holdings of SPY and QQQ"',
    );
  });
});
