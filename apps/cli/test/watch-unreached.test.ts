/**
 * `runplane watch` against an address where no publication runs: it tries 3 times, then fails
 * naming the address, exit 1, in seconds (a trial saw 30 "observer connection lost ... resuming"
 * lines over 2 min 18 s first). A stream that did open is still resumed for minutes (docs/cli.md).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from '@jest/globals';

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));

/** A loopback port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as { port: number };
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

describe('runplane watch with no publication at the address', () => {
  it('given nothing listening there, then it fails naming the address after 3 tries, exit 1, with no resume lines', async () => {
    const publication = `http://127.0.0.1:${await closedPort()}`;
    const child = spawn(process.execPath, [CLI, 'watch', randomUUID(), '--publication', publication], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    expect(stderr).toContain(`runplane: cannot reach publication at ${publication}/v1/runs/`);
    expect(stderr.match(/trying again, attempt \d of 3/g)).toEqual(['trying again, attempt 2 of 3', 'trying again, attempt 3 of 3']);
    expect(stderr).not.toContain('resuming after');
  }, 60_000);
});
