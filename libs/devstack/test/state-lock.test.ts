/**
 * One stack per state folder (`lockStateDir`): the demo and `up` take `.runplane/stack.pid`; a
 * second stack from the same checkout is refused while the first lives (it would rewrite the
 * keys and open the running store with a second nats-server); a lock left by a killed process is
 * taken over; starters racing for it at the same moment never both hold it.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from '@jest/globals';
import { repoRoot } from '../src/index.js';
import { lockStateDir, StackAlreadyRunning } from '../src/state-lock.js';

const dirs: string[] = [];
const stateDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'rp-lock-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('lockStateDir', () => {
  it('given a free state folder, when a stack starts, then it holds stack.pid with its pid, and release removes it', () => {
    const dir = stateDir();
    const release = lockStateDir(dir);
    expect(readFileSync(join(dir, 'stack.pid'), 'utf8').trim()).toBe(String(process.pid));
    release();
    expect(existsSync(join(dir, 'stack.pid'))).toBe(false);
  });

  it('given a stack running (a live process holds the lock), when another starts, then it is refused naming that process, and the lock is left alone', async () => {
    const dir = stateDir();
    const running = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
    try {
      writeFileSync(join(dir, 'stack.pid'), `${running.pid}\n`);
      let refused: unknown;
      try {
        lockStateDir(dir);
      } catch (e) {
        refused = e;
      }
      expect(refused).toBeInstanceOf(StackAlreadyRunning);
      expect((refused as StackAlreadyRunning).pid).toBe(running.pid);
      expect((refused as Error).message).toContain(`another Runplane stack (process ${running.pid}) is running`);
      expect(readFileSync(join(dir, 'stack.pid'), 'utf8').trim()).toBe(String(running.pid));
    } finally {
      running.kill('SIGKILL');
      await once(running, 'exit');
    }
  });

  it('given a lock left by a stack that was killed, when a stack starts, then it takes the lock over', async () => {
    const dir = stateDir();
    const gone = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
    await once(gone, 'exit');
    writeFileSync(join(dir, 'stack.pid'), `${gone.pid}\n`);
    const release = lockStateDir(dir);
    expect(readFileSync(join(dir, 'stack.pid'), 'utf8').trim()).toBe(String(process.pid));
    release();
  });

  it('given starters racing at the same moment, with or without a stale lock, then exactly one holds it each time', async () => {
    const script = join(stateDir(), 'starter.mjs');
    const lock = join(repoRoot(), 'libs', 'devstack', 'dist', 'state-lock.js');
    // five starter processes race for a fresh folder each round (a process start costs about
    // 50 ms of CPU: five for the ten rounds, not fifty)
    writeFileSync(
      script,
      [
        `import { readSync } from 'node:fs';`,
        `import { lockStateDir } from ${JSON.stringify(lock)};`,
        `const dirs = process.argv.slice(2);`,
        `const go = Buffer.alloc(1);`,
        `console.log('ready');`,
        `for (const dir of dirs) {`,
        // blocked in a read of stdin (no CPU spent waiting) until the test writes a byte to every starter at once
        `  readSync(0, go, 0, 1, null);`,
        `  try { lockStateDir(dir); console.log('held'); } catch (e) { console.log(e.name === 'StackAlreadyRunning' ? 'refused' : 'error ' + e.message); }`,
        `}`,
        `setTimeout(() => process.exit(0), 300);`,
      ].join('\n'),
    );
    const gone = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore' });
    await once(gone, 'exit');
    const rounds = Array.from({ length: 10 }, (_, round) => {
      const dir = stateDir();
      if (round % 2 === 0) writeFileSync(join(dir, 'stack.pid'), `${gone.pid}\n`); // left by a killed stack
      return dir;
    });
    const starters = Array.from({ length: 5 }, () => spawn(process.execPath, [script, ...rounds], { stdio: ['pipe', 'pipe', 'inherit'] }));
    const lines = starters.map((c) => {
      const said: string[] = [];
      createInterface({ input: c.stdout }).on('line', (l) => said.push(l));
      return said;
    });
    const said = async (n: number) => {
      while (!lines.every((l) => l.length >= n)) await new Promise((r) => setTimeout(r, 10));
    };
    await said(1); // every starter ready
    const results: string[][] = [];
    for (let round = 0; round < rounds.length; round++) {
      for (const c of starters) c.stdin.write('g');
      await said(round + 2);
      results.push(lines.map((l) => l[round + 1]!));
    }
    for (const c of starters) c.stdin.end();
    await Promise.all(starters.map((c) => once(c, 'exit')));
    process.stdout.write(`STATE-LOCK | racing starters, per round: ${results.map((r) => r.filter((x) => x === 'held').length).join(' ')}\n`);
    for (const round of results) {
      expect(round.filter((x) => x === 'held')).toHaveLength(1);
      expect(round.filter((x) => x !== 'held' && x !== 'refused')).toEqual([]);
    }
  }, 60_000);
});
