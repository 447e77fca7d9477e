/**
 * The kit against a real nats-server: the KV store base refuses a stale compare-and-set (the
 * guarantee every lease, claim and index write rests on, K6), its watch keeps delivering after the
 * server is killed and restarted under it, and the named retry policies give up after their
 * number of attempts, retrying exactly what the caller's predicate says.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import type { KvWatchEntry } from '@nats-io/kv';
import { z } from 'zod';
import { AbortError, isRevisionMismatch, KvStore, retry, retryPolicies } from '@runplane/kit';
import { currentNatsServerBinary, nextReconnect, suiteNatsOptions, TestNatsServer } from '../../../test/support/nats-server.js';

const Note = z.object({ n: z.number().int() });
type Note = z.infer<typeof Note>;

/** The smallest store on the base: notes `{n}`. */
class NoteStore extends KvStore<Note> {
  static async open(nc: NatsConnection, bucket: string): Promise<NoteStore> {
    return new NoteStore(await KvStore.openBucket(nc, bucket), Note);
  }
}

const failure = (p: Promise<unknown>) =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

async function until(what: string, ok: () => boolean, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('KvStore on a real nats-server', () => {
  let server: TestNatsServer;
  let nc: NatsConnection;
  beforeAll(async () => {
    server = await TestNatsServer.start({ bin: currentNatsServerBinary().bin });
    nc = await connect(suiteNatsOptions(server.url, { maxReconnectAttempts: -1, reconnectTimeWait: 100 }));
  });
  afterAll(async () => {
    await nc?.close().catch(() => undefined);
    await server?.cleanup();
  });

  it('compareAndSet: given 8 writers racing on one key, when each adds 1 to what it read, then every add lands once (a lost compare-and-set is read and decided again)', async () => {
    const store = await NoteStore.open(nc, `kit_change_${process.pid}`);
    const asked: number[] = [];
    const written = await Promise.all(
      Array.from({ length: 8 }, () =>
        store.compareAndSet('k', (current) => (asked.push(current?.n ?? 0), { n: (current?.n ?? 0) + 1 }), { policy: 'kvCompareAndSet' }),
      ),
    );
    expect(written).toEqual(Array(8).fill(true));
    expect((await store.current('k')).value).toEqual({ n: 8 });
    expect(asked.length).toBeGreaterThan(8); // some writers lost a race and were asked again
    // null from `next`: nothing written, the revision unchanged
    const before = (await store.current('k')).revision;
    expect(await store.compareAndSet('k', () => null, { policy: 'kvCompareAndSet' })).toBe(false);
    expect((await store.current('k')).revision).toBe(before);
    await store.destroy();
  });

  it('compareAndSet: what `next` throws and a write failure `retryOn` refuses end it at the first attempt; a lost compare-and-set is what it retries by default', async () => {
    const store = await NoteStore.open(nc, `kit_change_rules_${process.pid}`);
    let calls = 0;
    const boom = new Error('next refused');
    const thrown = await failure(store.compareAndSet('k', () => (calls++, Promise.reject(boom)), { policy: 'kvCompareAndSet', retryOn: () => true }));
    expect([thrown, calls]).toEqual([boom, 1]);
    // a writer that always writes at a stale revision: retried under the policy, then the mismatch is thrown
    await store.create('s', { n: 1 });
    const stale = Object.create(store) as NoteStore;
    stale.update = (key, value) => store.update(key, value, 1_000_000);
    calls = 0;
    const lost = await failure(stale.compareAndSet('s', (c) => (calls++, { n: (c?.n ?? 0) + 1 }), { policy: { retries: 2, minTimeout: 0 } }));
    expect(isRevisionMismatch(lost)).toBe(true);
    expect(calls).toBe(3);
    calls = 0;
    await failure(
      stale.compareAndSet('s', (c) => (calls++, { n: (c?.n ?? 0) + 1 }), { policy: { retries: 2, minTimeout: 0 }, retryOn: () => false }),
    );
    expect(calls).toBe(1);
    await store.destroy();
  });

  it('compare-and-set: create refuses an existing key, update refuses a stale revision (a stale writer), delete too', async () => {
    const store = await NoteStore.open(nc, `kit_cas_${process.pid}`);
    const r1 = await store.create('a', { n: 1 });
    expect(await failure(store.create('a', { n: 2 }))).toBeInstanceOf(Error);
    const r2 = await store.update('a', { n: 2 }, r1);
    expect(r2).toBeGreaterThan(r1);
    // the writer that read r1 lost: its write is refused and the newer value stands
    expect(await failure(store.update('a', { n: 3 }, r1))).toBeInstanceOf(Error);
    expect(await store.getRecord('a')).toMatchObject({ key: 'a', value: { n: 2 }, revision: r2 });
    expect(await failure(store.delete('a', r1))).toBeInstanceOf(Error);
    await store.delete('a', r2);
    expect(await store.getRecord('a')).toBeNull();
    // a value the schema refuses reads as nothing, never throws
    await store.kv.put('b', 'not json');
    await store.kv.put('c', JSON.stringify({ n: 'x' }));
    expect(await store.getRecord('b')).toBeNull();
    expect(await store.getRecord('c')).toBeNull();
    await store.destroy();
  });

  it('watch: replays the entries, and keeps delivering after the server is killed and restarted under it', async () => {
    const store = await NoteStore.open(nc, `kit_watch_${process.pid}`);
    const seen = new Map<string, number>();
    const deliveries = new Map<string, number>();
    const errors: string[] = [];
    await store.create('before', { n: 1 });
    const watch = await store.watch(
      (e: KvWatchEntry) => {
        const v = store.parseValue(e);
        deliveries.set(e.key, (deliveries.get(e.key) ?? 0) + 1);
        if (v) seen.set(e.key, v.n);
      },
      { reopenAfterMs: 200, onError: (what, e) => errors.push(`${what}: ${e.message}`) },
    );
    try {
      await until('the replayed entry', () => seen.get('before') === 1);
      await store.put('live', { n: 2 });
      await until('a live change', () => seen.get('live') === 2);
      expect(deliveries.get('before')).toBe(1);

      const reconnected = nextReconnect(nc);
      await server.kill();
      await new Promise((r) => setTimeout(r, 1_000));
      await server.restart();
      await reconnected;
      // JetStream answers again once the restarted server has recovered its streams
      await retry('transientRead', () => store.put('after', { n: 3 }), { maxRetryTime: 15_000 });
      await until('a change written after the restart', () => seen.get('after') === 3);
      await store.put('after', { n: 4 });
      await until('the next change', () => seen.get('after') === 4);
      // opened anew after the reconnection: the current entries were replayed (what changed while
      // the connection was down is not missed; a plain nats.js watch carries on without a replay)
      expect(deliveries.get('before')).toBe(2);
      expect(errors).toEqual([]);
    } finally {
      watch.stop();
    }
    await store.destroy();
  });
});

describe('retry policies', () => {
  const failing = (calls: { n: number }, error: () => unknown) => async () => {
    calls.n++;
    throw error();
  };

  it('give up after their attempts (retries + 1) with the last error', async () => {
    for (const name of ['claimRace', 'fenceRace', 'closedConnection'] as const) {
      const calls = { n: 0 };
      const last = new Error(name);
      expect(
        await failure(
          retry(
            name,
            failing(calls, () => last),
          ),
        ),
      ).toBe(last);
      expect(calls.n).toBe(retryPolicies[name].retries + 1);
    }
  });

  it('staleRead waits 5, 14, 36, 98 and 250 ms between its 6 attempts', async () => {
    const at: number[] = [];
    await failure(
      retry('staleRead', () => {
        at.push(performance.now());
        throw new Error('behind');
      }),
    );
    expect(at).toHaveLength(6);
    const waits = at.slice(1).map((t, i) => t - at[i]!);
    const planned = [5, 14, 36, 98, 250];
    waits.forEach((w, i) => expect(w).toBeGreaterThanOrEqual(planned[i]! - 2));
    expect(waits.reduce((a, b) => a + b)).toBeLessThan(2_000);
  });

  it('retry exactly what the predicate says: a refused error once, an AbortError once with its original, a TypeError like any other', async () => {
    const refused = { n: 0 };
    await failure(
      retry(
        'claimRace',
        failing(refused, () => new Error('no')),
        { shouldRetry: () => false },
      ),
    );
    expect(refused.n).toBe(1);

    const aborted = { n: 0 };
    const original = new Error('stop here');
    expect(
      await failure(
        retry(
          'claimRace',
          failing(aborted, () => new AbortError(original)),
        ),
      ),
    ).toBe(original);
    expect(aborted.n).toBe(1);

    // p-retry alone never retries a TypeError that is not a network error
    const typed = { n: 0 };
    const typeError = new TypeError('socket gone');
    const seen: unknown[] = [];
    expect(
      await failure(
        retry(
          'claimRace',
          failing(typed, () => typeError),
          { shouldRetry: ({ error }) => (seen.push(error), true) },
        ),
      ),
    ).toBe(typeError);
    expect(typed.n).toBe(3);
    expect(seen).toEqual([typeError, typeError]);
  });

  it('a success after failures resolves with its value', async () => {
    let n = 0;
    expect(await retry('fenceRace', () => (++n < 3 ? Promise.reject(new Error('lost')) : n))).toBe(3);
  });
});
