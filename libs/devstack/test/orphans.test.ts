/**
 * A local stack's processes do not outlive the process that started them, however it dies: a
 * starter killed with SIGKILL (no exit handler runs) leaves neither its nats-server nor a service
 * running. Each started process has a guard that sees its starter go and sends SIGTERM, then
 * SIGKILL after 5 s to one that ignores it. Before, a killed `runplane up` left its nats-server on
 * the state folder's store, and the next `up` started a second server on the same store. A start on
 * a kept store also waits until the server of an earlier start has left it (the guard's stop takes
 * up to 5 s): never two servers on one store.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { randomBytes } from 'node:crypto';
import { repoRoot, startSecuredNats } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-orphans-'));
const tag = randomBytes(4).toString('hex');
/** What the starter started: killed here if the check failed and they still run. */
const started: number[] = [];
afterAll(() => {
  for (const pid of started.filter(running)) process.kill(pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `lines` (ES module text) as a starter process (`detached`: in a process group of its own); resolves with it and the JSON its first stdout line holds. */
async function starter(name: string, lines: string[], detached = false): Promise<{ child: ReturnType<typeof spawn>; said: Record<string, number> }> {
  const file = join(dir, `${name}.mjs`);
  writeFileSync(file, lines.join('\n'));
  const child = spawn(process.execPath, [file], { cwd: repoRoot(), stdio: ['ignore', 'pipe', 'inherit'], detached });
  if (child.pid) started.push(child.pid); // a check that failed before killing it leaves no starter behind
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the starter ${name} exited (${code}) before saying what it started`)));
  });
  return { child, said: JSON.parse(line) as Record<string, number> };
}

async function killStarter(child: ReturnType<typeof spawn>): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

/** Whether `pid` runs (a zombie waiting for its reaper has stopped running). */
function running(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

/** The `sh` guards `parent` started (its children running `sh`), each with its process group id (from /proc). */
function guardsOf(parent: number): { pid: number; pgrp: number }[] {
  const guards: { pid: number; pgrp: number }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // pid (comm) state ppid pgrp ...
    const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const [, ppid, pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (comm === 'sh' && Number(ppid) === parent) guards.push({ pid: Number(entry), pgrp: Number(pgrp) });
  }
  return guards;
}

async function goneWithin(pid: number, ms: number): Promise<number | null> {
  const at = Date.now();
  while (running(pid)) {
    if (Date.now() - at > ms) return null;
    await new Promise((r) => setTimeout(r, 50));
  }
  return Date.now() - at;
}

describe('a starter killed with SIGKILL', () => {
  it('takes its nats-server (SIGTERM) and a service that ignores SIGTERM (SIGKILL after the grace) with it', async () => {
    const stubborn = join(dir, 'stubborn.mjs');
    writeFileSync(stubborn, "process.on('SIGTERM', () => {}); console.log('ready on http://127.0.0.1:1'); setInterval(() => {}, 1000);\n");
    const devstack = join(repoRoot(), 'libs', 'devstack', 'dist', 'index.js');
    const { child, said: pids } = await starter('starter', [
      `import { createWriteStream } from 'node:fs';`,
      `import { spawnReady, startSecuredNats } from ${JSON.stringify(devstack)};`,
      `const nats = await startSecuredNats({ stateDir: ${JSON.stringify(join(dir, 'state'))}, space: { stream: 'RPTEST_ORPHAN_${tag}', prefix: 'torph${tag}', partitions: 1 } });`,
      `const service = await spawnReady('stubborn', ${JSON.stringify(stubborn)}, [], process.env, /ready on (\\S+)/, createWriteStream(${JSON.stringify(join(dir, 'stubborn.log'))}));`,
      `console.log(JSON.stringify({ nats: nats.child.pid, service: service.child.pid }));`,
      `setInterval(() => {}, 1000);`,
    ]);
    started.push(pids.nats!, pids.service!);
    expect(running(pids.nats!)).toBe(true);
    expect(running(pids.service!)).toBe(true);

    await killStarter(child);
    const natsGone = await goneWithin(pids.nats!, 15_000);
    const serviceGone = await goneWithin(pids.service!, 15_000);
    process.stdout.write(
      `ORPHANS | after the starter's SIGKILL: nats-server gone in ${natsGone} ms, a service ignoring SIGTERM in ${serviceGone} ms\n`,
    );
    expect(natsGone).not.toBeNull();
    expect(serviceGone).not.toBeNull();
    // SIGTERM came first: the one that ignores it lasted the grace out, then SIGKILL
    expect(serviceGone!).toBeGreaterThanOrEqual(4_000);
  }, 60_000);

  it('a new start on the same kept store waits until the old server has left it: never two servers on one store', async () => {
    const devstack = join(repoRoot(), 'libs', 'devstack', 'dist', 'index.js');
    const stateDir = join(dir, 'kept');
    const space = { stream: `RPTEST_KEPT_${tag}`, prefix: `tkept${tag}`, partitions: 1 };
    const { child, said } = await starter('kept', [
      `import { startSecuredNats } from ${JSON.stringify(devstack)};`,
      `const nats = await startSecuredNats({ stateDir: ${JSON.stringify(stateDir)}, space: ${JSON.stringify(space)} });`,
      `console.log(JSON.stringify({ nats: nats.child.pid }));`,
      `setInterval(() => {}, 1000);`,
    ]);
    const old = said.nats!;
    started.push(old);
    // the old server cannot act on its guard's SIGTERM (stopped): it holds the store until the SIGKILL 5 s later
    process.kill(old, 'SIGSTOP');
    await killStarter(child);
    const at = Date.now();
    const nats = await startSecuredNats({ stateDir, space });
    try {
      const waited = Date.now() - at;
      process.stdout.write(`ORPHANS | a start on the kept store waited ${waited} ms for the old server to leave it\n`);
      expect(running(old)).toBe(false);
      expect(nats.child?.pid).not.toBe(old);
      expect(waited).toBeGreaterThanOrEqual(4_000);
    } finally {
      await nats.stop();
    }
  }, 60_000);

  it("a Ctrl-C of the whole process group reaches the starter alone: a service gets one SIGTERM (stopEverything's), never the terminal's SIGINT", async () => {
    const devstack = join(repoRoot(), 'libs', 'devstack', 'dist', 'index.js');
    const signals = join(dir, 'signals.log');
    const service = join(dir, 'counting.mjs');
    // a service that writes down every signal it gets and exits 300 ms after a SIGTERM (a short drain)
    writeFileSync(
      service,
      [
        `import { appendFileSync } from 'node:fs';`,
        `for (const s of ['SIGINT', 'SIGTERM']) process.on(s, () => { appendFileSync(${JSON.stringify(signals)}, s + ' ' + Date.now() + '\\n'); if (s === 'SIGTERM') setTimeout(() => process.exit(0), 300); });`,
        `console.log('ready on http://127.0.0.1:1'); setInterval(() => {}, 1000);`,
      ].join('\n'),
    );
    const space = { stream: `RPTEST_INT_${tag}`, prefix: `tint${tag}`, partitions: 1 };
    const { child, said } = await starter(
      'interrupt',
      [
        `import { createWriteStream } from 'node:fs';`,
        `import { spawnReady, startSecuredNats, stopEverything } from ${JSON.stringify(devstack)};`,
        `const nats = await startSecuredNats({ stateDir: ${JSON.stringify(join(dir, 'int'))}, space: ${JSON.stringify(space)} });`,
        `const s = await spawnReady('counting', ${JSON.stringify(service)}, [], process.env, /ready on (\\S+)/, createWriteStream(${JSON.stringify(join(dir, 'counting.log'))}));`,
        `process.once('SIGINT', () => void stopEverything().then(() => process.exit(130)));`,
        `console.log(JSON.stringify({ nats: nats.child.pid, service: s.child.pid }));`,
        `setInterval(() => {}, 1000);`,
      ],
      true,
    );
    started.push(said.nats!, said.service!);
    const exited = new Promise((r) => child.once('exit', r));
    process.kill(-child.pid!, 'SIGINT'); // a Ctrl-C: the terminal's foreground process group
    await exited;
    const natsGone = await goneWithin(said.nats!, 15_000);
    expect(natsGone).not.toBeNull();
    const got = readFileSync(signals, 'utf8')
      .trim()
      .split('\n')
      .map((l) => l.split(' ')[0]);
    expect(got).toEqual(['SIGTERM']);
  }, 60_000);

  it('a hangup of the whole process group (a closed terminal) kills the starter, and its guards still stop its nats-server', async () => {
    const devstack = join(repoRoot(), 'libs', 'devstack', 'dist', 'index.js');
    const space = { stream: `RPTEST_HUP_${tag}`, prefix: `thup${tag}`, partitions: 1 };
    const { child, said } = await starter(
      'hangup',
      [
        `import { startSecuredNats } from ${JSON.stringify(devstack)};`,
        `const nats = await startSecuredNats({ stateDir: ${JSON.stringify(join(dir, 'hup'))}, space: ${JSON.stringify(space)} });`,
        `console.log(JSON.stringify({ nats: nats.child.pid }));`,
        `setInterval(() => {}, 1000);`,
      ],
      true,
    );
    started.push(said.nats!);
    // the nats-server's guard is outside the starter's process group: the hangup cannot reach it,
    // even before its shell has set its trap (in a CI run the guard died with the group and left
    // the nats-server running)
    const guards = guardsOf(child.pid!);
    expect(guards.length).toBeGreaterThan(0);
    expect(guards.filter((g) => g.pgrp === child.pid)).toEqual([]);
    const exited = new Promise((r) => child.once('exit', r));
    process.kill(-child.pid!, 'SIGHUP'); // the starter and its nats-server: one process group
    await exited;
    const gone = await goneWithin(said.nats!, 15_000);
    process.stdout.write(`ORPHANS | after a hangup of the group: nats-server gone in ${gone} ms\n`);
    expect(gone).not.toBeNull();
  }, 60_000);
});
