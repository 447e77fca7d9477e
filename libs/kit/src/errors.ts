import { errors as natsErrors, RequestError } from '@nats-io/transport-node';
import { JetStreamApiError } from '@nats-io/jetstream';

/**
 * An atomic batch the server did not store as a whole (incomplete, too many in flight, a
 * duplicate still in process, a 503): nothing of it was stored, so the same batch may be sent
 * again. Retried like an outage ({@link isTransientNatsError}).
 */
export class BatchNotStored extends Error {
  constructor(detail: string) {
    super(`atomic batch not stored: ${detail}`);
    this.name = 'BatchNotStored';
  }
}

/**
 * True for errors after which the outcome of a NATS request or publish is unknown and the same
 * request may be retried: a timeout, no responders (JetStream restarting), a closed or lost
 * connection, a JetStream 503 or "JetStream not enabled" (10008), an atomic batch not stored.
 * The `shouldRetry` of every transient-NATS policy in {@link retryPolicies}.
 */
export function isTransientNatsError(e: unknown): boolean {
  if (e instanceof natsErrors.TimeoutError || (e instanceof Error && e.name === 'JetStreamNotEnabled')) return true; // no responders: JetStream restarting
  if (e instanceof RequestError || e instanceof natsErrors.NoRespondersError || e instanceof natsErrors.ConnectionError) return true;
  if (e instanceof JetStreamApiError) return e.status === 503 || e.code === 10008;
  return e instanceof BatchNotStored;
}
