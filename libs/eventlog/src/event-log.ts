import { connect, type NatsConnection } from '@nats-io/transport-node';
import {
  AckPolicy,
  DeliverPolicy,
  JetStreamApiError,
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from '@nats-io/jetstream';
import { RunEvent, type Owner, type StoredEvent } from '@runplane/contracts';
import { AppendConflict, InvalidStoredEvent } from './errors.js';
import { allRunsFilter, runFilter, runSubject, type SubjectSpace } from './subjects.js';

export interface EventLogOptions {
  natsUrl: string;
  stream: string;
  prefix: string;
  /** Connection name shown by the NATS server (e.g. the service name). */
  name?: string;
  /** NATS user and password, when the server requires them. */
  user?: string;
  pass?: string;
}

/** Result of an append: where the event landed. */
export interface AppendResult {
  seq: number;
}

const WRONG_LAST_SEQUENCE = 10071;
const DUPLICATE_WINDOW_NS = 2 * 60 * 1_000_000_000;

/** Decodes and validates one stream message as a Runplane event whose owner matches its subject. */
export function decodeStored(seq: number, subject: string, data: Uint8Array): StoredEvent {
  let raw: unknown;
  try {
    raw = JSON.parse(new TextDecoder().decode(data));
  } catch (e) {
    throw new InvalidStoredEvent(seq, subject, `not JSON (${(e as Error).message})`);
  }
  const parsed = RunEvent.safeParse(raw);
  if (!parsed.success) throw new InvalidStoredEvent(seq, subject, parsed.error.message);
  const event = parsed.data as StoredEvent['event'];
  const tokens = subject.split('.');
  if (tokens[tokens.length - 1] !== event.owner || tokens[tokens.length - 2] !== event.runId) {
    throw new InvalidStoredEvent(seq, subject, `owner ${event.owner} / run ${event.runId} do not match the subject`);
  }
  return { seq, subject, event };
}

/**
 * The event log: one JetStream stream holding every Run's subjects (see subjects.ts).
 * Appends are conditional on the last sequence of the writer's own subject (fencing, K6) and carry
 * the event id as `Nats-Msg-Id` (de-duplication, K11). Reads never append.
 */
export class EventLog {
  /** Called for every stored message that is not a valid event while reading (default: a warning on stderr). */
  onInvalid: (e: InvalidStoredEvent) => void = (e) => process.stderr.write(`runplane event log: skipping ${e.message}\n`);

  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly space: SubjectSpace,
  ) {}

  /**
   * Connects to NATS and makes sure the stream exists.
   * @throws when NATS is unreachable or JetStream is not enabled.
   */
  static async connect(opts: EventLogOptions): Promise<EventLog> {
    const nc = await connect({
      servers: opts.natsUrl,
      name: opts.name ?? 'runplane',
      maxReconnectAttempts: -1,
      ...(opts.user ? { user: opts.user, pass: opts.pass ?? '' } : {}),
    });
    try {
      const jsm = await jetstreamManager(nc);
      const log = new EventLog(nc, jetstream(nc), jsm, { stream: opts.stream, prefix: opts.prefix });
      await log.ensureStream();
      return log;
    } catch (e) {
      await nc.close().catch(() => undefined);
      const text = String((e as Error)?.message ?? e);
      if (/no responders|jetstream (is )?not enabled|503/i.test(text)) {
        throw new Error(`NATS at ${opts.natsUrl} answers but has no JetStream: start nats-server with -js (JetStream enabled)`);
      }
      throw e;
    }
  }

  /** Creates the stream if missing (file storage, 2-minute duplicate window, direct get allowed). */
  async ensureStream(): Promise<void> {
    try {
      const info = await this.jsm.streams.info(this.space.stream);
      const wanted = allRunsFilter(this.space);
      if (!info.config.subjects?.includes(wanted)) {
        throw new Error(
          `stream ${this.space.stream} captures ${JSON.stringify(info.config.subjects)}, not ${wanted}: RUNPLANE_STREAM and RUNPLANE_SUBJECT_PREFIX do not belong together`,
        );
      }
    } catch (e) {
      if (!(e instanceof JetStreamApiError) || e.status !== 404) throw e;
      await this.jsm.streams.add({
        name: this.space.stream,
        subjects: [allRunsFilter(this.space)],
        duplicate_window: DUPLICATE_WINDOW_NS,
        allow_direct: true,
      });
    }
  }

  /** Deletes the stream: test clean-up only. */
  async destroyStream(): Promise<void> {
    await this.jsm.streams.delete(this.space.stream).catch(() => undefined);
  }

  subjectOf(event: RunEvent): string {
    return runSubject(this.space, event.runId, event.owner);
  }

  /**
   * Appends `event` to `<prefix>.run.<runId>.<owner>` only if that subject's last sequence is
   * still `expectedLastSubjectSeq` (0 = the subject must be empty).
   * @throws AppendConflict when another write landed first (re-read and decide again). That
   * includes JetStream answering "duplicate": it checks `Nats-Msg-Id` before the expected
   * sequence, so a duplicate means another writer already recorded this very decision, and the
   * caller must not go on as if it had (e.g. call the model or run the tool itself).
   */
  async append(event: RunEvent, expectedLastSubjectSeq: number): Promise<AppendResult> {
    const subject = this.subjectOf(event);
    try {
      const ack = await this.js.publish(subject, JSON.stringify(event), {
        msgID: event.eventId,
        expect: { lastSubjectSequence: expectedLastSubjectSeq },
      });
      if (ack.duplicate) {
        throw new AppendConflict(subject, expectedLastSubjectSeq, `event ${event.eventId} is already stored at sequence ${ack.seq} (duplicate)`);
      }
      return { seq: ack.seq };
    } catch (e) {
      if (e instanceof AppendConflict) throw e;
      if (e instanceof JetStreamApiError && e.code === WRONG_LAST_SEQUENCE) {
        throw new AppendConflict(subject, expectedLastSubjectSeq, e.message);
      }
      throw e;
    }
  }

  /** The last event on one owner's subject of a Run (direct get), or null. */
  async lastOf(runId: string, owner: Owner): Promise<StoredEvent | null> {
    const subject = runSubject(this.space, runId, owner);
    const msg = await this.jsm.direct.getMessage(this.space.stream, { last_by_subj: subject });
    if (!msg) return null;
    return decodeStored(msg.seq, msg.subject, msg.data);
  }

  /**
   * Every event of one Run in stream order, as of the moment of the call (from `fromSeq`).
   */
  async readRun(runId: string, fromSeq = 1): Promise<StoredEvent[]> {
    // Always read the Run's subjects from the start: ephemeral consumers with a start sequence
    // stalled intermittently under concurrency on nats-server 2.9.10 (a Run's log is small).
    const out: StoredEvent[] = [];
    for await (const e of this.snapshot(runFilter(this.space, runId), 1)) if (e.seq >= fromSeq) out.push(e);
    return out;
  }

  /**
   * Follows one Run live from `fromSeq` (inclusive) with an ordered consumer: stored events
   * first, then new ones as they are appended. Returns a stop function.
   */
  async followRun(runId: string, fromSeq: number, onEvent: (e: StoredEvent) => void | Promise<void>): Promise<() => Promise<void>> {
    const consumer = await this.js.consumers.get(this.space.stream, {
      filter_subjects: runFilter(this.space, runId),
      ...(fromSeq > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: fromSeq } : { deliver_policy: DeliverPolicy.All }),
    });
    const messages = await consumer.consume();
    const done = (async () => {
      for await (const m of messages) {
        let stored: StoredEvent;
        try {
          stored = decodeStored(m.seq, m.subject, m.data);
        } catch (e) {
          if (!(e instanceof InvalidStoredEvent)) throw e;
          this.onInvalid(e);
          continue;
        }
        await onEvent(stored);
      }
    })();
    return async () => {
      await messages.close();
      await done.catch(() => undefined);
    };
  }

  /** Last sequence of the whole stream (0 when empty). */
  async lastSeq(): Promise<number> {
    const info = await this.jsm.streams.info(this.space.stream);
    return info.state.last_seq;
  }

  /** Reads every stored event of every Run in stream order (for projection rebuilds and audits). */
  readAll(): AsyncGenerator<StoredEvent> {
    return this.snapshot(allRunsFilter(this.space), 1);
  }

  /**
   * Reads the events matching `filter` from `fromSeq` as of the moment of the call: an ephemeral
   * pull consumer snapshots the pending count, then exactly that many are fetched in batches.
   * Reads never append (K11).
   */
  private async *snapshot(filter: string, fromSeq: number, batchSize = 512): AsyncGenerator<StoredEvent> {
    const info = await this.jsm.consumers.add(this.space.stream, {
      filter_subject: filter,
      ack_policy: AckPolicy.None,
      ...(fromSeq > 1 ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: fromSeq } : { deliver_policy: DeliverPolicy.All }),
      inactive_threshold: 60 * 1_000_000_000,
      mem_storage: true,
    });
    try {
      let remaining = info.num_pending;
      const consumer = await this.js.consumers.get(this.space.stream, info.name);
      while (remaining > 0) {
        const batch = await consumer.fetch({ max_messages: Math.min(remaining, batchSize), expires: 5000 });
        let got = 0;
        for await (const m of batch) {
          got++;
          try {
            yield decodeStored(m.seq, m.subject, m.data);
          } catch (e) {
            // Not a Runplane event (garbled, forged, wrong owner): it is not a fact; skip it,
            // loudly, so one bad message cannot block folding, audits or rebuilds.
            if (!(e instanceof InvalidStoredEvent)) throw e;
            this.onInvalid(e);
          }
        }
        if (got === 0) throw new Error(`reading ${filter}: the stream returned no messages with ${remaining} pending`);
        remaining -= got;
      }
    } finally {
      await this.jsm.consumers.delete(this.space.stream, info.name).catch(() => undefined);
    }
  }

  async close(): Promise<void> {
    await this.nc.drain().catch(() => undefined);
  }
}

export type { JsMsg };
