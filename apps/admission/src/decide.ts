/**
 * Admission rules (K1, first cut). The Message and Run ids are derived from the conversation and
 * the client's message id, so the same `clientMessageId` always names the same Run; the first
 * admission is the only event on the Run's `admission` subject (appended expecting sequence 0),
 * which makes concurrent duplicates produce exactly one Run.
 * - new id: admit one Message and one Run (`run.admitted`);
 * - same id, same text: return the existing Message and Run, append nothing;
 * - same id, other text: conflict, change nothing.
 */
import { deterministicId, makeEvent, sha256Hex, type RunEvent, type RunGrant, type RunLimits } from '@runplane/contracts';
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

export type AdmissionTrigger = PostMessage;

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
    default:
      return unknownTrigger('admission', trigger.type);
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
