/**
 * Admission rules (K1, K2, K3). The Message and Run ids are derived from the conversation and
 * the client's message id, so the same `clientMessageId` always names the same Run; the first
 * admission is the only event on the Run's `admission` subject (appended expecting sequence 0),
 * which makes concurrent duplicates produce exactly one Run.
 * - new id: admit one Message and one Run (`run.admitted`), listing the Conversation's earlier
 *   Runs as its history (K2);
 * - same id, same text, same parent: return the existing Message and Run, append nothing;
 * - same id, other text, other Continue parent or other clarification: conflict, change nothing;
 * - explicit Continue (`continuationOfRunId`, K3): only of a parent of the same Conversation whose
 *   LOG says it is settled `completed`, `partial` or `interrupted` by a lost runtime, that ran a
 *   model turn, and whose admitted request still matches its hash; a new Run linked to it;
 * - a clarification answer (`replyTo`, K2): only to a clarification the named Run of the same
 *   Conversation registered; its Run id derives from the clarification, so the clarification is
 *   answered once, durably in the log, without appending to the Run that asked.
 */
import {
  admissionIds,
  conversationKey,
  deterministicId,
  contextFrom,
  makeEvent,
  sha256Hex,
  type ReconciledOutcome,
  type RunEvent,
  type RunGrant,
  type EventData,
  type RunLimits,
} from '@runplane/contracts';
import { NamedError } from '@runplane/kit/named-error';
import { unknownTrigger, type RunFacts } from '@runplane/run-facts';
import { quotaRefusal, type QuotaLimits, type QuotaRefusal, type QuotaUsage } from './quota.js';

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
  /** The authenticated principal posting the message (`run.admitted` `principal`); absent with authentication disabled. */
  principal?: string;
  /** Explicit Continue (K3): the parent Run's id, and its facts as its log says (null: no such Run). */
  continuation?: { parentRunId: string; parent: RunFacts | null };
  /** A clarification answer (K2): the clarification, and the facts of the Run that asked it (null: no such Run). */
  reply?: { runId: string; clarificationId: string; parent: RunFacts | null };
  /** The Runs admitted before in the Conversation, oldest first, per the conversation index (K2). */
  history?: string[];
  /**
   * The Run this clientMessageId already names in the Conversation when that is not the Run being
   * decided (an ordinary message's id reused for a clarification answer, or the reverse), else null.
   */
  messageRunElsewhere?: string | null;
  /**
   * The principal's quotas and what it uses now (from the projections); absent: no quota applies.
   * Checked only for a new Run: a repeat of an admitted message answers as before (K1).
   */
  quota?: { limits: QuotaLimits; usage: QuotaUsage };
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
  /**
   * Who may act: the caller's principal when it may act on its own Runs only (a Run admitted for
   * another principal, or for none, is then {@link RunNotFound}, exactly as an unknown Run);
   * null for an admin, the system, or with authentication disabled (any Run). Checked here, on
   * the facts the conditional append rests on, so an admission that lands after an earlier read
   * cannot slip past it (the append conflicts and the decision is taken again).
   */
  principal: string | null;
  requestedBy: string | null;
  reason: string | null;
  /** Id of the HTTP request. */
  requestId: string;
}

/** A user's answer to a pending wait of the Run (K10), over HTTP. */
export interface AnswerWait {
  type: 'AnswerWait';
  /** Who may act, as {@link CancelRun.principal}: another principal's Run is {@link RunNotFound}, before anything of its waits is looked at. */
  principal: string | null;
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
  /** The parent's owner (`run.admitted` `principal`), which the child inherits; absent when the parent has none. */
  principal?: string;
}

/** Why a parent cannot be continued (HTTP 409 `continuation_not_eligible`). */
export type IneligibleReason = 'running' | 'canceled' | 'failed' | 'interrupted' | 'no-execution' | 'request-mismatch' | 'child-run';

/** The parent is not in this Conversation or does not exist (HTTP 404, the same answer for both: nothing of another Conversation leaks). K3. */
export class ParentNotFound extends NamedError {
  constructor(runId: string, conversationId: string) {
    super(`run ${runId} not found in conversation ${conversationId}`);
  }
}

/** The parent's log says it cannot be continued (HTTP 409 `continuation_not_eligible`; nothing appended). K3. */
export class ContinuationNotEligible extends NamedError {
  constructor(
    readonly reason: IneligibleReason,
    message: string,
  ) {
    super(message);
  }
}

/** No such clarification in the named Run of this Conversation (HTTP 404). K2. */
export class ClarificationNotFound extends NamedError {}

/** The clarification was answered by another message (HTTP 409 `clarification_answered`; nothing appended). K2. */
export class ClarificationAnswered extends NamedError {
  constructor(
    readonly clarificationId: string,
    readonly answeredBy: { runId: string; clientMessageId: string },
  ) {
    super(`clarification ${clarificationId} was already answered by message "${answeredBy.clientMessageId}" (run ${answeredBy.runId})`);
  }
}

export type AdmissionTrigger = PostMessage | ReconcileToolCall | CancelRun | AnswerWait | AdmitChild;

/** No such wait in the Run (HTTP 404). */
export class WaitNotFound extends NamedError {}

/** The wait cannot be answered any more: expired, or the Run settled, was fenced or canceled (HTTP 409 `wait_not_pending`). */
export class WaitNotPending extends NamedError {
  constructor(
    readonly reason: 'expired' | 'run-settled' | 'run-stopped' | 'run-canceled',
    message: string,
  ) {
    super(message);
  }
}

/** The wait was answered before with another text (HTTP 409 `wait_conflict`; nothing appended). */
export class WaitConflict extends NamedError {}

/** No such Run (HTTP 404). */
export class RunNotFound extends NamedError {}

/** The Run is settled already: a cancel changes nothing (HTTP 409 with its outcome). */
export class RunAlreadySettled extends NamedError {
  constructor(readonly outcome: string) {
    super(`the Run is already settled (${outcome}); a cancel changes nothing`);
  }
}

/** No such Run, or no such tool call in it (HTTP 404). */
export class ReconcileNotFound extends NamedError {}

/** The call's receipt is not `unknown`, or it was reconciled differently before (HTTP 409; nothing appended). */
export class ReconcileConflict extends NamedError {}

/** What a quota's `used` counts, in words for the 429's `detail`. */
const QUOTA_USAGE_WORDS: Record<QuotaRefusal['quota'], (currency?: string) => string> = {
  'concurrent-runs': () => 'Runs not settled yet',
  'runs-per-hour': () => 'Runs admitted in the last hour',
  'cost-per-day': (currency) => `micro-${currency ?? ''} charged at most to the Runs admitted in the last 24 h`,
};

/** A new Run would exceed a quota of its principal (HTTP 429 `quota_exceeded` with `Retry-After`; nothing appended). */
export class QuotaExceeded extends NamedError {
  constructor(readonly refusal: QuotaRefusal) {
    super(
      `quota ${refusal.quota} exceeded: ${refusal.used} of ${refusal.limit} ${QUOTA_USAGE_WORDS[refusal.quota](refusal.currency)}; retry in ${refusal.retryAfterSeconds} s`,
    );
  }
}

/** The body field a repeated `clientMessageId` disagrees on. */
export type ConflictField = 'content' | 'continuationOfRunId' | 'replyTo';

/**
 * The same `clientMessageId` was already admitted with other content, another Continue parent or
 * another clarification binding (HTTP 409 `message_conflict` naming `field`; nothing is appended). K1.
 */
export class MessageConflict extends NamedError {
  constructor(
    readonly clientMessageId: string,
    readonly field: ConflictField,
    detail?: string,
  ) {
    super(`clientMessageId "${clientMessageId}" was already admitted in this conversation with different ${field}${detail ? ` (${detail})` : ''}`);
  }
}

export { admissionIds };

/**
 * The Run a clarification's answer is admitted as: derived from the Conversation and the
 * clarification, not from the answering message's id, so a clarification has at most one answer
 * Run and "answered" is a fact of the log (that Run's `run.admitted`), not of a projection (K2).
 * The message id stays derived from the answer's own `clientMessageId`.
 */
export function clarificationReplyRunId(conversationId: string, clarificationId: string): string {
  // `conversationId` is the Conversation's key (`conversationKey`): per principal with authentication on
  return deterministicId('run', conversationId, 'clarification-answer', clarificationId);
}

/** Fence reasons that make an `interrupted` parent eligible for Continue: transport loss or lost execution ownership (K3). */
export const CONTINUABLE_INTERRUPTIONS: readonly string[] = ['lease-expired', 'runtime-stopped'];

/**
 * Whether `parent` (its facts, as its log says) may be continued (K3), or why not: it must be
 * settled `completed` or `partial`, or `interrupted` after a fence for a lost runtime (lease
 * expired, runtime stopped); not `canceled`, not `failed`, not still running; it must have run at
 * least one model turn under its original grant, and its admitted request must match the hash
 * recorded with it.
 * @throws ContinuationNotEligible with the reason.
 */
export function assertContinuable(parent: RunFacts): void {
  const id = parent.runId;
  // a child Run belongs to its parent's research, under a grant carved from it: the parent is what a user continues
  if (parent.admitted?.link?.relation === 'child')
    throw new ContinuationNotEligible('child-run', `run ${id} is a child Run of ${parent.admitted.link.parentRunId}; continue its parent instead`);
  const s = parent.settled;
  if (!s) throw new ContinuationNotEligible('running', `run ${id} is not settled yet; only a settled Run can be continued`);
  if (s.outcome === 'canceled') throw new ContinuationNotEligible('canceled', `run ${id} was canceled; a canceled Run cannot be continued`);
  if (s.outcome === 'failed') throw new ContinuationNotEligible('failed', `run ${id} failed (${s.reason}); a failed Run cannot be continued`);
  if (s.outcome === 'interrupted' && !CONTINUABLE_INTERRUPTIONS.includes(parent.fenced?.reason ?? ''))
    throw new ContinuationNotEligible(
      'interrupted',
      `run ${id} was interrupted${parent.fenced ? ` (${parent.fenced.reason})` : ' without a recorded fence'}; only a Run interrupted by a lost runtime can be continued`,
    );
  if (parent.turns.length === 0) throw new ContinuationNotEligible('no-execution', `run ${id} never ran a model turn; there is nothing to continue`);
  const m = parent.admitted!.message;
  if (sha256Hex(m.content) !== m.contentSha256)
    throw new ContinuationNotEligible('request-mismatch', `run ${id}'s original request does not match the hash recorded at its admission`);
}

/**
 * Decides an admission from the facts of the Run the message names (its id is derived from the
 * conversation and `clientMessageId`, see {@link admissionIds}, or for a clarification answer
 * from the clarification, see {@link clarificationReplyRunId}):
 * - nothing admitted yet: `[run.admitted]`, with the deadline `now + deadlineSeconds`, the
 *   Conversation's earlier Runs as `conversationHistory`, and for a Continue or a clarification
 *   answer its `link` (and `parentRequestSha256` or `clarification`);
 * - admitted with the same content, parent and clarification: `[]` (the caller answers with the existing ids);
 * @throws MessageConflict when admitted with other content, parent or clarification (K1).
 * @throws ParentNotFound / ContinuationNotEligible for a Continue of a missing or ineligible parent (K3).
 * @throws ClarificationNotFound / ClarificationAnswered for an answer to a missing or answered clarification (K2).
 * @throws QuotaExceeded when a new Run would exceed a quota of its principal (`cmd.quota`; never for a repeat).
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

/** The Conversation's key (its ids are per principal with authentication on, K1). */
const keyOf = (cmd: PostMessage): string => conversationKey(cmd.conversationId, cmd.principal);

/** True when `run` belongs to the Conversation `cmd` posts in: the same conversation id and the same principal (or none for both). */
const sameConversation = (run: RunFacts, cmd: PostMessage): boolean =>
  run.conversationId === cmd.conversationId && (run.admitted?.principal ?? null) === (cmd.principal ?? null);

function admit(facts: RunFacts, cmd: PostMessage, now: Date): RunEvent[] {
  const contentSha256 = sha256Hex(cmd.content);
  // the id names another Run already (an ordinary message's id reused for an answer, or the reverse): K1 first
  if (cmd.messageRunElsewhere && cmd.messageRunElsewhere !== (cmd.reply ? admittedRunId(cmd) : admissionIds(keyOf(cmd), cmd.clientMessageId).runId))
    throw new MessageConflict(
      cmd.clientMessageId,
      'replyTo',
      cmd.reply ? 'it was admitted as a message that answers no clarification' : 'it was admitted as the answer to a clarification',
    );
  if (facts.admitted) return repeat(facts.admitted, cmd, contentSha256);
  const ids = admissionIds(keyOf(cmd), cmd.clientMessageId);
  const messageId = ids.messageId;
  const runId = cmd.reply ? admittedRunId(cmd) : ids.runId;
  const { deadlineSeconds, ...limits } = cmd.limits;
  let related: Pick<EventData<'run.admitted'>, 'link' | 'parentRequestSha256' | 'clarification'> = {};
  if (cmd.continuation) {
    const { parentRunId, parent } = cmd.continuation;
    // another principal's Run with the same conversation id is in another Conversation: as unknown as a missing one
    if (!parent?.admitted || !sameConversation(parent, cmd)) throw new ParentNotFound(parentRunId, cmd.conversationId);
    assertContinuable(parent);
    related = { link: { parentRunId, relation: 'continuation' }, parentRequestSha256: parent.admitted.message.contentSha256 };
  } else if (cmd.reply) {
    const { runId: askedIn, clarificationId, parent } = cmd.reply;
    const c = parent?.admitted && sameConversation(parent, cmd) ? parent.clarifications.get(clarificationId) : undefined;
    if (!parent?.admitted || !c)
      throw new ClarificationNotFound(`run ${askedIn} of conversation ${cmd.conversationId} has no clarification ${clarificationId}`);
    related = {
      link: { parentRunId: askedIn, relation: 'clarification' },
      clarification: { clarificationId, question: c.question, originalRequest: parent.admitted.message.content },
    };
  }
  // after every other rule: a request refused anyway gets its own reason, and a repeat (above) is never counted
  const refusal = cmd.quota ? quotaRefusal(cmd.quota.limits, cmd.quota.usage, now) : null;
  if (refusal) throw new QuotaExceeded(refusal);
  const history = (cmd.history ?? []).filter((id) => id !== runId);
  return [
    makeEvent(
      'run.admitted',
      { runId, conversationId: cmd.conversationId, correlationId: messageId, causationId: cmd.requestId },
      'admission',
      {
        message: { messageId, clientMessageId: cmd.clientMessageId, content: cmd.content, contentSha256 },
        grant: cmd.grant,
        limits: { ...limits, deadlineAt: new Date(now.getTime() + deadlineSeconds * 1000).toISOString() },
        ...related,
        ...(cmd.principal ? { principal: cmd.principal } : {}),
        conversationHistory: { runIds: history },
      },
      now,
    ),
  ];
}

/**
 * A message whose Run is admitted already: `[]` when it is the same message (same id, text,
 * parent, clarification: K1); a conflict naming the field otherwise. A different message that
 * answers an answered clarification is {@link ClarificationAnswered}.
 */
function repeat(admitted: NonNullable<RunFacts['admitted']>, cmd: PostMessage, contentSha256: string): RunEvent[] {
  const m = admitted.message;
  if (cmd.reply && m.clientMessageId !== cmd.clientMessageId)
    throw new ClarificationAnswered(cmd.reply.clarificationId, { runId: admittedRunId(cmd), clientMessageId: m.clientMessageId });
  if (m.contentSha256 !== contentSha256) throw new MessageConflict(cmd.clientMessageId, 'content');
  const link = admitted.link;
  const parentOf = (relation: 'continuation' | 'clarification') => (link?.relation === relation ? link.parentRunId : null);
  if (parentOf('continuation') !== (cmd.continuation?.parentRunId ?? null))
    throw new MessageConflict(
      cmd.clientMessageId,
      'continuationOfRunId',
      parentOf('continuation') ? `it continues run ${parentOf('continuation')}` : 'it was admitted without continuationOfRunId',
    );
  const answered = admitted.clarification?.clarificationId ?? null;
  if (answered !== (cmd.reply?.clarificationId ?? null))
    throw new MessageConflict(cmd.clientMessageId, 'replyTo', answered ? `it answers clarification ${answered}` : 'it answers no clarification');
  return [];
}

const admittedRunId = (cmd: PostMessage): string => clarificationReplyRunId(keyOf(cmd), cmd.reply!.clarificationId);

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
 * True when the Run is admitted and `principal` may act on it: null acts on any Run (an admin, the
 * system, authentication disabled); a principal only on a Run admitted for it (a Run admitted
 * without a principal, while authentication was off, is an admin's only).
 */
function mayAct(facts: RunFacts, principal: string | null): boolean {
  if (!facts.admitted) return false;
  return principal === null || facts.admitted.principal === principal;
}

/**
 * Records the user's cancel intent, once (K4): `[run.cancel.requested]`; `[]` when it was recorded
 * before (the same answer again, nothing appended, also after the Run settled `canceled`).
 * @throws RunNotFound when the Run was never admitted, or `principal` may not act on it.
 * @throws RunAlreadySettled when the Run has its settlement.
 */
function cancel(facts: RunFacts, cmd: CancelRun, now: Date): RunEvent[] {
  if (!mayAct(facts, cmd.principal) || !facts.lastEvent) throw new RunNotFound(`run ${facts.runId} not found`);
  if (facts.cancelRequested) return []; // a repeat gets the same answer, even once the cancel has settled the Run
  if (facts.settled) throw new RunAlreadySettled(facts.settled.outcome);
  const ctx = { ...contextFrom(facts.lastEvent), causationId: cmd.requestId };
  return [makeEvent('run.cancel.requested', ctx, 'cancel', { requestedBy: cmd.requestedBy, reason: cmd.reason }, now)];
}

/**
 * Records a user's answer to a pending wait, once (K10): `[wait.answered]`, the Run's wake.
 * `[]` for the same answer again (the caller answers 200 with the recorded answer).
 * @throws RunNotFound when the Run is unknown or `principal` may not act on it; WaitNotFound when the wait is unknown.
 * @throws WaitConflict when the wait was answered with another text.
 * @throws WaitNotPending when the wait expired (`now >= expiresAt`) or the Run settled, stopped
 *   (finished, fenced) or is being canceled: a stale answer appends nothing.
 */
function answerWait(facts: RunFacts, cmd: AnswerWait, now: Date): RunEvent[] {
  // ownership first: nothing of another principal's waits may show through (WaitNotFound says less than RunNotFound)
  if (!mayAct(facts, cmd.principal) || !facts.lastEvent) throw new RunNotFound(`run ${facts.runId} not found`);
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
        ...(cmd.principal ? { principal: cmd.principal } : {}),
      },
      now,
    ),
  ];
}
