import type { AnomalyKind } from './anomalies.js';

/**
 * Why an append was refused:
 * - `wrong-last-sequence`: the writer's view of its subject is stale, another write landed first
 *   (JetStream API code 10071);
 * - `decided-elsewhere`: JetStream reported the event id as a duplicate and the stored message is
 *   not this append's own earlier attempt: the same decision was recorded by another writer (or
 *   an earlier execution), so its side effect must not run here.
 */
export type AppendConflictKind = 'wrong-last-sequence' | 'decided-elsewhere';

/**
 * The append was refused (see {@link AppendConflictKind}). The writer must re-read the Run's
 * events and decide again; it must not retry the same append blindly, nor run the decision's
 * side effect (K5, K6).
 */
export class AppendConflict extends Error {
  constructor(
    readonly subject: string,
    readonly expectedLastSubjectSeq: number,
    detail: string,
    readonly kind: AppendConflictKind = 'wrong-last-sequence',
  ) {
    super(`append to ${subject} conflicted (expected last subject sequence ${expectedLastSubjectSeq}): ${detail}`);
    this.name = 'AppendConflict';
  }
}

/**
 * A message on a Run subject that is not a fact of the log: not a valid Runplane event (wrong
 * schema, owner or subject; `invalid-message`), an event the log did not append (no verified
 * back-link: a replay or a forgery; `unverified-event`), a message on a partition that is not its
 * Run's (`wrong-partition`), a copy of an event read earlier
 * (`duplicate-event`), or, where readers hold the public keys, an event whose signature is missing,
 * does not verify or is not its type's owner's (`unsigned-event`, `bad-signature`, `wrong-signer`:
 * signing.ts). `anomaly` is the kind to count (`runplane_bus_anomalies_total`, K11).
 */
export class InvalidStoredEvent extends Error {
  /** Everything known about why (for a schema failure, the validator's issues as JSON); the message carries the short reason. */
  readonly detail: string;
  constructor(
    readonly seq: number,
    readonly subject: string,
    reason: string,
    readonly anomaly: Extract<
      AnomalyKind,
      'invalid-message' | 'unverified-event' | 'duplicate-event' | 'wrong-partition' | 'unsigned-event' | 'bad-signature' | 'wrong-signer'
    > = 'invalid-message',
    detail?: string,
  ) {
    super(`stream message ${seq} on ${subject} is not a valid event: ${reason}`);
    this.name = 'InvalidStoredEvent';
    this.detail = detail ?? reason;
  }
}

/** Schema issues listed in {@link issuesInBrief} before the rest is counted. */
const ISSUES_IN_BRIEF = 3;

/**
 * A schema validator's issues (zod's `error.issues`) in a line a person reads: `path: message`
 * for the first {@link ISSUES_IN_BRIEF}, joined by `; `, then how many more. An unknown event type
 * says so instead of listing every type. The whole list belongs in {@link InvalidStoredEvent.detail}.
 */
export function issuesInBrief(issues: readonly { code: string; path: readonly PropertyKey[]; message: string; options?: unknown }[]): string {
  const one = (i: (typeof issues)[number]) => {
    const path = i.path.length ? i.path.map(String).join('.') : '(the message)';
    if (i.code === 'invalid_union' && Array.isArray(i.options)) return `${path}: not one of the ${i.options.length} known values`;
    return `${path}: ${i.message.replace(/^Invalid input: /, '')}`;
  };
  const shown = issues.slice(0, ISSUES_IN_BRIEF).map(one).join('; ');
  return issues.length > ISSUES_IN_BRIEF ? `${shown} (and ${issues.length - ISSUES_IN_BRIEF} more)` : shown;
}

/**
 * A handler cannot act on its event yet, but will once another owner has acted (e.g. a wake whose
 * parked Run's lease is still held by a lost holder until recovery marks it parked, K10): the
 * durable consumer redelivers the event after `delayMs` instead of acknowledging it, and logs it
 * as a warning, not a failure.
 */
/**
 * How long a wake a draining runtime or tools replica no longer takes waits before it is delivered
 * again (to that replica until its partitions are released, then to their next owner), ms, as the
 * delay of its {@link RetryLater}: 1 s, not the 200 ms it was, which redelivered a wake up to 100
 * times over a 20 s drain (a trial counted 162 warnings and delivery 81 of one event on one
 * rollout); a wake waits at most this long more.
 */
export const DRAIN_REDELIVERY_MS = 1_000;

export class RetryLater extends Error {
  constructor(
    message: string,
    readonly delayMs: number,
  ) {
    super(message);
    this.name = 'RetryLater';
  }
}

/**
 * The log refused an append for a reason no retry can fix: the event is larger than the broker's
 * message size (`size`, the server's `max_payload`), or the event or the broker refused its shape
 * (`schema`). Never retried blindly: the owner records the failure as a fact instead (K9, K11).
 */
export class AppendRefused extends Error {
  constructor(
    readonly subject: string,
    readonly reason: 'size' | 'schema',
    detail: string,
  ) {
    super(`append to ${subject} refused (${reason}): ${detail}`);
    this.name = 'AppendRefused';
  }
}

/**
 * True for an append failure no retry can fix ({@link AppendRefused}, a ZodError from the event
 * factory, the client's `max_payload size exceeded`, a JetStream refusal other than a conflict or
 * an outage): the owner must record it as a fact, not retry it.
 */
export function isPermanentAppendError(e: unknown): boolean {
  if (e instanceof AppendRefused) return true;
  if (!(e instanceof Error)) return false;
  if (e.name === 'ZodError') return true;
  return /max_payload|maximum (message|payload) size|message size exceeds/i.test(e.message);
}

/**
 * The Run stream does not exist on the server a read-only log was opened on
 * (`EventLog.connect({ create: false })`): nothing was created (K11: reads never append, nor
 * create the log they read). Names the stream and the server.
 */
export class StreamNotFound extends Error {
  constructor(
    readonly stream: string,
    readonly server: string,
    options?: ErrorOptions,
  ) {
    super(
      `stream ${stream} does not exist on NATS at ${server}; nothing was created (check NATS_URL and RUNPLANE_STREAM, or create it with \`runplane provision\`)`,
      options,
    );
    this.name = 'StreamNotFound';
  }
}

// moved to @runplane/kit (shared by every retry policy); re-exported so imports of the log keep working
export { isTransientNatsError, permissionViolationOf } from '@runplane/kit';
