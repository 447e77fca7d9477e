/**
 * Partitioned ownership of Runs (docs/architecture.md "Partitions"). Every Run belongs to one of
 * the stream's P partitions (`partitionOf`, subjects.ts). The replicas of a service share the P
 * partitions: each replica registers itself in the membership bucket (`<prefix>_heartbeats`, key
 * `<service>.<instance>`, beaten on a worker thread or the main thread: ./heartbeats.ts), follows the live members of
 * its own service, and computes from them, with the same deterministic function as every other
 * replica ({@link assignPartitions}), which partitions it owns. It consumes only those (one
 * durable consumer per partition, pinned to one client at a time by the server: ./nest.ts) and
 * acts on the KV-driven work of only those Runs (recovery's watchers: {@link PartitionOwnership.owns}).
 *
 * A replica whose heartbeat is older than its TTL (killed, frozen) is no member any more: the
 * others recompute and take its partitions. Two replicas may briefly both believe they own a
 * partition while the membership changes; the server's pin lets only one of them pull, and every
 * decision is a conditional append anyway (K6).
 */
import { Kvm, type KV, type KvWatchEntry } from '@nats-io/kv';
import type { QueuedIterator } from '@nats-io/transport-node';
import { AbortError, retry, retryPolicies, untilProvisioned } from '@runplane/kit';
import type { EventLog } from './event-log.js';
import {
  heartbeatBucketFor,
  heartbeatFreshUntil,
  HeartbeatStore,
  instanceOfHeartbeatKey,
  ProcessHeartbeat,
  type HeartbeatEntry,
} from './heartbeats.js';
import { partitionOf } from './subjects.js';

/** FNV-1a 32-bit of a string's UTF-8 bytes, then murmur3's finaliser (so that near-equal inputs spread). */
function score(partition: number, member: string): number {
  let h = 0x811c9dc5;
  const bytes = Buffer.from(`${member}/${partition}`, 'utf8');
  // an index loop, not `for...of`: the same bytes in the same order, without an iterator per call
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i]!;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b) >>> 0;
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * Which member owns each partition: rendezvous (highest-random-weight) hashing with bounded load.
 * Every (partition, member) pair gets a score from a hash of both; pairs are taken from the highest
 * score down, and a pair is kept when its partition has no owner yet and its member is under its
 * share (`floor(P/n)` each, `ceil(P/n)` for at most `P mod n` of them). So the result is
 * deterministic (every replica computes the same map from the same members, in any order), every
 * partition has exactly one owner, and every member owns `floor(P/n)` or `ceil(P/n)`.
 *
 * Pure rendezvous hashing moves only a leaving member's partitions, but it is not balanced: with
 * 8 partitions and 3 members a member owns none about one time in eight, and a 4th member takes
 * none one time in ten. The bound trades that for a few more moves on a change (measured in
 * libs/eventlog/test/partitions.test.ts: on average under one partition besides the leaving
 * member's own, for 8 partitions and 2-8 members).
 * @param partitions P, 1..256
 * @param members instance ids (duplicates ignored); empty gives an empty map
 * @returns member -> its partitions, ascending (members without a partition are listed with `[]`)
 */
export function assignPartitions(partitions: number, members: readonly string[]): Map<string, number[]> {
  const unique = [...new Set(members)].sort();
  const result = new Map<string, number[]>(unique.map((m) => [m, []]));
  if (unique.length === 0) return result;
  const n = unique.length;
  const floor = Math.floor(partitions / n);
  let bigger = partitions % n; // members that may own floor + 1
  const pairs: { p: number; m: string; s: number }[] = [];
  for (let p = 0; p < partitions; p++) for (const m of unique) pairs.push({ p, m, s: score(p, m) });
  pairs.sort((a, b) => b.s - a.s || a.p - b.p || (a.m < b.m ? -1 : 1));
  const owner = new Array<string | undefined>(partitions);
  for (const { p, m } of pairs) {
    if (owner[p] !== undefined) continue;
    const owned = result.get(m)!;
    if (owned.length < floor) {
      owner[p] = m;
      owned.push(p);
    } else if (owned.length === floor && bigger > 0) {
      owner[p] = m;
      owned.push(p);
      bigger--;
    }
  }
  for (const list of result.values()) list.sort((a, b) => a - b);
  return result;
}

/** The partitions `member` owns among `members` ({@link assignPartitions}); `[]` when it is not one of them. */
export function partitionsOf(partitions: number, members: readonly string[], member: string): number[] {
  return assignPartitions(partitions, members).get(member) ?? [];
}

/** A change of this replica's partitions: what it owns now, what it took and what it gave up. */
export interface OwnershipChange {
  owned: number[];
  added: number[];
  removed: number[];
  /** The live members the map was computed from (instance ids, sorted). */
  members: string[];
  /**
   * Members before the change that are gone because their heartbeat went stale (killed, frozen),
   * not because they left (a graceful stop deletes its key and hands its partitions over itself).
   */
  stale: string[];
}

/** Where membership reports what it does (pino-style: fields, then a constant message). */
export interface OwnershipLogger {
  log(fields: object, message: string): void;
  warn(fields: object, message: string): void;
}

/** How a heartbeat worker thread connects (it opens its own connection; ./heartbeats.ts `ProcessHeartbeat.start`). */
export interface MembershipConnection {
  natsUrl: string;
  user?: string;
  pass?: string;
  /** `NATS_CA_FILE`: the worker's connection verifies the server against it (tls.ts). */
  caFile?: string;
}

/**
 * This replica's share of the partitions of its service. Created with {@link PartitionOwnership.start}:
 * registers the process (heartbeat key `<service>.<instance>`), follows the other members of the
 * service and recomputes the map whenever the set of live members changes: a new key, a deleted
 * key (a graceful stop), or a key older than its TTL (checked every third of the TTL).
 *
 * For other parts: `owns(runId)` before acting on a Run found outside a consumer (a KV watch);
 * `partitions()`; `onChange(listener)` to start and stop work when partitions move.
 */
export class PartitionOwnership {
  private readonly beats = new Map<string, HeartbeatEntry>();
  /** Members whose key was deleted (a graceful stop), kept to tell them from stale ones. */
  private readonly left = new Set<string>();
  private owned: number[] = [];
  private memberList: string[] = [];
  private readonly listeners = new Set<(change: OwnershipChange) => void>();
  private watch: QueuedIterator<KvWatchEntry> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  /** The recomputations that changed the owned set (the first and the last 99), for diagnostics: when and to what. */
  readonly history: { at: number; owned: number[] }[] = [];

  private constructor(
    readonly service: string,
    readonly instance: string,
    /** P: the stream's partition count. */
    readonly partitionCount: number,
    private readonly kv: KV,
    private readonly heartbeat: ProcessHeartbeat | null,
    private readonly ttlMs: number,
    private readonly logger: OwnershipLogger,
  ) {}

  /**
   * Registers this process as a member of `service` (its heartbeat beats every third of `ttlMs`),
   * reads the current members and computes the first map before resolving.
   * @param log the process's event log (its `writer.instance` is the member id; `space.partitions` is P)
   * @param beat where the heartbeat beats (heartbeats.ts `HeartbeatPlacement`): the connection
   *   settings of a worker thread's own NATS connection; `'main-thread'` for a timer on this thread
   *   writing through `log.nc`; null = do not beat (a reader that is no member, e.g. a test that
   *   only watches)
   * @throws when the bucket cannot be opened or the first beat is not written within 30 s.
   */
  static async start(
    log: Pick<EventLog, 'nc' | 'space' | 'writer'>,
    service: string,
    beat: MembershipConnection | 'main-thread' | null,
    ttlMs: number,
    logger: OwnershipLogger = { log: () => undefined, warn: (f, m) => console.warn(m, f) },
  ): Promise<PartitionOwnership> {
    const bucket = heartbeatBucketFor(log.space);
    // a missing bucket this service's user may not create is waited for (the admin's provisioning),
    // said on stderr: the service's logger holds its lines until the application has started
    const kv = await untilProvisioned(`bucket ${bucket}`, () => new Kvm(log.nc).create(bucket, { history: 1 }));
    const writer = { service, instance: log.writer.instance };
    const heartbeat =
      beat === 'main-thread'
        ? await ProcessHeartbeat.onMainThread(log.nc, log.space, writer, ttlMs)
        : beat
          ? await ProcessHeartbeat.start(beat, log.space, writer, ttlMs)
          : null;
    const o = new PartitionOwnership(service, log.writer.instance, log.space.partitions, kv, heartbeat, ttlMs, logger);
    await o.follow();
    return o;
  }

  /** True when this replica owns the Run's partition now. */
  owns(runId: string): boolean {
    return this.ownsPartition(partitionOf(runId, this.partitionCount));
  }

  /** True when this replica owns partition `p` now. */
  ownsPartition(p: number): boolean {
    return this.owned.includes(p);
  }

  /** The partitions this replica owns now, ascending. */
  partitions(): number[] {
    return [...this.owned];
  }

  /** The live members of the service (instance ids, sorted), as of the last recomputation. */
  members(): string[] {
    return [...this.memberList];
  }

  /**
   * Calls `listener` after every change of the owned set (and not for the first map, which
   * `partitions()` already gives). Listeners run synchronously, in registration order; a listener
   * that throws is logged and does not stop the others.
   * @returns a function that removes the listener.
   */
  onChange(listener: (change: OwnershipChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Leaves the service: stops following, owns nothing any more (listeners are told) and deletes
   * this process's heartbeat key, so the other replicas take its partitions at once.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.watch?.stop();
    this.apply(
      [],
      this.memberList.filter((m) => m !== this.instance),
      [],
    );
    await this.heartbeat?.stop();
  }

  private async follow(): Promise<void> {
    const watch = await this.kv.watch({ key: `${this.service}.>` });
    this.watch = watch;
    // the watch replays the current keys first (its `delta`, the entries still pending, reaches
    // 0 on the last of them): the first map is computed from all of them
    await new Promise<void>((resolve) => {
      let done = false;
      // an empty bucket sends nothing: our own beat is in it already, so this only bounds a stall
      // (cleared once the replay is in: a pending timer kept a stopped process, or a test's Jest
      // worker, alive for up to 2 s after the start)
      const stall = setTimeout(() => finish(), 2_000);
      const finish = () => {
        if (!done) {
          done = true;
          clearTimeout(stall);
          resolve();
        }
      };
      void (async () => {
        try {
          for await (const e of watch) {
            this.take(e);
            if (e.delta === 0) finish();
            if (done) this.recomputeOnceTaken();
          }
        } catch (err) {
          this.logger.warn({ error: (err as Error).message }, 'membership watch failed');
        }
        finish();
        if (!this.stopped) void this.rewatch();
      })();
    });
    this.recompute();
    const every = Math.max(100, Math.floor(this.ttlMs / 3));
    let lastTick = Date.now();
    this.timer ??= setInterval(() => {
      const now = Date.now();
      const stalled = now - lastTick > this.ttlMs;
      lastTick = now;
      // after this process itself stalled (frozen, starved) the others' beats it has not read yet
      // would look stale: the watch catches up first, the next tick judges
      if (!stalled) this.recompute();
    }, every);
  }

  /** Watches again after a watch ended (NATS restarted), under the `watchReopen` policy: the members in between are re-read. */
  private async rewatch(): Promise<void> {
    await new Promise((r) => setTimeout(r, retryPolicies.watchReopen.minTimeout));
    await retry(
      'watchReopen',
      () => {
        if (this.stopped) throw new AbortError('membership stopped');
        return this.follow();
      },
      { onFailedAttempt: ({ error }) => this.logger.warn({ error: error.message }, 'could not watch the members yet') },
    ).catch(() => undefined); // stopped
  }

  private take(e: KvWatchEntry): void {
    const entry = HeartbeatStore.parse(e);
    if (entry && entry.value.service === this.service) {
      this.beats.set(entry.instance, entry);
      this.left.delete(entry.instance);
    } else {
      const instance = instanceOfHeartbeatKey(e.key);
      if (instance) {
        this.beats.delete(instance);
        if (e.operation !== 'PUT') this.left.add(instance);
      }
    }
  }

  /** The live members now: every fresh heartbeat of the service, and this process while it runs. */
  private liveMembers(now: number): string[] {
    const live = new Set<string>();
    for (const [instance, entry] of this.beats) if (heartbeatFreshUntil(entry) >= now) live.add(instance);
    if (!this.stopped && this.heartbeat) live.add(this.instance);
    return [...live].sort();
  }

  /** Set while a recomputation waits for the entries already received ({@link recomputeOnceTaken}). */
  private recomputeQueued = false;

  /**
   * Recomputes once every watch entry already received has been taken, not after each one. After
   * this process itself stalled (its main loop busy, or frozen and continued), the watch hands it
   * the beats written meanwhile one after another, the oldest first: judged one at a time against
   * the present, a live member's older beats are past their TTL, and it was taken for gone, its
   * partitions taken and unpinned, until its newest beat came a few milliseconds later (a
   * verification trial: a 4 s stall of one of two replicas, and a SIGSTOP/SIGCONT).
   */
  private recomputeOnceTaken(): void {
    if (this.recomputeQueued) return;
    this.recomputeQueued = true;
    setImmediate(() => {
      this.recomputeQueued = false;
      this.recompute();
    });
  }

  private recompute(): void {
    if (this.stopped) return;
    const members = this.liveMembers(Date.now());
    if (members.join(',') === this.memberList.join(',') && this.history.length > 0) return;
    const owned = this.heartbeat ? partitionsOf(this.partitionCount, members, this.instance) : [];
    const stale = this.memberList.filter((m) => !members.includes(m) && !this.left.has(m));
    this.apply(owned, members, stale);
  }

  private apply(owned: number[], members: string[], stale: string[]): void {
    const before = this.owned;
    const first = this.history.length === 0;
    this.memberList = members;
    if (!first && owned.join(',') === before.join(',')) return;
    this.owned = owned;
    this.history.push({ at: Date.now(), owned });
    if (this.history.length > 100) this.history.splice(1, this.history.length - 100);
    const change: OwnershipChange = {
      owned,
      added: owned.filter((p) => !before.includes(p)),
      removed: before.filter((p) => !owned.includes(p)),
      members,
      stale,
    };
    this.logger.log(
      {
        service: this.service,
        instance: this.instance,
        partitions: owned,
        added: change.added,
        removed: change.removed,
        members: members.length,
        ...(stale.length ? { stale } : {}),
      },
      'partitions assigned',
    );
    if (first) return;
    for (const l of this.listeners) {
      try {
        l(change);
      } catch (e) {
        this.logger.warn({ error: (e as Error).message }, 'a partition change listener failed');
      }
    }
  }
}
