/**
 * Admission's domain errors as RFC 9457 problems (docs/api.md, "Errors"): the one table the
 * service's ProblemDetailsFilter answers them from (`ServiceSpec.problems`). The routes let the
 * decider's errors, and the command handler's persistent conflict, propagate unchanged.
 */
import { HttpStatus } from '@nestjs/common';
import { AppendConflict } from '@runplane/eventlog';
import { apiError, problemFor, quotaRefusalsTotal, type ProblemRequest, type ProblemTable } from '@runplane/service-kit';
import { BudgetRefused } from './budget.js';
import {
  ClarificationAnswered,
  ClarificationNotFound,
  ContinuationNotEligible,
  MessageConflict,
  ParentNotFound,
  QuotaExceeded,
  ReconcileConflict,
  ReconcileNotFound,
  RunAlreadySettled,
  RunNotFound,
  WaitConflict,
  WaitNotFound,
  WaitNotPending,
} from './decide.js';

/**
 * What a client is told when conflicts on the Run persisted past the command handler's retries
 * (503 `admission_contended`), by the route's pattern: how to retry what it asked.
 */
export const CONTENDED_DETAIL: Readonly<Record<string, string>> = {
  '/v1/conversations/:conversationId/messages': 'admission could not be decided; retry with the same clientMessageId',
  '/v1/runs/:runId/tool-calls/:toolCallId/reconcile': 'the reconciliation could not be recorded; retry the same request',
  '/v1/runs/:runId/cancel': 'the cancel could not be recorded; retry',
  '/v1/runs/:runId/waits/:waitId': 'the answer could not be recorded; retry',
};

/** The 503 `admission_contended` of a request (its route's {@link CONTENDED_DETAIL}). */
function contended(request: ProblemRequest) {
  const detail = CONTENDED_DETAIL[request.route?.path ?? ''] ?? 'the request could not be recorded; retry';
  return apiError(HttpStatus.SERVICE_UNAVAILABLE, 'admission_contended', detail);
}

/**
 * Admission's domain errors and their problems (status, `code`, `detail` and extension members).
 * Answering a {@link QuotaExceeded} counts it (`runplane_quota_refusals_total`).
 */
export const ADMISSION_PROBLEMS: ProblemTable = [
  problemFor(MessageConflict, (e) => apiError(HttpStatus.CONFLICT, 'message_conflict', e.message, { extensions: { field: e.field } })),
  problemFor(ParentNotFound, (e) => apiError(HttpStatus.NOT_FOUND, 'not_found', e.message)),
  problemFor(ClarificationNotFound, (e) => apiError(HttpStatus.NOT_FOUND, 'not_found', e.message)),
  problemFor(ContinuationNotEligible, (e) =>
    apiError(HttpStatus.CONFLICT, 'continuation_not_eligible', e.message, { extensions: { reason: e.reason } }),
  ),
  problemFor(ClarificationAnswered, (e) =>
    apiError(HttpStatus.CONFLICT, 'clarification_answered', e.message, { extensions: { answeredBy: e.answeredBy } }),
  ),
  problemFor(QuotaExceeded, (e) => {
    quotaRefusalsTotal.inc({ quota: e.refusal.quota });
    return apiError(HttpStatus.TOO_MANY_REQUESTS, 'quota_exceeded', e.message, {
      headers: { 'Retry-After': String(e.refusal.retryAfterSeconds) },
      extensions: { ...e.refusal },
    });
  }),
  problemFor(BudgetRefused, (e) =>
    apiError(HttpStatus.BAD_REQUEST, 'invalid_body', `the message body is invalid: ${e.path}: ${e.message}`, {
      issues: [{ path: e.path, message: e.message }],
    }),
  ),
  problemFor(ReconcileNotFound, (e) => apiError(HttpStatus.NOT_FOUND, 'not_found', e.message)),
  problemFor(ReconcileConflict, (e) => apiError(HttpStatus.CONFLICT, 'reconcile_conflict', e.message)),
  // the decider's message is the route's `run <runId> not found`, the same body as for a Run the caller may not see
  problemFor(RunNotFound, (e) => apiError(HttpStatus.NOT_FOUND, 'not_found', e.message)),
  problemFor(RunAlreadySettled, (e) => apiError(HttpStatus.CONFLICT, 'run_settled', e.message, { extensions: { outcome: e.outcome } })),
  problemFor(WaitNotFound, (e) => apiError(HttpStatus.NOT_FOUND, 'not_found', e.message)),
  problemFor(WaitConflict, (e) => apiError(HttpStatus.CONFLICT, 'wait_conflict', e.message)),
  problemFor(WaitNotPending, (e) => apiError(HttpStatus.CONFLICT, 'wait_not_pending', e.message, { extensions: { reason: e.reason } })),
  problemFor(AppendConflict, (_e, request) => contended(request)),
];
