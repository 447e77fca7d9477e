/** The demo's fallback NATS gets its own projection database (docs/fund-research.md "The demo's NATS and database"). */
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
      // one per state folder (each holds its own server's store): two clones never share one
      const a = projectionDatabaseFor(url, { child }, '/tmp/clone-a/.runplane');
      const b = projectionDatabaseFor(url, { child }, '/tmp/clone-b/.runplane');
      expect(a).toMatch(/\/runplane_devnats_[0-9a-f]{8}\?sslmode=disable$/);
      expect(b).not.toBe(a);
      expect(projectionDatabaseFor(url, { child }, '/tmp/clone-a/.runplane')).toBe(a);
    } finally {
      child.kill();
    }
  });
});
