/**
 * Waiting for the admin's provisioning (docs/operations.md "Provisioning"): a service may open the
 * Run stream and the buckets but not create them (deploy/nats/accounts.conf). Started before the
 * provisioning has run (a first install, an upgrade that adds a bucket, the Job running beside
 * the rollout), it waits, not ready, and says what it waits for, instead of exiting with the
 * server's "Permissions Violation for Publish to $JS.API.STREAM.CREATE.<name>".
 */
import { permissionViolationOf } from './errors.js';
import { retry } from './retry.js';

const CREATE_SUBJECT = /^\$JS\.API\.STREAM\.CREATE\.(.+)$/;

/**
 * The JetStream stream `e` says this user may not create (a bucket `KV_<name>` or `OBJ_<name>`, or
 * the Run stream), when `e` is the server refusing a `$JS.API.STREAM.CREATE.<name>` request; null
 * for anything else. The client creates a stream only when it is missing, so this means "missing,
 * and not this user's to create".
 */
export function refusedStreamCreation(e: unknown): string | null {
  const violation = permissionViolationOf(e);
  return (violation && CREATE_SUBJECT.exec(violation.subject)?.[1]) ?? null;
}

/** How often the wait says that it still waits, ms. */
export const PROVISIONING_NOTICE_EVERY_MS = 30_000;

/**
 * Runs `open` (which opens the stream or bucket `what`, creating it when missing) until it
 * succeeds, while it fails only because the stream is missing and this user may not create it
 * ({@link refusedStreamCreation}): every 2 s (`awaitProvisioning`), saying so through `say` at
 * the first refusal and then every {@link PROVISIONING_NOTICE_EVERY_MS}. Any other error is thrown
 * at once, as `open` threw it.
 * @param what how the line names it (`stream RUNPLANE`, `bucket rp_leases`).
 * @param say where the waiting is said (default: a line on stderr).
 */
export async function untilProvisioned<T>(
  what: string,
  open: () => Promise<T>,
  say: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): Promise<T> {
  let saidAt = Number.NEGATIVE_INFINITY;
  const started = Date.now();
  return retry('awaitProvisioning', open, {
    shouldRetry: ({ error }) => refusedStreamCreation(error) !== null,
    onFailedAttempt: ({ error }) => {
      const stream = refusedStreamCreation(error);
      if (stream === null || Date.now() - saidAt < PROVISIONING_NOTICE_EVERY_MS) return;
      saidAt = Date.now();
      const waited = Math.round((saidAt - started) / 1000);
      say(
        `runplane: ${what} does not exist (JetStream stream ${stream}) and this service's NATS user may not create it: ` +
          `waiting for the provisioning (\`runplane provision\` as the admin; the runplane-provision Job in Kubernetes)` +
          (waited > 0 ? `, ${waited} s so far` : ''),
      );
    },
  });
}
