/**
 * `spawnReady`'s error when a process ends before its ready line: it names the process, its exit
 * code or signal, and the last lines it wrote, or says that it wrote nothing (a demo stopped by
 * Ctrl-C during start-up printed "publication exited (SIGTERM) before it was ready:" and nothing
 * after the colon). Real child processes, no stack.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import type { ChildProcess } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnReady } from '@runplane/devstack';

const dir = mkdtempSync(join(tmpdir(), 'rp-spawn-ready-'));
const log = createWriteStream(join(dir, 'services.log'));
afterAll(async () => {
  await new Promise<void>((r) => log.end(() => r()));
  rmSync(dir, { recursive: true, force: true });
});

/** A script file in the test's folder with `source` as its text. */
function script(name: string, source: string): string {
  const file = join(dir, name);
  writeFileSync(file, source);
  return file;
}

describe('a process that ends before its ready line', () => {
  it('given one that writes nothing, when it is stopped by SIGTERM, then the error says it wrote nothing', async () => {
    let child: ChildProcess | undefined;
    const silent = script('silent.mjs', 'setInterval(() => {}, 1000);\n');
    const starting = spawnReady('silent', silent, [], process.env, /ready on (\S+)/, log, 60_000, [], (c) => {
      child = c;
      // the start is stopped as Ctrl-C stops a demo's: SIGTERM before any line
      setImmediate(() => c.kill('SIGTERM'));
    });
    await expect(starting).rejects.toThrow(/^silent exited \(SIGTERM\) before it was ready \(it wrote nothing\)$/);
    expect(child?.signalCode).toBe('SIGTERM');
  });

  it('given one that logs JSON lines, one of them an error, then the error gives only the messages of the error lines', async () => {
    const logging = script(
      'logging.mjs',
      [
        `console.log(JSON.stringify({ level: 30, msg: 'Nest application successfully started' }));`,
        `console.error(JSON.stringify({ level: 60, msg: 'tools failed to start: listen EADDRINUSE: address already in use 127.0.0.1:8084' }));`,
        'process.exitCode = 1;',
      ].join('\n'),
    );
    await expect(spawnReady('tools', logging, [], process.env, /ready on (\S+)/, log)).rejects.toThrow(
      /^tools exited \(1\) before it was ready:\ntools failed to start: listen EADDRINUSE: address already in use 127\.0\.0\.1:8084$/,
    );
  });

  it('given one that writes a reason and exits 3, then the error ends with its lines', async () => {
    const failing = script('failing.mjs', "console.error('failing to start: no database');\nprocess.exitCode = 3;\n");
    await expect(spawnReady('failing', failing, [], process.env, /ready on (\S+)/, log)).rejects.toThrow(
      /^failing exited \(3\) before it was ready:\nfailing to start: no database$/,
    );
  });
});
