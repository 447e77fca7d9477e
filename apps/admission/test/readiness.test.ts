/**
 * Admission's `postgres` readiness check (docs/operations.md, "Health probes"): required only
 * when a quota is configured (then every admission reads PostgreSQL first); otherwise reported
 * without failing readiness, and without connecting before the first Run read. Against the real
 * PostgreSQL of the suite (127.0.0.1:5432) and a port where none listens.
 */
import { describe, expect, it } from '@jest/globals';
import { admissionPostgresCheck, quotasConfigured, RunReader } from '../src/run-reader.js';

const url = process.env.PROJECTIONS_TEST_ADMIN_URL ?? 'postgresql://postgres@127.0.0.1:5432/postgres';
const NONE = { RUNPLANE_QUOTA_CONCURRENT_RUNS: null, RUNPLANE_QUOTA_RUNS_PER_HOUR: null, RUNPLANE_QUOTA_COST_MICROS_PER_DAY: null };

describe("admission's postgres readiness check", () => {
  it('is required only when a quota is configured', () => {
    expect(quotasConfigured(NONE)).toBe(false);
    expect(quotasConfigured({ ...NONE, RUNPLANE_QUOTA_RUNS_PER_HOUR: 10 })).toBe(true);
    const reader = { ping: async () => ({ connected: true }) };
    expect(admissionPostgresCheck(reader, false).required!()).toBe(false);
    expect(admissionPostgresCheck(reader, true).required!()).toBe(true);
  });

  it('without quotas: says not connected before the first read (connects nothing); once connected, select 1', async () => {
    const reader = new RunReader({ DATABASE_URL: url });
    try {
      await expect(admissionPostgresCheck(reader, false).check()).resolves.toEqual({ connected: false });
      await reader.list({ principal: 'nobody', limit: 1 } as never).catch(() => undefined); // the first read connects
      await expect(admissionPostgresCheck(reader, false).check()).resolves.toEqual({ connected: true });
    } finally {
      await reader.onApplicationShutdown();
    }
  });

  it('with quotas: connects and answers select 1; PostgreSQL unreachable, it rejects (503 naming PostgreSQL)', async () => {
    const reader = new RunReader({ DATABASE_URL: url });
    const unreachable = new RunReader({ DATABASE_URL: 'postgresql://postgres@127.0.0.1:1/postgres' });
    try {
      await expect(admissionPostgresCheck(reader, true).check()).resolves.toEqual({ connected: true });
      await expect(admissionPostgresCheck(unreachable, true).check()).rejects.toThrow();
    } finally {
      await reader.onApplicationShutdown();
      await unreachable.onApplicationShutdown().catch(() => undefined);
    }
  }, 20_000);
});
