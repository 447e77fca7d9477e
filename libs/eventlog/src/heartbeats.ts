/**
 * Process heartbeats: one NATS KV bucket `<prefix>_heartbeats`, one key per service process,
 * `<service>.<instance>` (its writer instance id). They serve two readers: the replicas of a
 * service, which share its partitions among the live members (./partitions.ts, `Membership`), and
 * recovery (K6, K10: "late" is not "gone"). Each key is written every third of `ttlMs`; the
 * runtime's by a worker thread with its own NATS connection and its own timer, so that work on the
 * process's main event loop (parsing a long streamed reply, a burst of appends) cannot hold it up,
 * the other services' from their main thread ({@link HeartbeatPlacement}). Recovery reads it beside the leases: a held lease that expired while its holder's
 * heartbeat is fresh belongs to a process that is alive but late; it is given at most one more
 * lease TTL before it is fenced (docs/recovery.md, "Late or gone"). A process killed outright
 * stops beating at once, so its leases are fenced as before, on their own expiry.
 */
import { existsSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { Kvm, type KvEntry } from '@nats-io/kv';
import { kvJson, KvStore } from '@runplane/kit';
import { startupCollectionOn } from '@runplane/kit/memory';
import { z } from 'zod';
import { beatKey } from './beat.js';
import type { EventLog } from './event-log.js';

/**
 * The heartbeat worker's script: in a service's bundle (scripts/bundle-services.mjs, this code
 * running from `apps/<service>/dist/main.bundle.js`) the worker's own bundle beside it; else the
 * built worker beside this module, or, from the sources (tests run them through a transform that
 * worker threads do not get), the built one in `../dist`.
 * @throws Error naming the files looked for when none exists (a build is missing).
 */
function heartbeatWorkerScript(): URL {
  const candidates = import.meta.url.endsWith('.bundle.js')
    ? ['./heartbeat-worker.bundle.js']
    : ['./heartbeat-worker.js', '../dist/heartbeat-worker.js'];
  const urls = candidates.map((file) => new URL(file, import.meta.url));
  const found = urls.find((url) => existsSync(url));
  if (!found) throw new Error(`no heartbeat worker script (${urls.map((u) => u.pathname).join(', ')}): run \`npm run build\``);
  return found;
}
/** A heartbeat's value: who beats, and how long one beat vouches for the process (ms). */
export const HeartbeatValue = z.object({
  service: z.string(),
  instance: z.string(),
  ttlMs: z.number().int().positive(),
});
export type HeartbeatValue = z.infer<typeof HeartbeatValue>;

/** A heartbeat as read from the bucket: its value and the server time of its last write. */
export interface HeartbeatEntry {
  instance: string;
  value: HeartbeatValue;
  writtenAt: Date;
}

/** The key of a process's heartbeat: `<service>.<instance>`. */
export const heartbeatKey = (writer: { service: string; instance: string }): string => `${writer.service}.${writer.instance}`;

/** The instance id of a heartbeat key (`<service>.<instance>`), or null for a key of another shape. */
export const instanceOfHeartbeatKey = (key: string): string | null => {
  const dot = key.indexOf('.');
  return dot > 0 && dot < key.length - 1 ? key.slice(dot + 1) : null;
};

/** The bucket name for a subject space: `<prefix>_heartbeats`. */
export const heartbeatBucketFor = (space: { prefix: string }): string => `${space.prefix}_heartbeats`;

/** The heartbeats bucket, for readers (recovery) and the beating worker. */
export class HeartbeatStore extends KvStore<HeartbeatValue> {
  /** Opens (creating if missing) the bucket of `log`'s subject space. */
  static async open(log: Pick<EventLog, 'nc' | 'space'>): Promise<HeartbeatStore> {
    return new HeartbeatStore(await KvStore.openBucket(log.nc, heartbeatBucketFor(log.space)), HeartbeatValue);
  }

  /** Parses a bucket entry; null for a deleted key (a process that stopped) or a value that is not a heartbeat of its key. */
  static parse(entry: KvEntry): HeartbeatEntry | null {
    const value = kvJson(entry, HeartbeatValue);
    return value && entry.key === heartbeatKey(value) ? { instance: value.instance, value, writtenAt: entry.created } : null;
  }
}

/** How often a process beats, ms: a third of its heartbeat's TTL (`ttlMs`), at least 50 ms. */
export function heartbeatEveryMs(ttlMs: number): number {
  return Math.max(50, Math.floor(ttlMs / 3));
}

/** Until when a heartbeat vouches for its process: the server time of its last write plus its TTL, ms since the epoch. */
export function heartbeatFreshUntil(entry: HeartbeatEntry): number {
  return entry.writtenAt.getTime() + entry.value.ttlMs;
}

/** What the heartbeat worker needs (passed as `workerData`). */
export interface HeartbeatWorkerData {
  natsUrl: string;
  user?: string;
  pass?: string;
  /** `NATS_CA_FILE` (tls.ts): the worker's connection verifies the server against it. */
  caFile?: string;
  bucket: string;
  /** The key written (`<service>.<instance>`). */
  key: string;
  value: HeartbeatValue;
  /** How often it beats, ms. */
  everyMs: number;
  /** Whether the worker runs its start-up collection (its process's `RUNPLANE_STARTUP_COLLECTION`; kit memory.ts). */
  startupCollection: boolean;
}

/**
 * Where a process beats its heartbeat:
 * - `thread`: a worker thread with its own event loop, timer and NATS connection, so nothing on the
 *   main thread (parsing a megabyte reply, a burst of appends) can delay it. For a process whose
 *   leases recovery judges by its heartbeat (the runtime's execution leases: "late" is not "gone",
 *   K6, K10), where a beat held up by its own main loop would have a live holder fenced.
 * - `main`: a timer on the main thread, writing through the process's own connection. For a process
 *   whose heartbeat serves only the partition membership of its replicas: a beat late by more than
 *   two thirds of the TTL moves its partitions to another replica, which is harmless (every
 *   decision is a conditional append, K6) and never happens with one replica (a process always
 *   counts itself live). It saves the thread's isolate and connection: 10-15 MiB of RSS per process.
 */
export type HeartbeatPlacement = 'thread' | 'main';

/**
 * This process's heartbeat: written at once and then every `ttlMs / 3`, on a worker thread or on the
 * main thread ({@link HeartbeatPlacement}); a beat that fails (NATS unreachable) is tried again on
 * the next tick. `stop()` deletes the key, so a stopping process vouches for nothing any more.
 */
export class ProcessHeartbeat {
  private constructor(
    /** Where it beats. */
    readonly placement: HeartbeatPlacement,
    private readonly stopBeating: () => Promise<void>,
    /**
     * Whether the worker thread ran its start-up collection (false when its process was started
     * with `RUNPLANE_STARTUP_COLLECTION=false`, and on the main thread, which has no isolate of its
     * own to collect); settles once it has run or been skipped, after the first beat was tried.
     */
    readonly startupCollection: Promise<boolean>,
  ) {}

  /**
   * Starts beating for `writer` from a worker thread with the given connection settings.
   * @param ttlMs how long one beat vouches for the process (`RUNPLANE_MEMBER_TTL_MS`), ms.
   * @returns once the worker has written the first beat.
   * @throws when the worker cannot connect or write within 30 s.
   */
  static async start(
    connection: { natsUrl: string; user?: string; pass?: string; caFile?: string },
    space: { prefix: string },
    writer: { service: string; instance: string },
    ttlMs: number,
  ): Promise<ProcessHeartbeat> {
    const data: HeartbeatWorkerData = {
      ...connection,
      bucket: heartbeatBucketFor(space),
      key: heartbeatKey(writer),
      value: { service: writer.service, instance: writer.instance, ttlMs },
      everyMs: heartbeatEveryMs(ttlMs),
      startupCollection: startupCollectionOn(),
    };
    const worker = new Worker(heartbeatWorkerScript(), { workerData: data });
    // the worker says `{ beat: true }` after its first beat written and `{ collected }` after its
    // start-up collection, in either order (a first beat that NATS did not take is written later)
    const startupCollection = new Promise<boolean>((resolve) => {
      const onCollected = (m: { collected?: boolean }) => {
        if (m.collected === undefined) return;
        worker.off('message', onCollected);
        resolve(m.collected);
      };
      worker.on('message', onCollected);
    });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the heartbeat worker did not beat within 30 s')), FIRST_BEAT_WITHIN_MS);
      const onBeat = (m: { beat?: boolean }) => {
        if (!m.beat) return;
        clearTimeout(timer);
        worker.off('message', onBeat);
        resolve();
      };
      worker.on('message', onBeat);
      worker.once('error', (e: unknown) => {
        clearTimeout(timer);
        reject(e instanceof Error ? e : new Error(String(e)));
      });
    });
    const stop = async () => {
      const exited = new Promise<void>((r) => worker.once('exit', () => r()));
      worker.postMessage('stop');
      const timer = setTimeout(() => void worker.terminate(), 5_000);
      await exited;
      clearTimeout(timer);
    };
    return new ProcessHeartbeat('thread', stop, startupCollection);
  }

  /**
   * Starts beating for `writer` from this (the main) thread, through the process's own connection
   * `nc` (placement `main`, {@link HeartbeatPlacement}).
   * @param ttlMs how long one beat vouches for the process (`RUNPLANE_MEMBER_TTL_MS`), ms.
   * @returns once the first beat is written.
   * @throws when the bucket cannot be opened, or no beat is written within 30 s (then it beats no more).
   */
  static async onMainThread(
    nc: EventLog['nc'],
    space: { prefix: string },
    writer: { service: string; instance: string },
    ttlMs: number,
  ): Promise<ProcessHeartbeat> {
    const kv = await new Kvm(nc).open(heartbeatBucketFor(space));
    const value: HeartbeatValue = { service: writer.service, instance: writer.instance, ttlMs };
    const beating = beatKey(kv, heartbeatKey(writer), JSON.stringify(value), heartbeatEveryMs(ttlMs), true);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        beating.written,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error('the heartbeat was not written within 30 s')), FIRST_BEAT_WITHIN_MS);
        }),
      ]);
    } catch (e) {
      await beating.stop();
      throw e;
    } finally {
      clearTimeout(timer);
    }
    return new ProcessHeartbeat('main', () => beating.stop(), Promise.resolve(false));
  }

  /** Stops beating and deletes this process's key (a worker thread within 5 s; it is terminated after). */
  async stop(): Promise<void> {
    await this.stopBeating();
  }
}

/** How long a process waits for its first heartbeat to be written before its start fails, ms. */
const FIRST_BEAT_WITHIN_MS = 30_000;
