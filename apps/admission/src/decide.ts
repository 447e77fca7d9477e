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
  deterministicId,
  makeEvent,
  sha256Hex,
  type RunEventOf,
  type RunGrant,
  type RunLimits,
} from '@runplane/contracts';

export interface AdmitCommand {
  conversationId: string;
  clientMessageId: string;
  content: string;
  grant: RunGrant;
  /** Limits without the deadline; the deadline is `now + deadlineSeconds`. */
  limits: Omit<RunLimits, 'deadlineAt'> & { deadlineSeconds: number };
  now: Date;
  /** Id of the HTTP request, recorded as the admission's causation. */
  requestId: string;
}

export type AdmissionDecision =
  | { kind: 'admit'; event: RunEventOf<'run.admitted'> }
  | { kind: 'existing'; event: RunEventOf<'run.admitted'> }
  | { kind: 'conflict'; event: RunEventOf<'run.admitted'>; reason: string };

/** `{messageId, runId}` for a client message id within a conversation (stable UUIDs). */
export function admissionIds(conversationId: string, clientMessageId: string): { messageId: string; runId: string } {
  return {
    messageId: deterministicId('message', conversationId, clientMessageId),
    runId: deterministicId('run', conversationId, clientMessageId),
  };
}

/** Decides an admission given the Run's existing admission event (or null). */
export function decideAdmission(existing: RunEventOf<'run.admitted'> | null, cmd: AdmitCommand): AdmissionDecision {
  const contentSha256 = sha256Hex(cmd.content);
  if (existing) {
    if (existing.data.message.contentSha256 === contentSha256) return { kind: 'existing', event: existing };
    return {
      kind: 'conflict',
      event: existing,
      reason: `clientMessageId "${cmd.clientMessageId}" was already admitted in this conversation with different content`,
    };
  }
  const { messageId, runId } = admissionIds(cmd.conversationId, cmd.clientMessageId);
  const { deadlineSeconds, ...limits } = cmd.limits;
  const event = makeEvent(
    'run.admitted',
    { runId, conversationId: cmd.conversationId, correlationId: messageId, causationId: cmd.requestId },
    'admission',
    {
      message: { messageId, clientMessageId: cmd.clientMessageId, content: cmd.content, contentSha256 },
      grant: cmd.grant,
      limits: { ...limits, deadlineAt: new Date(cmd.now.getTime() + deadlineSeconds * 1000).toISOString() },
    },
    cmd.now,
  );
  return { kind: 'admit', event };
}
