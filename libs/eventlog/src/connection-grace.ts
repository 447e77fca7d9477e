import type { NatsConnection } from '@nats-io/transport-node';
import { RECONNECT_GRACE_MS } from './event-log.js';

/**
 * A liveness judge's view of its own NATS connection (K6, K10: late is not gone). Recovery judges
 * execution leases and the tools judge other executors' claims by the renewals they have seen;
 * renewals sent while the judge itself could not hear them are not missed renewals:
 * - while the judge's connection is down (from the client's `disconnect` status to its
 *   `reconnect`), nothing expires: a verdict taken then rests on a stale view, and acted on once
 *   the judge's connection is back (its reads are retried through the outage) it can land before
 *   the live holder, reconnecting a moment later, renews (seen: a 1.2 s lease fenced during a
 *   1.8 s NATS restart, its runtime alive and back a second later). A judge also judges again
 *   right before it acts (recovery's sweep does);
 * - after a reconnection, or a request NATS did not answer ({@link unanswered}), a holder that
 *   renews every `ttlMs` gets a full TTL plus {@link RECONNECT_GRACE_MS} (the others' reconnect
 *   wait and jitter, with a margin) before it may be judged expired.
 * Times are epoch milliseconds.
 */
export class ConnectionGrace {
  private connected = true;
  private since: number;

  /** @param now when the connection was made (epoch ms). */
  constructor(now: number = Date.now()) {
    this.since = now;
  }

  /**
   * Follows `nc`'s status until the connection closes; `onReconnect` runs after each reconnection
   * has been noted (e.g. renewing what this process holds at once). @returns this grace.
   */
  follow(nc: Pick<NatsConnection, 'status'>, onReconnect?: () => void): this {
    void (async () => {
      for await (const s of nc.status()) {
        if (s.type === 'disconnect') this.disconnected();
        else if (s.type === 'reconnect') {
          this.reconnected();
          try {
            onReconnect?.();
          } catch {
            // the listener's own failure: the grace keeps following the connection
          }
        }
      }
    })().catch(() => undefined); // the connection closed
    return this;
  }

  /** The connection went away: nothing expires until it is back. */
  disconnected(): void {
    this.connected = false;
  }

  /** The connection is back at `now`: every holder gets a full TTL plus the grace from then. */
  reconnected(now: number = Date.now()): void {
    this.connected = true;
    this.since = now;
  }

  /**
   * A request of the judge's went unanswered at `now` (JetStream still recovering after a restart,
   * a frozen server): the holders' renewals went unanswered too, so the grace counts from now.
   */
  unanswered(now: number = Date.now()): void {
    this.since = Math.max(this.since, now);
  }

  /** True while the judge's connection is up (as far as its client has noticed). */
  get isConnected(): boolean {
    return this.connected;
  }

  /**
   * The earliest time a holder renewing every `ttlMs` may be judged expired (epoch ms): the last
   * reconnection (or unanswered request) plus {@link RECONNECT_GRACE_MS} plus `ttlMs`, or
   * `Infinity` while the connection is down. A judge takes the later of this and the stored expiry.
   */
  judgeFrom(ttlMs: number): number {
    return this.connected ? this.since + RECONNECT_GRACE_MS + ttlMs : Number.POSITIVE_INFINITY;
  }
}
