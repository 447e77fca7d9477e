/**
 * A stack's admission port is chosen before admission binds it: it must be free and outside the
 * kernel's ephemeral range, where an outgoing connection of another process could take it first
 * (a stack failed with EADDRINUSE beside other test files).
 */
import { describe, expect, it } from '@jest/globals';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ephemeralPortLow, freePortOutsideEphemeral } from '../src/ports.js';

describe('freePortOutsideEphemeral', () => {
  it('given the machine ephemeral range, then 20 picks are below it, spread out, and each can be bound', async () => {
    const low = ephemeralPortLow();
    const ports: number[] = [];
    for (let i = 0; i < 20; i++) ports.push(await freePortOutsideEphemeral('127.0.0.1'));
    for (const port of ports) {
      expect(port).toBeLessThan(low);
      expect(port).toBeGreaterThanOrEqual(10_000);
    }
    expect(new Set(ports).size).toBeGreaterThan(15); // random, not the first free one each time
    const server = createServer();
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(ports[0], '127.0.0.1', resolve));
    await new Promise((r) => server.close(r));
  });

  it('reads the low end of the range from the kernel file, and falls back to 32768 when it is missing or garbage', () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-ports-'));
    try {
      writeFileSync(join(dir, 'range'), '40000\t60999\n');
      expect(ephemeralPortLow(join(dir, 'range'))).toBe(40000);
      writeFileSync(join(dir, 'garbage'), 'none\n');
      expect(ephemeralPortLow(join(dir, 'garbage'))).toBe(32768);
      expect(ephemeralPortLow(join(dir, 'missing'))).toBe(32768);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
