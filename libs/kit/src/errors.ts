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
 * Never a permissions violation ({@link permissionViolationOf}), which the client reports as a
 * failed request too. The `shouldRetry` of every transient-NATS policy in {@link retryPolicies}.
 */
export function isTransientNatsError(e: unknown): boolean {
  if (e instanceof natsErrors.TimeoutError || (e instanceof Error && e.name === 'JetStreamNotEnabled')) return true; // no responders: JetStream restarting
  // a request the server refused to the user (its permissions) is refused again: not transient
  if (permissionViolationOf(e)) return false;
  if (e instanceof RequestError || e instanceof natsErrors.NoRespondersError || e instanceof natsErrors.ConnectionError) return true;
  if (e instanceof JetStreamApiError) return e.status === 503 || e.code === 10008;
  return e instanceof BatchNotStored;
}

/**
 * The server's refusal of an operation to the connection's user (`Permissions Violation for Publish
 * to "<subject>"`), when `e` is one or a failed request caused by one (the client rejects the
 * request with a `RequestError` whose `cause` is the violation); null otherwise. Permanent: the same
 * operation is refused until the server's permissions change.
 */
export function permissionViolationOf(e: unknown): InstanceType<typeof natsErrors.PermissionViolationError> | null {
  if (e instanceof natsErrors.PermissionViolationError) return e;
  if (e instanceof RequestError && e.cause instanceof natsErrors.PermissionViolationError) return e.cause;
  return null;
}
