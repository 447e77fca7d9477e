/**
 * One stack per state folder: the demo and `up` keep a nats-server store, its TLS CA, the event
 * signing keys and the API's signing key under `.runplane/`; a second stack started from the same
 * checkout would rewrite them under the running one and open its store with a second
 * nats-server (a corrupt store). The first takes `stack.pid` there; the next is refused while that
 * process lives.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** Raised when another live process holds the state folder's stack lock. */
export class StackAlreadyRunning extends Error {
  constructor(
    readonly pid: number,
    readonly lockFile: string,
  ) {
    super(
      `another Runplane stack (process ${pid}) is running from this checkout and uses ${lockFile.replace(/\/stack\.pid$/, '')}: ` +
        `stop it first (Ctrl-C where it runs, or kill ${pid}); if no such process is a Runplane stack, remove ${lockFile}`,
    );
    this.name = 'StackAlreadyRunning';
  }
}

/** Whether a process of that id lives (and may be signalled by us: EPERM is alive too). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes `stateDir`/stack.pid for this process: created exclusively; a file left by a process
 * that is gone (killed) is taken over.
 * @returns release(): removes the file if it is still this process's (also run at exit).
 * @throws StackAlreadyRunning when a live other process holds it.
 */
export function lockStateDir(stateDir: string): () => void {
  const file = join(stateDir, 'stack.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      const release = () => {
        try {
          if (Number(readFileSync(file, 'utf8').trim()) === process.pid) rmSync(file, { force: true });
        } catch {
          // gone already
        }
      };
      process.once('exit', release);
      return release;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let holder = NaN;
      try {
        holder = Number(readFileSync(file, 'utf8').trim());
      } catch {
        // removed meanwhile: try again
      }
      if (Number.isInteger(holder) && holder > 0 && holder !== process.pid && alive(holder)) throw new StackAlreadyRunning(holder, file);
      rmSync(file, { force: true }); // left by a process that is gone (or unreadable): taken over
    }
  }
  throw new Error(`could not take ${file}: another stack is starting from this checkout at the same moment`);
}
