/**
 * "Processed once" by event id. Delivery is at least once (K11: consumers are idempotent): a
 * handler that failed, a process that died before its acknowledgement, or an acknowledgement lost
 * on the way all bring the same event again, with the same `eventId` (stable per fact: it is
 * derived from the Run, the type and the decision, and is also the `Nats-Msg-Id`).
 */
import type { RunEvent } from '@runplane/contracts';

/** Remembers which event ids were processed. Implement it on your own store to remember across restarts. */
export interface ProcessedStore {
  /** True when `eventId` was marked processed. */
  has(eventId: string): boolean | Promise<boolean>;
  /** Marks `eventId` processed. */
  add(eventId: string): void | Promise<void>;
}

/**
 * A {@link ProcessedStore} in this process's memory, holding the most recent `capacity` ids
 * (default 100,000; the oldest are forgotten first). It catches redeliveries within one process's
 * life only: after a restart, a message delivered but not acknowledged before comes again and is
 * processed again. For effects that must not repeat across restarts, keep the ids where the
 * effect is kept (e.g. a table keyed by event id, written in the same transaction as the effect).
 */
export class MemoryProcessedStore implements ProcessedStore {
  private readonly ids = new Set<string>();

  /** @throws RangeError when `capacity` is not a positive whole number. */
  constructor(readonly capacity = 100_000) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive whole number, not ${capacity}`);
  }

  has(eventId: string): boolean {
    return this.ids.has(eventId);
  }

  add(eventId: string): void {
    this.ids.delete(eventId);
    this.ids.add(eventId);
    if (this.ids.size > this.capacity) this.ids.delete(this.ids.values().next().value!);
  }

  /** How many ids are remembered. */
  get size(): number {
    return this.ids.size;
  }
}

/** How {@link processedOnce} keys "done", and what it tells of a skip. */
export interface ProcessedOnceOptions<E, M> {
  /**
   * The key of "done" (default: the `eventId`, one per fact). Key a Run's settlement by its `runId`
   * (one settlement per Run, K9): a second `run.settled` with another `eventId` (a forgery by
   * someone holding the lifecycle's or the admin's credentials, which `runplane audit` names) is
   * then skipped as well.
   */
  key?: (event: E) => string;
  /** Called for each skipped event (a copy, or another event of the same key), before it is acknowledged. */
  onSkip?: (event: E, meta: M) => void | Promise<void>;
}

/**
 * Wraps a handler so that it runs once per `eventId` (or `options.key`) as far as `store` remembers: an event already
 * marked is skipped (and acknowledged), and an event is marked only after its handler returned
 * (a handler that throws is run again on redelivery). Not atomic: a process that dies between the
 * effect and the mark repeats the effect after a restart (at-least-once), so the effect itself
 * should be safe to repeat or carry the event id to its receiver (the webhook notifier sends it as
 * `webhook-id`). One consumer handles the events of one Run one at a time, so two copies of an
 * event never run this handler at once.
 */
export function processedOnce<E extends Pick<RunEvent, 'eventId'>, M>(
  store: ProcessedStore,
  handler: (event: E, meta: M) => void | Promise<void>,
  options: ProcessedOnceOptions<E, M> = {},
): (event: E, meta: M) => Promise<void> {
  const keyOf = options.key ?? ((event: E) => event.eventId);
  return async (event, meta) => {
    const key = keyOf(event);
    if (await store.has(key)) return options.onSkip?.(event, meta);
    await handler(event, meta);
    await store.add(key);
  };
}
