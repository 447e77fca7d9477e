import { describe, expect, it } from '@jest/globals';
import { makeEvent, type StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';
import { chainedFrom, postgresCheck, ProjectionDatabase, ProjectorService, loadProjectorConfig, retryDelayMs } from '@runplane/app-projector';

describe('the postgres readiness check', () => {
  it('given select 1 answers, then it is up; given PostgreSQL refuses, then it rejects with the reason (service-kit reports it down, 503 naming PostgreSQL)', async () => {
    expect(postgresCheck({ ping: async () => undefined })).toMatchObject({ key: 'postgres', dependency: 'PostgreSQL' });
    await expect(postgresCheck({ ping: async () => undefined }).check()).resolves.toBeUndefined();
    await expect(postgresCheck({ ping: () => Promise.reject(new Error('ECONNREFUSED')) }).check()).rejects.toThrow('ECONNREFUSED');
    // required: a projector without PostgreSQL applies nothing
    expect(postgresCheck({ ping: async () => undefined }).required).toBeUndefined();
  });
});

describe('ProjectorService retries', () => {
  const stored: StoredEvent = {
    seq: 3,
    subject: 't.run.r.runtime',
    event: makeEvent(
      'model.turn.requested',
      { runId: 'r', conversationId: 'c', correlationId: 'm', causationId: null },
      1,
      { turn: 1, model: 'm' },
      new Date(0),
    ),
  };
  /** A database whose transaction fails `failures` times, then reports the batch applied. */
  const flakyDb = (failures: number) => {
    let calls = 0;
    const em = {
      fork: () => ({
        transactional: async () => {
          if (calls++ < failures) throw new Error('connection lost');
          return [{ status: 'applied', runId: 'r', seq: 3, previousLastSeq: 2 }];
        },
      }),
    };
    return { db: { orm: { em } } as unknown as ProjectionDatabase, calls: () => calls };
  };

  it("given a batch whose transaction fails twice, then it is retried in place until it applies (holding the Runs' order)", async () => {
    const { db, calls } = flakyDb(2);
    const service = new ProjectorService(db, {} as EventLog);
    (service as unknown as { logger: { warn: () => void } }).logger = { warn: () => undefined };
    await expect(service.project([stored])).resolves.toMatchObject([{ status: 'applied' }]);
    expect(calls()).toBe(3);
    expect(service.stats).toMatchObject({ applied: 1, skipped: 0, retries: 2, gaps: 0 });
  });

  it('given the application is stopping, then a batch is refused so the messages redeliver later', async () => {
    const service = new ProjectorService(flakyDb(0).db, {} as EventLog);
    service.beforeApplicationShutdown();
    await expect(service.project([stored])).rejects.toThrow(/stopping/);
    await expect(service.catchUp(stored)).rejects.toThrow(/stopping/);
  });

  it('backs off from 100 ms, doubling, capped at 5 s', () => {
    expect([1, 2, 3, 7, 20].map(retryDelayMs)).toEqual([100, 200, 400, 5000, 5000]);
  });
});

describe('configuration', () => {
  it('defaults the port to 8085 and the host to 127.0.0.1, and rejects a bad port', () => {
    expect(loadProjectorConfig({})).toMatchObject({ PROJECTOR_PORT: 8085, HOST: '127.0.0.1', NATS_URL: 'nats://127.0.0.1:4222' });
    expect(() => loadProjectorConfig({ PROJECTOR_PORT: 'eighty' })).toThrow(/Invalid configuration: PROJECTOR_PORT/);
  });
  it('given a batch linger of half the ack wait or more, then it refuses to start, naming both (a delivery would be sent again while it waits); below it, or 0, it starts', () => {
    expect(loadProjectorConfig({}).PROJECTOR_BATCH_LINGER_MS).toBe(50);
    expect(() => loadProjectorConfig({ PROJECTOR_BATCH_LINGER_MS: '300', RUNPLANE_ACK_WAIT_MS: '600' })).toThrow(
      /PROJECTOR_BATCH_LINGER_MS: must be less than half of RUNPLANE_ACK_WAIT_MS \(600\)/,
    );
    expect(loadProjectorConfig({ PROJECTOR_BATCH_LINGER_MS: '299', RUNPLANE_ACK_WAIT_MS: '600' }).PROJECTOR_BATCH_LINGER_MS).toBe(299);
    expect(loadProjectorConfig({ PROJECTOR_BATCH_LINGER_MS: '0', RUNPLANE_ACK_WAIT_MS: '500' }).PROJECTOR_BATCH_LINGER_MS).toBe(0);
    expect(() => loadProjectorConfig({ PROJECTOR_BATCH_LINGER_MS: '1001' })).toThrow(/PROJECTOR_BATCH_LINGER_MS/);
  });
});

describe('chainedFrom: applying a followed Run from its deliveries alone, without reading the log', () => {
  const ctx = { runId: 'r', conversationId: 'c', correlationId: 'm', causationId: null };
  /** A stored event of `owner`'s subject at `seq`, whose back-link on that subject is `prevSeq`. */
  const at = (seq: number, owner: 'admission' | 'runtime' | 'tools', prevSeq: number | undefined): { trigger: StoredEvent } => {
    const event = makeEvent('model.turn.requested', ctx, seq, { turn: seq, model: 'm' }, new Date(0));
    return { trigger: { seq, subject: `t.run.r.${owner}`, event: { ...event, owner, ...(prevSeq === undefined ? {} : { prevSeq }) } as never } };
  };
  const checkpoint = { lastSeq: 5, subjectSeqs: { admission: 1, runtime: 5 } };

  it('given deliveries that continue each subject from the checkpoint, when chained, then all of them in stream order', () => {
    const out = chainedFrom(checkpoint, [at(9, 'runtime', 7), at(6, 'tools', 0), at(7, 'runtime', 5)]);
    expect(out?.map((s) => s.seq)).toEqual([6, 7, 9]);
  });

  it('given a delivery whose back-link skips an event of its subject, when chained, then null (the log is read)', () => {
    expect(chainedFrom(checkpoint, [at(6, 'tools', 0), at(9, 'runtime', 7)])).toBeNull();
  });

  it('given a repeat of an applied event, or an event without back-link, when chained, then null', () => {
    expect(chainedFrom(checkpoint, [at(5, 'runtime', 3)])).toBeNull();
    expect(chainedFrom(checkpoint, [at(6, 'tools', undefined)])).toBeNull();
  });
});
