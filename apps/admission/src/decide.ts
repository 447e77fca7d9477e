/**
 * Admission rules (K1, first cut). The Message and Run ids are derived from the conversation and
 * the client's message id, so the same `clientMessageId` always names the same Run; the first
 * admission is the only event on the Run's `admission` subject (appended expecting sequence 0),
 * which makes concurrent duplicates produce exactly one Run.
 * - new id: admit one Message and one Run (`run.admitted`);
 * - same id, same text: return the existing Message and Run, append nothing;
 * - same id, other text: conflict, change nothing.
 */
import {
  admissionIds,
  contextFrom,
  makeEvent,
  sha256Hex,
  type ReconciledOutcome,
  type RunEvent,
  type RunGrant,
  type EventData,
  type RunLimits,
} from '@runplane/contracts';
import { unknownTrigger, type RunFacts } from '@runplane/run-facts';

/** A user's message to admit (the HTTP body, validated, plus what admission adds). */
export interface PostMessage {
  type: 'PostMessage';
  conversationId: string;
  clientMessageId: string;
  content: string;
  grant: RunGrant;
  /** Limits without the deadline; the deadline is `now + deadlineSeconds`. */
  limits: Omit<RunLimits, 'deadlineAt'> & { deadlineSeconds: number };
  /** Id of the HTTP request, recorded as the admission's causation. */
  requestId: string;
}

/**
 * An operator's reconciliation of an `unknown` tool call (K5): what was found at the destination,
 * the evidence, and who. Recorded by admission (facts from a user or operator over HTTP).
 */
export interface ReconcileToolCall {
  type: 'ReconcileToolCall';
  toolCallId: string;
  outcome: ReconciledOutcome;
  evidence: string;
  operator: string;
  /** Id of the HTTP request. */
  requestId: string;
}

/** A user's request to cancel a Run (K4). */
export interface CancelRun {
  type: 'CancelRun';
  requestedBy: string | null;
  reason: string | null;
  /** Id of the HTTP request. */
  requestId: string;
}

/** A user's answer to a pending wait of the Run (K10), over HTTP. */
export interface AnswerWait {
  type: 'AnswerWait';
  waitId: string;
  /** Non-blank (the HTTP body is validated before). */
  answer: string;
  answeredBy: string | null;
  /** Id of the HTTP request. */
  requestId: string;
}

/**
 * A parent Run requested a child (`child.run.requested`, decided on the CHILD's facts): admit it
 * once, linked to its parent, with the carved grant and limits. `parentActive` is false when the
 * parent's log says it is settled or fenced already (then no child is admitted).
 */
export interface AdmitChild {
  type: 'AdmitChild';
  parentRunId: string;
  conversationId: string;
  request: EventData<'child.run.requested'>;
  /** The `child.run.requested` event's id (the admission's causation). */
  causationId: string;
  parentActive: boolean;
}

export type AdmissionTrigger = PostMessage | ReconcileToolCall | CancelRun | AnswerWait | AdmitChild;

/** No such wait in the Run (HTTP 404). */
export class WaitNotFound extends Error {
  override readonly name = 'WaitNotFound';
}

/** The wait cannot be answered any more: expired, or the Run settled, was fenced or canceled (HTTP 409 `wait_not_pending`). */
export class WaitNotPending extends Error {
  override readonly name = 'WaitNotPending';
  constructor(
    readonly reason: 'expired' | 'run-settled' | 'run-stopped' | 'run-canceled',
    message: string,
  ) {
    super(message);
  }
}

/** The wait was answered before with another text (HTTP 409 `wait_conflict`; nothing appended). */
export class WaitConflict extends Error {
  override readonly name = 'WaitConflict';
}

/** No such Run (HTTP 404). */
export class RunNotFound extends Error {
  override readonly name = 'RunNotFound';
}

/** The Run is settled already: a cancel changes nothing (HTTP 409 with its outcome). */
export class RunAlreadySettled extends Error {
  override readonly name = 'RunAlreadySettled';
  constructor(readonly outcome: string) {
    super(`the Run is already settled (${outcome}); a cancel changes nothing`);
  }
}

/** No such Run, or no such tool call in it (HTTP 404). */
export class ReconcileNotFound extends Error {
  override readonly name = 'ReconcileNotFound';
}

/** The call's receipt is not `unknown`, or it was reconciled differently before (HTTP 409; nothing appended). */
export class ReconcileConflict extends Error {
  override readonly name = 'ReconcileConflict';
}

/** The same `clientMessageId` was already admitted with other content (HTTP 409; nothing is appended). K1. */
export class MessageConflict extends Error {
  constructor(
    readonly clientMessageId: string,
    readonly field: 'content',
  ) {
    super(`clientMessageId "${clientMessageId}" was already admitted in this conversation with different ${field}`);
    this.name = 'MessageConflict';
  }
}

export { admissionIds };

/**
 * Decides an admission from the facts of the Run the message names (its id is derived from the
 * conversation and `clientMessageId`, see {@link admissionIds}):
 * - nothing admitted yet: `[run.admitted]`, with the deadline `now + deadlineSeconds`;
 * - admitted with the same content: `[]` (the caller answers with the existing ids);
 * @throws MessageConflict when admitted with other content.
 */
export function decide(facts: RunFacts, trigger: AdmissionTrigger, now: Date): RunEvent[] {
  switch (trigger.type) {
    case 'PostMessage':
      return admit(facts, trigger, now);
    case 'ReconcileToolCall':
      return reconcile(facts, trigger, now);
    case 'CancelRun':
      return cancel(facts, trigger, now);
    case 'AnswerWait':
      return answerWait(facts, trigger, now);
    case 'AdmitChild':
      return admitChild(facts, trigger, now);
    default:
      return unknownTrigger('admission', trigger);
  }
}

function admit(facts: RunFacts, cmd: PostMessage, now: Date): RunEvent[] {
  const contentSha256 = sha256Hex(cmd.content);
  if (facts.admitted) {
    if (facts.admitted.message.contentSha256 === contentSha256) return [];
    throw new MessageConflict(cmd.clientMessageId, 'content');
  }
  const { messageId, runId } = admissionIds(cmd.conversationId, cmd.clientMessageId);
  const { deadlineSeconds, ...limits } = cmd.limits;
  return [
    makeEvent(
      'run.admitted',
      { runId, conversationId: cmd.conversationId, correlationId: messageId, causationId: cmd.requestId },
      'admission',
      {
        message: { messageId, clientMessageId: cmd.clientMessageId, content: cmd.content, contentSha256 },
        grant: cmd.grant,
        limits: { ...limits, deadlineAt: new Date(now.getTime() + deadlineSeconds * 1000).toISOString() },
      },
      now,
    ),
  ];
}

/**
 * Records an operator's reconciliation of an `unknown` call (an `unknown` receipt, or a dispatched
 * call that a fence left without a receipt), once: `[tool.call.reconciled]`; `[]`
 * for the same reconciliation again (same outcome, evidence and operator). It dispatches nothing
 * and never rewrites the receipt; it may come after the Run's settlement.
 * @throws ReconcileNotFound when the Run or the call is unknown.
 * @throws ReconcileConflict when the call's receipt is not `unknown` (or it has none yet while the
 *   Run is not fenced), or it was reconciled differently.
 */
function reconcile(facts: RunFacts, cmd: ReconcileToolCall, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent) throw new ReconcileNotFound(`run ${facts.runId} not found`);
  const call = facts.toolCalls.get(cmd.toolCallId);
  if (!call) throw new ReconcileNotFound(`run ${facts.runId} has no tool call ${cmd.toolCallId}`);
  // unknown: a receipt says so, or a fence left the dispatched call without one (its executor was
  // cut off by the fence: no receipt can follow, only a late observation)
  const uncertainAtFence = !call.receipt && call.dispatched && facts.fenced !== null;
  if (call.receipt?.status !== 'unknown' && !uncertainAtFence)
    throw new ReconcileConflict(
      `tool call ${cmd.toolCallId} is ${call.receipt ? `recorded ${call.receipt.status}` : 'not settled by a receipt yet'}; only an unknown outcome can be reconciled`,
    );
  const r = call.reconciliation;
  if (r) {
    if (r.outcome === cmd.outcome && r.evidence === cmd.evidence && r.operator === cmd.operator) return [];
    throw new ReconcileConflict(`tool call ${cmd.toolCallId} was already reconciled as ${r.outcome} by ${r.operator} at ${r.at}`);
  }
  return [
    makeEvent(
      'tool.call.reconciled',
      { ...contextFrom(facts.lastEvent), causationId: cmd.requestId },
      cmd.toolCallId,
      { toolCallId: cmd.toolCallId, name: call.name, outcome: cmd.outcome, evidence: cmd.evidence, operator: cmd.operator, requestId: cmd.requestId },
      now,
    ),
  ];
}

/**
 * Records the user's cancel intent, once (K4): `[run.cancel.requested]`; `[]` when it was recorded
 * before (the same answer again, nothing appended, also after the Run settled `canceled`).
 * @throws RunNotFound when the Run was never admitted.
 * @throws RunAlreadySettled when the Run has its settlement.
 */
function cancel(facts: RunFacts, cmd: CancelRun, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent) throw new RunNotFound(`run ${facts.runId} not found`);
  if (facts.cancelRequested) return []; // a repeat gets the same answer, even once the cancel has settled the Run
  if (facts.settled) throw new RunAlreadySettled(facts.settled.outcome);
  const ctx = { ...contextFrom(facts.lastEvent), causationId: cmd.requestId };
  return [makeEvent('run.cancel.requested', ctx, 'cancel', { requestedBy: cmd.requestedBy, reason: cmd.reason }, now)];
}

/**
 * Records a user's answer to a pending wait, once (K10): `[wait.answered]`, the Run's wake.
 * `[]` for the same answer again (the caller answers 200 with the recorded answer).
 * @throws RunNotFound / WaitNotFound when the Run or the wait is unknown.
 * @throws WaitConflict when the wait was answered with another text.
 * @throws WaitNotPending when the wait expired (`now >= expiresAt`) or the Run settled, stopped
 *   (finished, fenced) or is being canceled: a stale answer appends nothing.
 */
function answerWait(facts: RunFacts, cmd: AnswerWait, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent) throw new RunNotFound(`run ${facts.runId} not found`);
  const wait = facts.waits.get(cmd.waitId);
  if (!wait) throw new WaitNotFound(`run ${facts.runId} has no wait ${cmd.waitId}`);
  if (wait.answer) {
    if (wait.answer.answer === cmd.answer) return [];
    throw new WaitConflict(
      `wait ${cmd.waitId} was already answered${wait.answer.answeredBy ? ` by ${wait.answer.answeredBy}` : ''} at ${wait.answer.at} with another answer`,
    );
  }
  if (facts.settled)
    throw new WaitNotPending('run-settled', `the Run is settled (${facts.settled.outcome}); wait ${cmd.waitId} can no longer be answered`);
  if (facts.fenced || facts.finished)
    throw new WaitNotPending(
      'run-stopped',
      `the Run's execution ended (${facts.fenced ? `fenced: ${facts.fenced.reason}` : facts.finished!.reason}); wait ${cmd.waitId} can no longer be answered`,
    );
  if (facts.cancelRequested) throw new WaitNotPending('run-canceled', `the Run is being canceled; wait ${cmd.waitId} can no longer be answered`);
  if (now.getTime() >= Date.parse(wait.expiresAt)) throw new WaitNotPending('expired', `wait ${cmd.waitId} expired at ${wait.expiresAt}`);
  const ctx = { ...contextFrom(facts.lastEvent), causationId: cmd.requestId };
  return [
    makeEvent(
      'wait.answered',
      ctx,
      cmd.waitId,
      { waitId: cmd.waitId, toolCallId: wait.toolCallId, answer: cmd.answer, answeredBy: cmd.answeredBy, requestId: cmd.requestId },
      now,
    ),
  ];
}

/**
 * Admits a parent's child Run once (K1 by the derived `childRunId`, K7): `[run.admitted]` with
 * the sub-question as its message, the grant and limits carved by the parent's runtime, and
 * `link: {parentRunId, relation: 'child'}`; it belongs to the parent's conversation. `[]` when
 * it is admitted already, or its parent is no longer active.
 */
function admitChild(facts: RunFacts, cmd: AdmitChild, now: Date): RunEvent[] {
  if (facts.admitted || !cmd.parentActive) return [];
  const r = cmd.request;
  const { messageId, runId } = admissionIds(cmd.conversationId, r.clientMessageId);
  if (runId !== r.childRunId) throw new Error(`child run id ${r.childRunId} does not derive from ${r.clientMessageId}`);
  return [
    makeEvent(
      'run.admitted',
      { runId, conversationId: cmd.conversationId, correlationId: messageId, causationId: cmd.causationId },
      'admission',
      {
        message: { messageId, clientMessageId: r.clientMessageId, content: r.question, contentSha256: sha256Hex(r.question) },
        grant: r.grant,
        limits: r.limits,
        link: { parentRunId: cmd.parentRunId, relation: 'child' },
      },
      now,
    ),
  ];
}
