/**
 * `runplane watch` refused with `Retry-After` (503 `observer_capacity`: the publication process
 * holds its most event streams) tries again no sooner than the server asked, saying so; a 429
 * `observer_limit` after it ends the command with the reason, exit 1. Against a loopback HTTP
 * server that answers as publication's refusals do (apps/publication observers.controller.ts).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from '@jest/globals';
import { retryAfterSecondsOf } from '@runplane/client';

/** The built CLI (apps/cli/dist/main.js). */
const CLI = fileURLToPath(new URL('../dist/main.js', import.meta.url));

let server: Server | undefined;
afterAll(async () => {
  if (server) await new Promise<void>((r) => server!.close(() => r()));
});

describe('Retry-After', () => {
  it('is read as delta-seconds or an HTTP date, and nothing else', () => {
    const now = Date.parse('2026-12-07T12:00:00Z');
    expect(retryAfterSecondsOf('5', now)).toBe(5);
    expect(retryAfterSecondsOf(' 0 ', now)).toBe(0);
    expect(retryAfterSecondsOf('Mon, 07 Dec 2026 12:00:30 GMT', now)).toBe(30);
    expect(retryAfterSecondsOf('Mon, 07 Dec 2026 11:00:00 GMT', now)).toBe(0);
    expect(retryAfterSecondsOf(null, now)).toBeNull();
    expect(retryAfterSecondsOf('-3', now)).toBeNull();
    expect(retryAfterSecondsOf('1.5', now)).toBeNull();
    expect(retryAfterSecondsOf('soon', now)).toBeNull();
  });

  it('given publication refuses the stream 503 with Retry-After: 2, then watch tries again no sooner than 2 s later; a 429 then ends it with the reason, exit 1', async () => {
    const seen: number[] = [];
    server = createServer((req, res) => {
      seen.push(Date.now());
      const problem = (status: number, code: string, detail: string) => {
        res.writeHead(status, { 'content-type': 'application/problem+json', 'retry-after': '2' });
        res.end(JSON.stringify({ type: `urn:runplane:problem:${code}`, title: code, status, code, detail }));
      };
      if (seen.length === 1) problem(503, 'observer_capacity', 'this publication process holds 5 open event streams, the most it may');
      else problem(429, 'observer_limit', 'the principal holds 3 open event streams on this publication process');
    });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const { port } = server.address() as { port: number };
    const child = spawn(process.execPath, [CLI, 'watch', randomUUID(), '--publication', `http://127.0.0.1:${port}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    expect(seen).toHaveLength(2);
    expect(seen[1]! - seen[0]!).toBeGreaterThanOrEqual(2_000);
    expect(stderr).toContain('observer_capacity');
    expect(stderr).toContain('the server asked to wait 2 s; trying again, attempt 2)'); // no bound of the tries of an unreached publication
    expect(stderr).toContain('observer_limit');
  }, 60_000);
});
