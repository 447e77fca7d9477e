/** The demo's fallback NATS gets its own projection database (issue 8). */
import { describe, expect, it } from '@jest/globals';
import { spawn } from 'node:child_process';
import { projectionDatabaseFor } from '../src/index.js';

describe('projectionDatabaseFor', () => {
  const url = 'postgres://runplane:secret@127.0.0.1:5432/runplane?sslmode=disable';

  it("keeps the configured database for the machine's own NATS", () => {
    expect(projectionDatabaseFor(url, { child: null })).toBe(url);
  });

  it('gives a NATS started by this process a database of its own on the same server (before: the same database)', () => {
    const child = spawn(process.execPath, ['-e', '0']);
    try {
      expect(projectionDatabaseFor(url, { child })).toBe('postgres://runplane:secret@127.0.0.1:5432/runplane_devnats?sslmode=disable');
    } finally {
      child.kill();
    }
  });
});
