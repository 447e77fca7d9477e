/**
 * One base for every Runplane KV store (leases, heartbeats, deadlines, claims, the conversation
 * index): a JetStream KV bucket whose values are JSON read through a zod schema, with the
 * compare-and-set writes coordination needs (KV `create`, `update(key, value, revision)`) and a
 * watch that keeps following the bucket across NATS restarts and reconnections, and one
 * read-decide-write loop ({@link KvStore.compareAndSet}) for every shared entry written by compare-and-set.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV, type KvEntry, type KvWatchEntry } from '@nats-io/kv';
import type { z } from 'zod';
import { AbortError, retry, type RetryPolicy, type RetryPolicyName } from './retry.js';
import { untilProvisioned } from './provisioning.js';

/**
 * The value of a KV bucket entry as `schema` reads it (JSON, zod-checked): null for a deleted or
 * purged key, a value that is not JSON, or one the schema refuses. The one parse of every
 * Runplane KV store, so a stray or forged entry is ignored, never thrown.
 */
export function kvJson<S extends z.ZodType>(entry: KvEntry, schema: S): z.infer<S> | null {
  if (entry.operation !== 'PUT') return null;
  let raw: unknown;
  try {
    raw = entry.json();
  } catch {
    return null;
  }
  const value = schema.safeParse(raw);
  return value.success ? value.data : null;
}

/** An entry read from a {@link KvStore}: its key, parsed value, revision (for compare-and-set) and the server time of its last write. */
export interface KvRecord<T> {
  key: string;
  value: T;
  revision: number;
  writtenAt: Date;
}

/**
 * A KV compare-and-set that lost: a `create` of a key that has a value, or an `update` at a revision
 * that is not the key's any more (JetStream's "wrong last sequence", API code 10071).
 */
export function isRevisionMismatch(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  return (e as Error & { code?: unknown }).code === 10071 || /wrong last sequence/i.test(e.message);
}

/** An entry's value as read for a compare-and-set: null when absent, deleted or not a value of the schema; `revision` 0 when the bucket never had the key. */
export interface KvCurrent<T> {
  value: T | null;
  revision: number;
}

/** How a {@link KvStore.compareAndSet} retries. */
export interface KvChangeOptions {
  /** How many times and how far apart the entry is read and `next` asked again. */
  policy: RetryPolicyName | RetryPolicy;
  /**
   * Which write failures are retried (default {@link isRevisionMismatch}: only a lost
   * compare-and-set). A store whose `next` is idempotent against what it wrote (the conversation
   * index) may retry every write failure, a timed-out write included.
   */
  retryOn?: (error: Error) => boolean;
}

/** How a {@link KvStore.watch} keeps going. */
export interface KvWatchOptions {
  /** Only keys matching this (a NATS subject filter over keys, e.g. `runtime.>`); default every key. */
  key?: string;
  /** How long to wait before opening the watch again after it ended or failed, ms. */
  reopenAfterMs: number;
  /** Told when the watch failed (`failed`) or could not be opened again yet (`reopen`); it is tried again after `reopenAfterMs`. */
  onError?: (what: 'failed' | 'reopen', error: Error) => void;
}

/** A running {@link KvStore.watch}: `stop()` ends it for good. */
export interface KvWatch {
  stop(): void;
}

/** An open KV bucket ({@link KvStore.openBucket}): the connection, the bucket's handle and its name. */
export interface KvBucket {
  nc: NatsConnection;
  kv: KV;
  bucket: string;
}

/**
 * A KV bucket of JSON values of one zod schema. Subclasses add the store's own operations (a
 * lease's renew, a claim's take) over these; `kv` stays public for what the base does not cover.
 * Writes throw what the NATS client throws: a compare-and-set that lost (the key changed since
 * `revision`, or exists for `create`) is a JetStream API error ("wrong last sequence", 10071).
 */
export class KvStore<T> {
  readonly nc: NatsConnection;
  readonly kv: KV;
  readonly bucket: string;

  /** A store over `at` (from {@link KvStore.openBucket}) whose values `schema` reads. */
  protected constructor(
    at: KvBucket,
    readonly schema: z.ZodType<T>,
  ) {
    this.nc = at.nc;
    this.kv = at.kv;
    this.bucket = at.bucket;
  }

  /**
   * Opens the bucket `bucket` on `nc`, creating it (history 1) when missing; a missing bucket this
   * user may not create (a service's, before the admin's provisioning) is waited for
   * ({@link untilProvisioned}).
   */
  static async openBucket(nc: NatsConnection, bucket: string): Promise<KvBucket> {
    return { nc, kv: await untilProvisioned(`bucket ${bucket}`, () => new Kvm(nc).create(bucket, { history: 1 })), bucket };
  }

  /**
   * The keys the bucket holds (a deleted key may still be listed until the bucket compacts it: a
   * reader skips what it cannot read), from one stream-info request listing the bucket stream's
   * subjects (paged by the client). Not `kv.keys()`: that creates a consumer on every call and
   * leaves it on the server when the bucket is empty (the tools' claim sweep kept about 60 at its
   * 5 s default; at 100 ms the bucket reached the server's consumer cap and every sweep failed).
   */
  async keys(): Promise<string[]> {
    const prefix = `$KV.${this.bucket}.`;
    const jsm = await jetstreamManager(this.nc, { checkAPI: false });
    const info = await jsm.streams.info(`KV_${this.bucket}`, { subjects_filter: `${prefix}>` });
    return Object.keys(info.state.subjects ?? {})
      .filter((s) => s.startsWith(prefix))
      .map((s) => s.slice(prefix.length));
  }

  /** A bucket entry's value through the schema; null for a deleted key or a value the schema refuses. */
  parseValue(entry: KvEntry): T | null {
    return kvJson<z.ZodType<T>>(entry, this.schema);
  }

  /** A bucket entry as a record; null for a deleted key or a value the schema refuses. */
  toRecord(entry: KvEntry): KvRecord<T> | null {
    const value = this.parseValue(entry);
    return value === null ? null : { key: entry.key, value, revision: entry.revision, writtenAt: entry.created };
  }

  /** The raw entry of `key` (any operation), or null when the bucket never had it. */
  entry(key: string): Promise<KvEntry | null> {
    return this.kv.get(key);
  }

  /** The record of `key`, or null when absent, deleted or not a value of the schema. */
  async getRecord(key: string): Promise<KvRecord<T> | null> {
    const entry = await this.kv.get(key);
    return entry ? this.toRecord(entry) : null;
  }

  /** The value of `key` and the revision to write it back at (see {@link KvCurrent}). */
  async current(key: string): Promise<KvCurrent<T>> {
    const entry = await this.kv.get(key);
    return entry ? { value: this.parseValue(entry), revision: entry.revision } : { value: null, revision: 0 };
  }

  /**
   * Changes `key` by compare-and-set: reads it, asks `next` for the new value given the current
   * one (null: none), and writes that at the revision read (`create` when the bucket never had
   * the key). When the write fails and `retryOn` takes the error, the entry is read again and
   * `next` asked again under `policy`, so what `next` decides always rests on the value as stored.
   * A failed read and what `next` throws are never retried.
   * @returns true when a value was written, false when `next` answered null (nothing to write).
   * @throws the last write error once `policy` is spent or `retryOn` refuses it; NATS errors of the read; what `next` throws.
   */
  compareAndSet(key: string, next: (current: T | null) => T | null | Promise<T | null>, options: KvChangeOptions): Promise<boolean> {
    const retryOn = options.retryOn ?? isRevisionMismatch;
    return retry(
      options.policy,
      async () => {
        const { value: current, revision } = await this.current(key).catch((e: unknown) => {
          throw new AbortError(e as Error);
        });
        const value = await Promise.resolve()
          .then(() => next(current))
          .catch((e: unknown) => {
            throw new AbortError(e as Error);
          });
        if (value === null) return false;
        if (revision === 0) await this.create(key, value);
        else await this.update(key, value, revision);
        return true;
      },
      { shouldRetry: ({ error }) => retryOn(error) },
    );
  }

  /** Creates `key` only when it has no value (compare-and-set on absence). @returns its revision. @throws when it exists. */
  create(key: string, value: T): Promise<number> {
    return this.kv.create(key, JSON.stringify(value));
  }

  /** Writes `key` only when its revision is still `revision` (compare-and-set). @returns the new revision. @throws when it changed. */
  update(key: string, value: T, revision: number): Promise<number> {
    return this.kv.update(key, JSON.stringify(value), revision);
  }

  /** Writes `key` unconditionally. @returns the new revision. */
  put(key: string, value: T): Promise<number> {
    return this.kv.put(key, JSON.stringify(value));
  }

  /** Deletes `key`; with `revision`, only when it is still that revision (compare-and-set). @throws when it changed. */
  async delete(key: string, revision?: number): Promise<void> {
    await this.kv.delete(key, revision === undefined ? undefined : { previousSeq: revision });
  }

  /** Removes `key` and its history. */
  async purge(key: string): Promise<void> {
    await this.kv.purge(key);
  }

  /**
   * Follows the bucket: every current entry first, then every change, each handed to `onEntry`
   * (deletes and purges too: `operation` is not `PUT`). A watch whose iterator ends or fails (NATS
   * restarted under it), or whose connection reconnected (its consumer may be gone on the server),
   * is opened again after `reopenAfterMs` and replays the current entries, so `onEntry` must take
   * an entry it has seen again. Runs until `stop()`.
   * @returns once the first watch is open.
   * @throws when the first watch cannot be opened.
   */
  async watch(onEntry: (entry: KvWatchEntry) => void, options: KvWatchOptions): Promise<KvWatch> {
    const open = () => this.kv.watch(options.key === undefined ? {} : { key: options.key });
    let current = await open();
    let stopped = false;
    // a constant wait, for as long as the watch is wanted
    const reopen: RetryPolicy = { retries: Number.POSITIVE_INFINITY, minTimeout: options.reopenAfterMs, factor: 1 };
    void (async () => {
      for await (const s of this.nc.status()) {
        if (stopped) return;
        if (s.type === 'reconnect') current.stop();
      }
    })().catch(() => undefined);
    void (async () => {
      while (!stopped) {
        try {
          for await (const e of current) onEntry(e);
        } catch (e) {
          options.onError?.('failed', e as Error);
        }
        if (stopped) return;
        await new Promise((r) => setTimeout(r, options.reopenAfterMs));
        try {
          current = await retry(
            reopen,
            () => {
              if (stopped) throw new AbortError('the watch was stopped');
              return open();
            },
            { onFailedAttempt: ({ error }) => options.onError?.('reopen', error) },
          );
        } catch {
          return; // stopped
        }
      }
    })();
    return {
      stop: () => {
        stopped = true;
        current.stop();
      },
    };
  }

  /** Deletes the bucket: test clean-up only. */
  async destroy(): Promise<void> {
    await this.kv.destroy().catch(() => undefined);
  }
}
