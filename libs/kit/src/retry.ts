/**
 * Named retry policies: every retry in Runplane runs through p-retry with one of these, so a
 * backoff is declared once, beside its reason, and never hand-looped (STYLE: retries are declared
 * per activity). A policy is p-retry's numeric options; the caller adds what is its own
 * (`shouldRetry`, `onFailedAttempt`, `maxRetryTime`, `signal`) with {@link retry}.
 *
 * p-retry's wait before retry n (n = 1, 2, ...) is `min(maxTimeout, round(r * minTimeout * factor^(n-1)))`,
 * r = 1, or uniform in [1, 2) with `randomize`. `retries` counts the retries after the first
 * attempt (attempts = retries + 1).
 */
import pRetry, { AbortError, type Options, type RetryContext } from 'p-retry';

export { AbortError };
export type { RetryContext };

/** A named policy: how many retries and how far apart (ms). */
export interface RetryPolicy {
  readonly retries: number;
  readonly minTimeout: number;
  readonly maxTimeout?: number;
  readonly factor?: number;
  readonly randomize?: boolean;
}

/** The policies (waits in ms). */
export const retryPolicies = {
  /**
   * An append (or atomic batch) whose outcome is unknown after a NATS outage: the same publish,
   * same event id, again. Waits 100, 200, 400, ... ms, at most 2,000; bounded by the caller's
   * `maxRetryTime` (the log's `appendRetryMs`), not by a count.
   */
  transientAppend: { retries: 1_000, minTimeout: 100, maxTimeout: 2_000, factor: 2 },
  /**
   * A read of a Run through a NATS outage (nothing appended yet, so safe to repeat). Waits 100,
   * 200, 400, ... ms, at most 1,000; bounded by the caller's `maxRetryTime` (30 s in the command handler).
   */
  transientRead: { retries: 1_000, minTimeout: 100, maxTimeout: 1_000, factor: 2 },
  /**
   * An append refused by a conflict (K6: another write landed first): read the Run again and
   * decide again. 6 retries (7 attempts), 10, 20, 40, ... ms, at most 320, each times a random
   * factor in [1, 2).
   */
  appendConflict: { retries: 6, minTimeout: 10, maxTimeout: 320, factor: 2, randomize: true },
  /**
   * Recording the outcome of an activity already paid for (a model turn's reply) while NATS does
   * not answer: never given up by count (the caller stops it when the lease is lost or the process
   * drains). Waits 200, 400, 800, 1,600 ms, then 2,000 each.
   */
  recordOutcome: { retries: Number.POSITIVE_INFINITY, minTimeout: 200, maxTimeout: 2_000, factor: 2 },
  /**
   * A projection transaction that failed (database down, serialization error): the same step
   * again until it succeeds or the service stops. Waits 100, 200, 400, ... ms, at most 5,000.
   */
  projectionStep: { retries: Number.POSITIVE_INFINITY, minTimeout: 100, maxTimeout: 5_000, factor: 2 },
  /**
   * Starting something on a broker still coming up (a partition's durable consumer after a NATS
   * restart): until it starts or is no longer wanted. Waits 250, 500, 1,000, ... ms, at most 5,000.
   */
  startupConnect: { retries: Number.POSITIVE_INFINITY, minTimeout: 250, maxTimeout: 5_000, factor: 2 },
  /**
   * A compare-and-set on a shared KV entry lost to a concurrent writer (the conversation index):
   * read again and write again. 29 retries (30 attempts), 10, 15, 22.5, ... ms, at most 100, each
   * times a random factor in [1, 2), so racing writers spread out.
   */
  kvCompareAndSet: { retries: 29, minTimeout: 10, maxTimeout: 100, factor: 1.5, randomize: true },
  /**
   * Parallel admissions of one principal writing its quota reservations by compare-and-set: read
   * and decide again. 29 retries (30 attempts), 2, 4, 8, ... ms, at most 40, each times a random
   * factor in [1, 2).
   */
  quotaReservation: { retries: 29, minTimeout: 2, maxTimeout: 40, factor: 2, randomize: true },
  /**
   * A compare-and-set race on a claim or lease whose holder is expected to win quickly or lose
   * (taking a tool call's claim: 3 attempts): read again at once, no wait.
   */
  claimRace: { retries: 2, minTimeout: 0 },
  /**
   * A tool wake that met a claim held by another executor (its dispatch not yet in the log): read
   * the Run and decide again 5 times, 25, 50, 100, 200, 400 ms apart (about 0.8 s), then hand the
   * wake back for redelivery.
   */
  claimMet: { retries: 5, minTimeout: 25, maxTimeout: 400, factor: 2 },
  /**
   * Marking a lease fenced while its holder keeps renewing it: 5 attempts, read again at once.
   * Past them the holder stops at its next write anyway (the fence is in the log, K6).
   */
  fenceRace: { retries: 4, minTimeout: 0 },
  /**
   * A read that answered from a copy of the stream behind what this process knows is stored:
   * read again 5 times, 5, 14, 36, 98, 250 ms apart (about 0.4 s in all), then hand the delivery back.
   */
  staleRead: { retries: 5, minTimeout: 5, maxTimeout: 250, factor: 2.7 },
  /**
   * A durable consumer whose message stream ended (NATS restarted, the consumer deleted): consume
   * again 1,000 ms after it ended, then every 1,000 ms until it consumes or is stopping.
   */
  consumeAgain: { retries: Number.POSITIVE_INFINITY, minTimeout: 1_000, factor: 1 },
  /**
   * A KV watch that ended (NATS restarted under it) opened again: 500 ms after it ended, then
   * every 500 ms until it opens or is no longer wanted.
   */
  watchReopen: { retries: Number.POSITIVE_INFINITY, minTimeout: 500, factor: 1 },
  /**
   * An HTTP request on a keep-alive connection the server closed as the request went out: once
   * more on a new connection, at once (every Runplane request is safe to repeat).
   */
  closedConnection: { retries: 1, minTimeout: 0 },
  /**
   * A PostgreSQL connection refused for a passing reason (the connect timed out on a loaded
   * machine, too many clients, the server still starting): connect again 250, 500, 1,000 ms, then
   * every 2,000, bounded by the caller's `maxRetryTime`. A server not listening is not retried.
   */
  databaseBusy: { retries: 1_000, minTimeout: 250, maxTimeout: 2_000, factor: 2 },
  /**
   * An observer's event stream that ended before the settlement (K4: a disconnect is not a
   * cancel): resumed from the last event id 30 times, 500, 1,000, 2,000, ... ms, at most 5,000:
   * about two and a half minutes, longer than a local stack takes to be stopped and started again
   * (`up`: 36-49 s on a loaded 2-core machine, where 10 times, about 35 s, fell short).
   */
  observerResume: { retries: 30, minTimeout: 500, maxTimeout: 5_000, factor: 2 },
  /**
   * The admin's provisioning of the bus (every step creates only what is missing, so it is safe to
   * repeat) on a cluster that answers JetStream requests but has not elected the Run stream's leader
   * yet (a restarted cluster's first `streams.info` timed out): again after 250, 500, 1,000 ms, then
   * every 2,000, bounded by the caller's `maxRetryTime`.
   */
  busProvisioning: { retries: 1_000, minTimeout: 250, maxTimeout: 2_000, factor: 2 },
  /**
   * A service opening what only the admin may create (the Run stream, a bucket) before the
   * provisioning made it: it waits, not ready, instead of exiting, and opens it 2 s after it
   * appears (`untilProvisioned`). Never given up by count: the process is stopped from outside (a
   * startup probe) or the provisioning runs.
   */
  awaitProvisioning: { retries: Number.POSITIVE_INFINITY, minTimeout: 2_000, factor: 1 },
  /**
   * A first connection to NATS whose attempt timed out (each attempt is bounded at 5 s so that a
   * reconnection leaves a hung server quickly: eventlog stale-connection.ts): three more attempts
   * at once, so a start-up on a loaded machine is as patient as with the client's own 20 s bound.
   * A refusal (no server listening, bad credentials, an untrusted certificate) is not retried.
   */
  firstNatsConnect: { retries: 3, minTimeout: 0 },
  /**
   * A message admission answered 503 `dependency_unavailable` (its append timed out: NATS restarting,
   * a node of the cluster hung and being left): the same message (the same `clientMessageId`, so
   * it is admitted at most once, K1) again every 2 s, admission's `Retry-After`, five more times.
   */
  admissionUnavailable: { retries: 5, minTimeout: 2_000, factor: 1 },
  /**
   * A nats-server start whose free port was taken by another process between the look and the
   * server's bind (tests and stacks start side by side): the whole start again on new free ports,
   * at once, twice more (3 sets of ports in all).
   */
  portTaken: { retries: 2, minTimeout: 0 },
} as const satisfies Record<string, RetryPolicy>;

/** The name of a policy of {@link retryPolicies}. */
export type RetryPolicyName = keyof typeof retryPolicies;

/** What a caller adds to a policy: its own predicate, logging, time bound, abort signal. */
export type RetryHooks = Pick<Options, 'shouldRetry' | 'onFailedAttempt' | 'maxRetryTime' | 'signal' | 'shouldConsumeRetry'>;

/**
 * What an attempt threw that p-retry would not hand to the caller's predicate: it never retries a
 * TypeError (unless it looks like a network error), and takes a value that is not an Error of this
 * realm (a `fetch` error seen from a test's vm context) for a TypeError of its own. Carried through
 * and unwrapped, so the policy retries exactly what the caller's `shouldRetry` says.
 */
class Thrown extends Error {
  constructor(readonly thrown: unknown) {
    super(thrown instanceof Error ? thrown.message : String(thrown));
    this.name = 'Thrown';
  }
}

const unwrap = (e: unknown): unknown => (e instanceof Thrown ? e.thrown : e);
const withError = (c: RetryContext): RetryContext => ({ ...c, error: unwrap(c.error) as Error });

/**
 * Runs `attempt` under the named policy (p-retry): resolves with its first success; rejects with
 * the last error when `shouldRetry` says no, the retries or `maxRetryTime` run out, or with the
 * original error of an {@link AbortError} thrown by `attempt` (never retried). Every error but an
 * AbortError goes to the hooks as thrown, TypeErrors included.
 * @param attempt called with the attempt number (1, 2, ...).
 */
export async function retry<T>(
  policy: RetryPolicyName | RetryPolicy,
  attempt: (attemptNumber: number) => PromiseLike<T> | T,
  hooks: RetryHooks = {},
): Promise<T> {
  const numbers = typeof policy === 'string' ? retryPolicies[policy] : policy;
  const { shouldRetry, onFailedAttempt, shouldConsumeRetry } = hooks;
  try {
    return await pRetry(
      async (n) => {
        try {
          return await attempt(n);
        } catch (e) {
          throw e instanceof AbortError || (e instanceof Error && !(e instanceof TypeError)) ? e : new Thrown(e);
        }
      },
      {
        ...numbers,
        ...hooks,
        shouldRetry: shouldRetry && ((c) => shouldRetry(withError(c))),
        onFailedAttempt: onFailedAttempt && ((c) => onFailedAttempt(withError(c))),
        shouldConsumeRetry: shouldConsumeRetry && ((c) => shouldConsumeRetry(withError(c))),
      },
    );
  } catch (e) {
    throw unwrap(e);
  }
}
