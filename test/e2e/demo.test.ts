/**
 * `npm run demo` as a newcomer runs it (`node apps/cli/dist/main.js demo`, what the npm script
 * runs after the build): its own nats-server, a projection database of its own, every service as
 * a process. It reads as an answer (docs/cli.md "What `ask` and the demo print"): the Run's
 * protocol lines first, then the answer's passages together with no protocol line between them,
 * then the settlement; `--no-events` leaves the protocol lines out. It exits like `runplane ask`
 * (docs/cli.md "Exit codes"): 3 for a `partial` settlement, 0 for `completed`.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { execFile, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { dropDatabase, projectionDatabaseFor, repoRoot } from '@runplane/devstack';

const tag = `rp_demo_${process.pid}_${Date.now().toString(36)}`;
/** The PostgreSQL the demo is pointed at: a name of this test's own, so its projection database is too. */
const base = `postgresql://postgres@127.0.0.1:5432/${tag}`;

afterAll(async () => {
  // the demo makes <name>_devnats_<hash of .runplane> for the nats-server it starts (devstack)
  const projections = projectionDatabaseFor(
    base,
    { child: {}, cluster: undefined } as unknown as Parameters<typeof projectionDatabaseFor>[1],
    join(repoRoot(), '.runplane'),
  );
  await dropDatabase(projections);
});

/** Runs the demo to its end; resolves with its exit code and output. */
function demo(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [join(repoRoot(), 'apps/cli/dist/main.js'), 'demo', ...args],
      { env: { ...process.env, DATABASE_URL: base }, encoding: 'utf8', timeout: 240_000, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => resolve({ code: error ? Number((error as { code?: unknown }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** The lines of the demo's output from the `Answer:` heading to the settlement, and the lines before. */
function parts(stdout: string) {
  const lines = stdout.split('\n');
  const answerAt = lines.findIndex((l) => l === 'Answer:');
  const settlementAt = lines.findIndex((l) => l.startsWith('Settlement (by lifecycle): '));
  return { before: lines.slice(0, answerAt), answer: lines.slice(answerAt + 1, settlementAt), answerAt, settlementAt, lines };
}
const PROTOCOL = /^ {2}#\d+ \[[a-z]+\] /;

describe('the demo', () => {
  it('a question it can answer only in part: the events, then the answer in one piece, then PARTIAL; exit 3, as ask', async () => {
    const r = await demo(['What are the holdings of XYZQ?']);
    process.stdout.write(`demo (partial): exit ${r.code}\n${r.stdout}${r.stderr.slice(-2000)}\n`);
    const { before, answer, answerAt, settlementAt, lines } = parts(r.stdout);
    expect(answerAt).toBeGreaterThan(0);
    expect(settlementAt).toBeGreaterThan(answerAt);
    // the protocol lines come before the answer, none between its passages
    expect(before.filter((l) => PROTOCOL.test(l)).length).toBeGreaterThan(3);
    expect(before.some((l) => /\[publication\] passage 1 of turn \d+ committed/.test(l))).toBe(true);
    expect(answer.filter((l) => PROTOCOL.test(l))).toEqual([]);
    expect(answer.join('\n')).toMatch(/XYZQ[^.]*not covered/);
    expect(lines[settlementAt]).toMatch(/^Settlement \(by lifecycle\): PARTIAL: /);
    expect(r.stdout).toMatch(/ {2}unanswered: .*XYZQ/);
    expect(r.stdout).toContain('All services stopped.');
    expect(r.code).toBe(3);
  }, 300_000);

  it('--no-events: only the question, the answer and the settlement; a completed Run exits 0', async () => {
    const r = await demo(['--no-events', 'Compare the holdings of SPY and QQQ']);
    process.stdout.write(`demo --no-events: exit ${r.code}\n${r.stdout}${r.stderr.slice(-2000)}\n`);
    const { answer, answerAt, settlementAt, lines } = parts(r.stdout);
    expect(lines.filter((l) => PROTOCOL.test(l))).toEqual([]);
    expect(answerAt).toBeGreaterThan(0);
    expect(answer.filter((l) => l.trim() !== '').length).toBeGreaterThanOrEqual(2);
    expect(lines[settlementAt]).toMatch(/^Settlement \(by lifecycle\): COMPLETED: /);
    expect(r.code).toBe(0);
  }, 300_000);

  it('Ctrl-C during its start-up: the stopping line, then only "Stopped.", no start-up line after it; exit 130', async () => {
    const child = spawn(process.execPath, [join(repoRoot(), 'apps/cli/dist/main.js'), 'demo', '--no-events'], {
      env: { ...process.env, DATABASE_URL: base },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const lines: string[] = [];
    const errors: string[] = [];
    // interrupted as soon as its nats-server is up: the database and data lines are still to come
    createInterface({ input: child.stdout }).on('line', (l) => {
      lines.push(l);
      if (l.startsWith('  bus:')) child.kill('SIGINT');
    });
    createInterface({ input: child.stderr }).on('line', (l) => errors.push(l));
    const code = await new Promise<number | null>((r) => child.once('close', (c) => r(c)));
    process.stdout.write(`demo interrupted: exit ${code}\n${lines.join('\n')}\n${errors.join('\n')}\n`);
    const stopAt = lines.indexOf('SIGINT: stopping every process this command started...');
    expect(stopAt).toBeGreaterThan(0);
    expect(lines.slice(stopAt + 1)).toEqual(['Stopped.']);
    expect(code).toBe(130);
  }, 120_000);
});
