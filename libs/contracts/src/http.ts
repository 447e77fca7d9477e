/** HTTP bodies of the admission and publication APIs (zod is their single source). */
import { z } from 'zod';
import { Id, Outcome, ReceiptStatus } from './events.js';

/** `POST /v1/conversations/{conversationId}/messages` body. */
export const PostMessageBody = z
  .object({
    clientMessageId: z
      .string()
      .min(1)
      .max(200)
      .regex(/^[A-Za-z0-9._:-]+$/, 'clientMessageId uses letters, digits, ".", "_", ":" and "-" only'),
    content: z
      .string()
      .max(20_000, 'content is at most 20000 characters')
      .refine((s) => s.trim().length > 0, 'content must not be blank')
      // eslint-disable-next-line no-control-regex -- matching control characters is the point
      .refine((s) => !/[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/.test(s), 'content must not contain control characters (other than tab and newlines)')
      .refine((s) => s.isWellFormed(), 'content must be well-formed Unicode (no lone surrogates)'),
  })
  .strict();
export type PostMessageBody = z.infer<typeof PostMessageBody>;

/** 201 (admitted now) or 200 (the same message was already admitted: K1). */
export const PostMessageResponse = z.object({
  conversationId: Id,
  clientMessageId: z.string(),
  messageId: Id,
  runId: Id,
  admittedAt: z.string().datetime(),
  /** `admitted` for a new admission, `existing` for an idempotent repeat. */
  admission: z.enum(['admitted', 'existing']),
});
export type PostMessageResponse = z.infer<typeof PostMessageResponse>;

export const ErrorBody = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  }),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

/** `GET /v1/runs/{runId}`: the Run projection. */
export const RunView = z.object({
  runId: Id,
  conversationId: Id,
  messageId: Id,
  clientMessageId: z.string(),
  question: z.string(),
  status: z.enum(['admitted', 'running', 'finishing', 'settled']),
  outcome: Outcome.nullable(),
  reason: z.string().nullable(),
  modelRequests: z.number().int(),
  toolCalls: z.number().int(),
  passages: z.number().int(),
  admittedAt: z.string().datetime(),
  settledAt: z.string().datetime().nullable(),
  /** Stream sequence of the last event applied to this projection. */
  lastSeq: z.number().int(),
});
export type RunView = z.infer<typeof RunView>;

export const ToolCallView = z.object({
  toolCallId: Id,
  name: z.string(),
  status: z.enum(['proposed', 'dispatched']).or(ReceiptStatus),
});

/** `GET /v1/runs/{runId}/answer`: the committed passages, in order, latest version of each. */
export const AnswerView = z.object({
  runId: Id,
  passages: z.array(z.object({ passageId: Id, index: z.number().int(), version: z.number().int(), text: z.string() })),
  text: z.string(),
  /** True once publication recorded `answer.published`. */
  complete: z.boolean(),
  outcome: Outcome.nullable(),
});
export type AnswerView = z.infer<typeof AnswerView>;

/** Turns a zod error into the 400 body's issue list. */
export function zodIssues(error: z.ZodError): { path: string; message: string }[] {
  return error.issues.map((i) => ({ path: i.path.join('.') || '(body)', message: i.message }));
}
