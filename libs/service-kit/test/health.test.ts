/**
 * Readiness of a service (libs/service-kit health.ts, docs/operations.md "Health probes"), wired
 * by Nest as a service wires it: the `consumers` check names a durable consumer the server no
 * longer has or whose pull loop stopped, looks each durable up at most once per
 * CONSUMER_LOOKUP_TTL_MS, and does not fail on a lookup that only timed out; a service's own
 * check fails readiness when required and is only reported otherwise. The real JetStream case
 * (a durable deleted under a running projector) is apps/projector/test/projector.test.ts.
 */
import { describe, expect, it } from '@jest/globals';
import { Global, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventLog, ServedConsumers, type DurableConsumer } from '@runplane/eventlog';
import { ApiError } from '../src/problems.js';
import { CONSUMER_LOOKUP_TTL_MS, HealthController, HealthModule, type ReadinessCheck } from '../src/health.js';

interface Fakes {
  lookups: string[];
  missing: Set<string>;
  slow: Set<string>;
  served: ServedConsumers;
}

async function controller(checks: ReadinessCheck[] = []): Promise<{ health: HealthController; fakes: Fakes; close: () => Promise<void> }> {
  const fakes: Fakes = { lookups: [], missing: new Set(), slow: new Set(), served: new ServedConsumers() };
  const log = {
    space: { stream: 'RP' },
    nc: { isClosed: () => false, flush: async () => undefined },
    jsm: {
      streams: { info: async () => ({}) },
      consumers: {
        info: async (_stream: string, durable: string) => {
          fakes.lookups.push(durable);
          if (fakes.slow.has(durable)) throw new Error('TIMEOUT');
          if (fakes.missing.has(durable)) throw Object.assign(new Error('consumer not found'), { status: 404 });
          return {};
        },
      },
    },
  };
  @Global()
  @Module({
    providers: [
      { provide: EventLog, useValue: log },
      { provide: ServedConsumers, useValue: fakes.served },
    ],
    exports: [EventLog, ServedConsumers],
  })
  class FakeLogModule {}
  @Module({ imports: [FakeLogModule, HealthModule.withChecks({ useFactory: () => checks })] })
  class Root {}
  const app = await NestFactory.createApplicationContext(Root, { logger: false });
  return { health: app.get(HealthController), fakes, close: () => app.close() };
}

const consumer = (durableName: string, pulling = true) => ({ durableName, pulling }) as unknown as DurableConsumer;

async function problemOf(p: Promise<unknown>): Promise<Record<string, unknown>> {
  const e = await p.then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(ApiError);
  return (e as ApiError).problem();
}

describe('readiness: consumers', () => {
  it('given every served durable exists and pulls, then 200 listing each; looked up once per TTL', async () => {
    const { health, fakes, close } = await controller();
    fakes.served.add(consumer('rp-runtime-p0'));
    fakes.served.add(consumer('rp-runtime-p1'));
    const result = await health.readyz();
    expect(result.status).toBe('ok');
    expect(result.details.consumers).toEqual({
      status: 'up',
      durables: { 'rp-runtime-p0': { exists: true, pulling: true }, 'rp-runtime-p1': { exists: true, pulling: true } },
    });
    await health.readyz();
    await health.healthz();
    expect(fakes.lookups.sort()).toEqual(['rp-runtime-p0', 'rp-runtime-p1']);
    await close();
  });

  it('given a durable the server no longer has, then 503 naming it; once it is there again (after the TTL), 200', async () => {
    const { health, fakes, close } = await controller();
    fakes.served.add(consumer('rp-runtime-p0'));
    fakes.served.add(consumer('rp-runtime-p1'));
    fakes.missing.add('rp-runtime-p1');
    const problem = await problemOf(health.readyz());
    expect(problem).toMatchObject({ status: 503, code: 'dependency_unavailable' });
    expect(problem.detail).toBe('the durable consumer rp-runtime-p1 is unavailable; retry later');
    expect((problem.checks as Record<string, unknown>).consumers).toMatchObject({
      status: 'down',
      down: ['rp-runtime-p1'],
      durables: { 'rp-runtime-p1': { exists: false, pulling: true, reason: 'not found on the server' } },
    });
    fakes.missing.clear();
    // still the cached answer within the TTL
    await problemOf(health.readyz());
    const realNow = Date.now;
    Date.now = () => realNow() + CONSUMER_LOOKUP_TTL_MS + 1;
    try {
      expect((await health.readyz()).status).toBe('ok');
    } finally {
      Date.now = realNow;
    }
    await close();
  });

  it('given a pull loop that stopped, then 503 naming its durable', async () => {
    const { health, fakes, close } = await controller();
    fakes.served.add(consumer('rp-tools-p2', false));
    const problem = await problemOf(health.readyz());
    expect(problem.detail).toBe('the durable consumer rp-tools-p2 is unavailable; retry later');
    expect((problem.checks as Record<string, Record<string, unknown>>).consumers!.durables).toEqual({
      'rp-tools-p2': { exists: true, pulling: false },
    });
    await close();
  });

  it('given a lookup that fails without "not found" (a slow server), then the last answer stands: no flapping', async () => {
    const { health, fakes, close } = await controller();
    fakes.served.add(consumer('rp-runtime-p0'));
    expect((await health.readyz()).status).toBe('ok');
    fakes.slow.add('rp-runtime-p0');
    const realNow = Date.now;
    Date.now = () => realNow() + CONSUMER_LOOKUP_TTL_MS + 1;
    try {
      const result = await health.readyz();
      expect(result.status).toBe('ok');
      expect(result.details.consumers).toMatchObject({ durables: { 'rp-runtime-p0': { exists: true, reason: 'lookup failed: TIMEOUT' } } });
    } finally {
      Date.now = realNow;
    }
    await close();
  });

  it('given no served consumer (more replicas than partitions), then up with none', async () => {
    const { health, close } = await controller();
    expect((await health.readyz()).details.consumers).toEqual({ status: 'up', durables: {} });
    await close();
  });
});

describe("readiness: a service's own checks", () => {
  const postgres = (fail: boolean, required: boolean): ReadinessCheck => ({
    key: 'postgres',
    dependency: 'PostgreSQL',
    required: () => required,
    check: async () => {
      if (fail) throw new Error('ECONNREFUSED');
      return { connected: true };
    },
  });

  it('given a required check down, then 503 naming it with every check in `checks`', async () => {
    const { health, close } = await controller([postgres(true, true)]);
    const problem = await problemOf(health.readyz());
    expect(problem.detail).toBe('PostgreSQL is unavailable; retry later');
    expect(problem.checks).toMatchObject({ nats: { status: 'up' }, stream: { status: 'up' }, postgres: { status: 'down', reason: 'ECONNREFUSED' } });
    await close();
  });

  it('given a check that is only reported down, then 200 with it down in `details` (required: false)', async () => {
    const { health, close } = await controller([postgres(true, false)]);
    const result = await health.readyz();
    expect(result.status).toBe('ok');
    expect(result.details.postgres).toEqual({ status: 'down', required: false, reason: 'ECONNREFUSED' });
    await close();
  });

  it('given it up, then 200 with its details', async () => {
    const { health, close } = await controller([postgres(false, true)]);
    expect((await health.readyz()).details.postgres).toEqual({ status: 'up', connected: true });
    expect((await health.livez()).status).toBe('ok');
    await close();
  });
});
