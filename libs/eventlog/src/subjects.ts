/**
 * Subject layout (docs/event-log.md): one JetStream stream captures `<prefix>.run.>`; each Run
 * has one subject per owner, `<prefix>.run.<runId>.<owner>.<partition>`. So
 * - `<prefix>.run.<runId>.>` reads one Run's events in order (its stream);
 * - the owner of every fact is visible in its subject (token 3; the broker permits each service to
 *   publish only to `*.run.*.<owner>.*`: K9);
 * - the Run's partition ({@link partitionOf}) is the last token, so a consumer can read one
 *   partition of one owner (`<prefix>.run.*.<owner>.<N>`) and every replica of a service owns a
 *   share of the partitions (docs/architecture.md "Partitions");
 * - fencing is a conditional append on the exact subject the writer owns.
 * Token deltas travel live on core NATS `<prefix>.live.<runId>.delta` and are never stored.
 */
import type { Owner } from '@runplane/contracts';

export interface SubjectSpace {
  stream: string;
  prefix: string;
  /**
   * How many partitions the Runs of the stream are spread over (1..{@link MAX_PARTITIONS}); fixed
   * when the stream is created and read back from it (its metadata `runplane_partitions`).
   */
  partitions: number;
}

/** The most partitions a stream may have. */
export const MAX_PARTITIONS = 256;
/** Partitions of a new stream when `RUNPLANE_PARTITIONS` is not set. */
export const DEFAULT_PARTITIONS = 8;
/** The stream metadata key holding the partition count. */
export const PARTITIONS_METADATA_KEY = 'runplane_partitions';

/**
 * The partition of a Run: FNV-1a (32-bit) of the Run id's UTF-8 bytes, modulo `partitions` (the
 * hash family of NATS's own `partition(n, ...)` subject mapping).
 *
 * Like a Temporal history shard: every Run belongs to one partition for life, and for each service
 * one replica at a time consumes a partition, so all events of one Run that a service reacts to
 * reach one replica, in order. The count is fixed when the stream is created (changing it would
 * move Runs between partitions under running consumers): choose it at least as large as the most
 * replicas any service will ever run (more partitions spread the load more evenly; each costs one
 * durable consumer per service). The default 8 fits up to 8 replicas of every service.
 * @param partitions 1..{@link MAX_PARTITIONS}
 * @returns an integer in [0, partitions)
 */
export function partitionOf(runId: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(runId, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % partitions;
}

/** The subject of one owner's facts of a Run: `<prefix>.run.<runId>.<owner>.<partition>`. */
export const runSubject = (s: SubjectSpace, runId: string, owner: Owner): string =>
  `${s.prefix}.run.${runId}.${owner}.${partitionOf(runId, s.partitions)}`;
/** Every subject of one Run: `<prefix>.run.<runId>.>`. */
export const runFilter = (s: SubjectSpace, runId: string): string => `${s.prefix}.run.${runId}.>`;
/** Every Run subject of the stream: `<prefix>.run.>`. */
export const allRunsFilter = (s: SubjectSpace): string => `${s.prefix}.run.>`;
/** One owner's subjects of every Run (`<prefix>.run.*.<owner>.*`), or of one partition (`<prefix>.run.*.<owner>.<N>`). */
export const ownerFilter = (s: SubjectSpace, owner: Owner, partition?: number): string => `${s.prefix}.run.*.${owner}.${partition ?? '*'}`;
/** Every subject of one partition: `<prefix>.run.*.*.<N>`. */
export const partitionFilter = (s: SubjectSpace, partition: number): string => `${s.prefix}.run.*.*.${partition}`;
export const liveDeltaSubject = (s: SubjectSpace, runId: string): string => `${s.prefix}.live.${runId}.delta`;
/**
 * True when a message received on `subject` was published on it (a core publish: the runtime's live
 * delta), not a stream message delivered there by a push consumer someone aimed at it. nats-server
 * does not check a push consumer's deliver subject against its creator's publish permissions
 * (nats-server issue 8274), so any user who may create a consumer could send the Run stream's
 * messages onto an observer's delta subject; such a delivery keeps the stored message's subject and
 * carries an ack reply (`$JS.ACK...`), which tells it apart.
 */
export function isPublishedOn(msg: { subject: string; reply?: string }, subject: string): boolean {
  return msg.subject === subject && !msg.reply;
}

/** The parts of a Run subject. */
export interface RunSubjectParts {
  runId: string;
  /** The owner token (not checked against the owners here). */
  owner: string;
  partition: number;
}

/**
 * Splits `<prefix>.run.<runId>.<owner>.<partition>`; null for any other shape (another prefix, a
 * token missing or extra, a partition that is not a decimal number).
 */
export function parseRunSubject(prefix: string, subject: string): RunSubjectParts | null {
  const t = subject.split('.');
  if (t.length !== 5 || t[0] !== prefix || t[1] !== 'run' || !/^\d{1,3}$/.test(t[4]!)) return null;
  return { runId: t[2]!, owner: t[3]!, partition: Number(t[4]) };
}

/**
 * Core NATS subject on which one runtime process is told, at once, that a Run whose lease it holds
 * was woken on another replica (`<prefix>.nudge.runtime.<instance>`, payload: the Run id). Never
 * stored: an optimisation of latency; the holder's renewal tick still wakes every held Run.
 */
export const runtimeNudgeSubject = (s: Pick<SubjectSpace, 'prefix'>, instance: string): string => `${s.prefix}.nudge.runtime.${instance}`;
/** Every runtime's nudge subject (the runtime user's permissions). */
export const runtimeNudgeFilter = (s: Pick<SubjectSpace, 'prefix'>): string => `${s.prefix}.nudge.runtime.*`;
