/**
 * When a renewal (of a lease, of a claim) may start (K6, K10: a NATS restart is not an expiry):
 * one at a time per key, unless the one in flight has waited `staleAfterMs` or the caller forces
 * it (the connection to NATS is back). A renewal written just before a NATS restart gets no
 * answer and the client waits for it until its request timeout (5 s): waiting with it would hold
 * the key's renewals back past a short TTL and past the judge's reconnection grace. The renewal
 * left waiting must not undo a newer one: that is the caller's compare-and-set to keep. Pure
 * (the clock is passed in), so the rule is tested given/when/then.
 */
export class RenewalSlots<K> {
  private readonly waiting = new Map<K, { token: number; since: number }>();
  private tokens = 0;

  /** @param staleAfterMs how long a renewal in flight keeps the key's slot, ms (a renewal interval). */
  constructor(readonly staleAfterMs: number) {}

  /**
   * Takes the key's slot for a renewal starting at `now` (ms since the epoch), unless one started
   * less than `staleAfterMs` ago is still in flight and `force` is false.
   * @returns the function that frees the slot once that renewal is answered (it frees nothing when
   *   a later renewal took the slot meanwhile), or null when no renewal may start now.
   */
  begin(key: K, force: boolean, now = Date.now()): (() => void) | null {
    const inFlight = this.waiting.get(key);
    if (inFlight && !force && now - inFlight.since < this.staleAfterMs) return null;
    const token = ++this.tokens;
    this.waiting.set(key, { token, since: now });
    return () => {
      if (this.waiting.get(key)?.token === token) this.waiting.delete(key);
    };
  }

  /** True while a renewal of `key` is in flight. */
  busy(key: K): boolean {
    return this.waiting.has(key);
  }
}
