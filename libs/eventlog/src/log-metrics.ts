/**
 * Counts the event log and its durable consumers keep for a metrics endpoint to read at scrape
 * time (libs/service-kit `metrics.ts`: `runplane_appends_total`, `runplane_consumer_deliveries_total`,
 * `runplane_consumer_pending`). Plain numbers in per-key records, so the hot path (every append,
 * every delivery) costs a map lookup and an increment, and this library needs no metrics client.
 * Keys are bounded: event owners, and durable names (one per service and partition).
 */
import type { Owner } from '@runplane/contracts';

/** Appends by the owner of the appended events: `ok` events stored, `conflict` appends refused (`AppendConflict`). */
export interface AppendCounts {
  ok: number;
  conflict: number;
}

/** Deliveries a durable consumer received in this process, and its last known backlog. */
export interface DeliveryCounts {
  /** Messages received (first deliveries and redeliveries). */
  delivered: number;
  /** Of them, redeliveries (the server's delivery count above 1: a nak, an expired ack wait). */
  redelivered: number;
  /** Of them, messages acknowledged unread: an event type the handler does not act on (`DurableConsumerSpec.handles`). */
  ignored: number;
  /**
   * Messages of the consumer not yet delivered, as the server said with the latest delivery
   * (`num_pending`); null while this process does not consume it (released to another replica, or
   * stopped), so that no stale backlog is reported for it.
   */
  pending: number | null;
}

const appends = new Map<string, AppendCounts>();
const deliveries = new Map<string, DeliveryCounts>();

/** Counts `n` events of `owner` stored, or one append of `owner` refused as a conflict. */
export function recordAppend(owner: Owner, result: keyof AppendCounts, n = 1): void {
  let c = appends.get(owner);
  if (!c) appends.set(owner, (c = { ok: 0, conflict: 0 }));
  c[result] += n;
}

/** The append counts of this process, by owner (the live records: read, do not change). */
export function appendCounts(): ReadonlyMap<string, Readonly<AppendCounts>> {
  return appends;
}

/** The record of `durable`'s deliveries in this process, made on first use; the consumer updates it in place. */
export function deliveryCountsOf(durable: string): DeliveryCounts {
  let c = deliveries.get(durable);
  if (!c) deliveries.set(durable, (c = { delivered: 0, redelivered: 0, ignored: 0, pending: 0 }));
  return c;
}

/** The delivery records of this process, by durable name (read, do not change). */
export function deliveryCounts(): ReadonlyMap<string, Readonly<DeliveryCounts>> {
  return deliveries;
}

/**
 * The changes of this process's NATS connections an operator watches (nest.ts `logConnectionChanges`):
 * `stale` (a server that stopped answering pings, left), `lost` (a connection lost), `back`
 * (reconnected), `attempt-failed` (a server that answered, then refused: its credentials, say),
 * `error` (an error the server reported: a refused credential or operation).
 */
export const CONNECTION_CHANGES = ['stale', 'lost', 'back', 'attempt-failed', 'error'] as const;
export type ConnectionChange = (typeof CONNECTION_CHANGES)[number];

const connectionChanges = new Map<ConnectionChange, number>();

/** Counts one change of a NATS connection of this process. */
export function recordConnectionChange(change: ConnectionChange): void {
  connectionChanges.set(change, (connectionChanges.get(change) ?? 0) + 1);
}

/** The connection changes of this process, by kind (read, do not change). */
export function connectionChangeCounts(): ReadonlyMap<ConnectionChange, number> {
  return connectionChanges;
}
