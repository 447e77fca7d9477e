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
  contextFrom,
  deterministicId,
  makeEvent,
  sha256Hex,
  type ReconciledOutcome,
  type RunEvent,
  type RunGrant,
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

export type AdmissionTrigger = PostMessage | ReconcileToolCall | CancelRun;

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

/** `{messageId, runId}` for a client message id within a conversation (stable UUIDs). */
export function admissionIds(conversationId: string, clientMessageId: string): { messageId: string; runId: string } {
  return {
    messageId: deterministicId('message', conversationId, clientMessageId),
    runId: deterministicId('run', conversationId, clientMessageId),
  };
}

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
 * Records an operator's reconciliation of an `unknown` call, once: `[tool.call.reconciled]`; `[]`
 * for the same reconciliation again (same outcome, evidence and operator). It dispatches nothing
 * and never rewrites the receipt; it may come after the Run's settlement.
 * @throws ReconcileNotFound when the Run or the call is unknown.
 * @throws ReconcileConflict when the call's receipt is not `unknown` (or it has none yet), or it was reconciled differently.
 */
function reconcile(facts: RunFacts, cmd: ReconcileToolCall, now: Date): RunEvent[] {
  if (!facts.admitted || !facts.lastEvent) throw new ReconcileNotFound(`run ${facts.runId} not found`);
  const call = facts.toolCalls.get(cmd.toolCallId);
  if (!call) throw new ReconcileNotFound(`run ${facts.runId} has no tool call ${cmd.toolCallId}`);
  if (call.receipt?.status !== 'unknown')
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
