/**
 * One stack per state folder (`lockStateDir`): the demo and `up` take `.runplane/stack.pid`; a
 * second stack from the same checkout is refused while the first lives (it would rewrite the
 * keys and open the running store with a second nats-server); a lock left by a killed process is
 * taken over.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from '@jest/globals';
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
});
