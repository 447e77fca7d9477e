/**
 * One stack per state folder: the demo and `up` keep a nats-server store, its TLS CA, the event
 * signing keys and the API's signing key under `.runplane/`; a second stack started from the same
 * checkout would rewrite them under the running one and open its store with a second
 * nats-server (a corrupt store). The first takes `stack.pid` there; the next is refused while that
 * process lives.
 */
import { randomBytes } from 'node:crypto';
import { linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

/** Whether a process of that id lives (and may be signalled by us: EPERM is alive too). Signal 0: nothing is sent. */
export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** What a lock file names: its holder's pid, `null` when the content is not a pid, `'gone'` when there is no file. */
function holderIn(file: string): number | null | 'gone' {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'gone';
    return null;
  }
  const pid = Number(text.trim());
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

/**
 * Creates `file` holding this process's pid, or returns false when it exists. The text is written
 * to a file of this process's own first and linked to `file` (link(2) fails on an existing name),
 * so no process ever reads the lock empty or half written: a second starter read a file just
 * created, still empty, took it for one left by a dead process and removed it.
 */
function placeExclusively(file: string): boolean {
  const own = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
  writeFileSync(own, `${process.pid}\n`);
  try {
    linkSync(own, file);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw e;
  } finally {
    rmSync(own, { force: true });
  }
}

/** Blocks this thread for `ms` (the lock is taken synchronously, before anything starts). */
function pause(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * Takes `stateDir`/stack.pid for this process: created exclusively, with its content at once. A
 * file left by a process that is gone (killed), or holding no pid, is taken over by one starter at a
 * time: the one that creates `stack.pid.takeover` (exclusively too) removes the stale file if it is
 * still the one it judged, then competes for the lock like any starter. Two starters at the same
 * moment, with or without a stale file, never both hold the lock (checked 1 in 60 before).
 * @returns release(): removes the file if it is still this process's (also run at exit).
 * @throws StackAlreadyRunning when a live other process holds it.
 */
export function lockStateDir(stateDir: string): () => void {
  const file = join(stateDir, 'stack.pid');
  const takeover = `${file}.takeover`;
  for (let attempt = 0; attempt < 100; attempt++) {
    if (placeExclusively(file)) {
      const release = () => {
        if (holderIn(file) === process.pid) rmSync(file, { force: true });
      };
      process.once('exit', release);
      return release;
    }
    const holder = holderIn(file);
    if (holder === 'gone') continue; // released or taken over meanwhile: try again
    if (holder !== null && holder !== process.pid && processAlive(holder)) throw new StackAlreadyRunning(holder, file);
    // stale: one taker at a time
    if (!placeExclusively(takeover)) {
      const taker = holderIn(takeover);
      if (taker === 'gone') continue;
      if (taker !== null && taker !== process.pid && processAlive(taker))
        pause(10); // another starter is taking it over
      else rmSync(takeover, { force: true }); // a taker that died in the middle
      continue;
    }
    try {
      // nobody else replaces the file while this process holds the takeover (a new lock is only ever linked, never written over)
      if (holderIn(file) === holder) rmSync(file, { force: true });
    } finally {
      rmSync(takeover, { force: true });
    }
  }
  throw new Error(`could not take ${file}: other stacks are starting from this checkout at the same moment`);
}
