import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  HttpStatus,
  Inject,
  Param,
  Post,
  Query,
  Req,
  Res,
  UseGuards,
  type RawBodyRequest,
} from '@nestjs/common';
import type { Request, Response } from 'express';
import { randomUUID } from 'node:crypto';
import {
  conversationKey,
  Id,
  MessageParams,
  PostMessageBody,
  type MessageOutcome,
  ReconcileToolCallBody,
  CancelRunBody,
  AnswerWaitBody,
  type AnswerWaitResponse,
  type CancelRunResponse,
  type WaitView,
  type WaitsView,
  ToolNames,
  type PostMessageResponse,
  type ReconcileToolCallResponse,
  type RunEventOf,
  type RunView,
  type RunLimits,
  RUNS_PAGE_DEFAULT,
  RunsCursor,
  RunsQuery,
  type RunsPage,
} from '@runplane/contracts';
import { ConversationIndex, EventLog, QuotaReservations } from '@runplane/eventlog';
import {
  apiError,
  AuthGuard,
  badRequestFromZod,
  CurrentPrincipal,
  mayAccess,
  parseJsonBody,
  parseQuery,
  RunCommandHandler,
  type Principal,
} from '@runplane/service-kit';
import { admissionIds, clarificationReplyRunId, decide, type PostMessage } from './decide.js';
import type { RunFacts, WaitFacts } from '@runplane/run-facts';
import { RunReader, ADMISSION_SETTINGS, type AdmissionSettings } from './run-reader.js';
import {
  countsRuns,
  liveReservations,
  quotaRefusal,
  reservationsToConfirm,
  unlimited,
  withReservations,
  type QuotaLimits,
  type QuotaUsage,
  type Reservation,
} from './quota.js';
import { moneyLimitOf } from './budget.js';

/** The client's money limit as grant limits (`{ maxCost }`, K7), or none. @throws BudgetRefused (400 `invalid_body`) naming what cannot be granted. */
function moneyLimit(budget: PostMessageBody['budget'], settings: AdmissionSettings): Pick<RunLimits, 'maxCost'> {
  const maxCost = moneyLimitOf(budget, settings.model, settings.money ?? { ceilingMicros: 0 });
  return maxCost ? { maxCost } : {};
}

/** The opaque cursor of the page after `last` (base64url JSON of {@link RunsCursor}). */
export function encodeRunsCursor(last: RunView): string {
  return Buffer.from(JSON.stringify({ admittedAt: last.admittedAt, runId: last.runId } satisfies RunsCursor)).toString('base64url');
}

/**
 * The position a `?cursor=` of `GET /v1/runs` names.
 * @throws 400 `bad_request` (issue at `query.cursor`) when it is not a cursor this API gave.
 */
export function decodeRunsCursor(raw: string): RunsCursor {
  let parsed: unknown;
  try {
    parsed = /^[A-Za-z0-9_-]+$/.test(raw) ? JSON.parse(Buffer.from(raw, 'base64url').toString('utf8')) : null;
  } catch {
    parsed = null;
  }
  const cursor = RunsCursor.safeParse(parsed);
  if (!cursor.success)
    throw apiError(HttpStatus.BAD_REQUEST, 'bad_request', 'cursor is not one this API gave (pass the nextCursor of the previous page)', {
      issues: [{ path: 'query.cursor', message: 'not a cursor of GET /v1/runs' }],
    });
  return cursor.data;
}

/** Validates a path id. @throws 400 `bad_request` with the reason in `detail` and `issues`. */
function parseId(name: string, raw: string): string {
  const parsed = Id.safeParse(raw);
  if (!parsed.success) throw badRequestFromZod(name, parsed.error);
  return parsed.data;
}

/** A wait as the log says it is, judged at `now` (K10). */
export function waitView(facts: RunFacts, w: WaitFacts, now: Date): WaitView {
  const status: WaitView['status'] = w.answer
    ? 'answered'
    : now.getTime() >= Date.parse(w.expiresAt) || facts.fenced?.reason === 'wait-expired'
      ? 'expired'
      : facts.settled || facts.fenced || facts.finished
        ? 'closed'
        : 'pending';
  return {
    runId: facts.runId,
    waitId: w.waitId,
    toolCallId: w.toolCallId,
    question: w.question,
    status,
    openedAt: w.openedAt,
    expiresAt: w.expiresAt,
    answer: w.answer?.answer ?? null,
    answeredBy: w.answer?.answeredBy ?? null,
    answeredAt: w.answer?.at ?? null,
  };
}

function responseOf(event: RunEventOf<'run.admitted'>, admission: 'admitted' | 'existing'): PostMessageResponse {
  return {
    conversationId: event.conversationId,
    clientMessageId: event.data.message.clientMessageId,
    messageId: event.data.message.messageId,
    runId: event.runId,
    admittedAt: event.occurredAt,
    admission,
    link: event.data.link ?? null,
  };
}

const FATAL_UTF8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Refuses a body whose bytes are not UTF-8 (400 `bad_request`): the JSON parser would read them
 * with U+FFFD substituted, and the Run would answer a question nobody asked.
 */
export function assertUtf8Body(req: RawBodyRequest<Request>): void {
  if (!req.rawBody) return;
  try {
    FATAL_UTF8.decode(req.rawBody);
  } catch {
    throw apiError(HttpStatus.BAD_REQUEST, 'bad_request', 'the request body is not valid UTF-8', {
      issues: [{ path: '(body)', message: 'bytes that are not UTF-8' }],
    });
  }
}

/** A message's Run as its log says: ids, link and status (K1 reconciliation by id). */
function outcomeOf(facts: RunFacts): MessageOutcome {
  const a = facts.admitted!;
  return {
    conversationId: facts.conversationId,
    clientMessageId: a.message.clientMessageId,
    messageId: a.message.messageId,
    runId: facts.runId,
    admittedAt: a.at,
    link: a.link ?? null,
    status: facts.settled ? 'settled' : facts.turns.length > 0 ? 'running' : 'admitted',
    outcome: facts.settled?.outcome ?? null,
  };
}

/**
 * The user a request names in `X-Runplane-User` (trimmed; null when absent or blank).
 * @throws 400 `bad_request` when it is longer than 200 characters (never silently cut: the name
 *   is recorded in the Run's log as who canceled or answered).
 */
export function userOf(header: string | undefined): string | null {
  const user = header?.trim() ?? '';
  if (user.length > 200) {
    throw apiError(HttpStatus.BAD_REQUEST, 'bad_request', `X-Runplane-User is ${user.length} characters long; at most 200`, {
      issues: [{ path: 'X-Runplane-User', message: 'at most 200 characters' }],
    });
  }
  return user || null;
}

/** 404 for a Run that does not exist or that the caller may not see: the same body either way (nothing leaks). */
export const runNotFound = (runId: string) => apiError(HttpStatus.NOT_FOUND, 'not_found', `run ${runId} not found`);

/**
 * Who a request acts as, for the log (`requestedBy`, `answeredBy`): the verified principal; with
 * authentication disabled, the `X-Runplane-User` header (ignored when authentication is on).
 */
export function actorOf(principal: Principal, header: string | undefined): string | null {
  return principal.unauthenticated ? userOf(header) : principal.sub;
}

/** The key of the caller's Conversation `conversationId` (per principal with authentication on; contracts `conversationKey`). */
export function keyOf(conversationId: string, principal: Principal): string {
  return conversationKey(conversationId, principal.unauthenticated ? null : principal.sub);
}

/** Whose Runs the caller may act on, for the decider: only its own (its `sub`), or any (null) for an admin or with authentication disabled. */
export function actingFor(principal: Principal): string | null {
  return principal.admin ? null : principal.sub;
}

/**
 * The HTTP API of admission. Every route takes a bearer token ({@link AuthGuard}); conversation ids
 * are per principal ({@link keyOf}: the same id of two principals is two Conversations), a Run
 * belongs to the principal it was admitted for, and another principal gets the same 404 as for an
 * unknown id (an admin, `runplane:admin`, may read and act on any Run and reconcile tool calls).
 */
@Controller('v1')
@UseGuards(AuthGuard)
export class AdmissionController {
  constructor(
    private readonly log: EventLog,
    private readonly runs: RunReader,
    @Inject(ADMISSION_SETTINGS) private readonly settings: AdmissionSettings,
    private readonly conversations: ConversationIndex,
    private readonly reservations: QuotaReservations,
    private readonly commands: RunCommandHandler,
  ) {}

  /**
   * Reserves a new Run against its principal's count quotas before it is appended (eventlog
   * `QuotaReservations`): by compare-and-set on the principal's entry, so of parallel admissions
   * (one replica or several) that read the same usage only one reserves, and the others read its
   * reservation and count it. Nothing is reserved when the usage with the reservations is already
   * over a quota (the decider refuses the new Run) or the Run is reserved already.
   * @returns the usage the decider counts (projections + reservations), and whether this call reserved the Run.
   * @throws what the KV or the log throws (the request fails; nothing was appended).
   */
  private async reserve(
    principal: string | null,
    runId: string,
    limits: QuotaLimits,
    projected: { usage: QuotaUsage; known: ReadonlySet<string> },
  ): Promise<{ usage: QuotaUsage; reserved: boolean }> {
    let usage = projected.usage;
    // what the log said of a reservation's Run, kept across compare-and-set retries: read once per call
    const admittedInLog = new Map<string, Promise<boolean>>();
    const reserved = await this.reservations.change(principal, async (runs) => {
      const now = new Date();
      const gone = await this.missingFromLog(reservationsToConfirm(runs, projected.known, now), admittedInLog);
      // this Run's own reservation (a parallel request of the same message made it) is not another Run
      usage = withReservations(
        projected.usage,
        projected.known,
        runs.filter((r) => r.runId !== runId),
        gone,
        now,
      );
      if (projected.known.has(runId) || runs.some((r) => r.runId === runId) || quotaRefusal(limits, usage, now)) return null;
      return [...liveReservations(runs, projected.known, gone, now), { runId, reservedAt: now.toISOString() }];
    });
    return { usage, reserved };
  }

  /**
   * Of `reservations`, the ids of those whose Run has no `run.admitted` in the log (left by a crash
   * or a failed admission); `seen` keeps each Run's answer, so a retry reads the log only for new ones.
   */
  private async missingFromLog(reservations: readonly Reservation[], seen: Map<string, Promise<boolean>>): Promise<Set<string>> {
    const admitted = (runId: string) => {
      let found = seen.get(runId);
      if (!found) seen.set(runId, (found = this.log.lastOf(runId, 'admission').then((e) => e !== null)));
      return found;
    };
    const missing = await Promise.all(reservations.map(async (r) => ((await admitted(r.runId)) ? null : r.runId)));
    return new Set(missing.filter((id): id is string => id !== null));
  }

  /**
   * Removes this request's reservation when its Run was not admitted (refused, conflicting, or the
   * append failed). A Run the log shows admitted (a parallel request of the same message appended
   * it) keeps it. Best effort: a reservation left behind is dropped once found missing from the log.
   */
  private async release(principal: string | null, runId: string): Promise<void> {
    try {
      if (await this.log.lastOf(runId, 'admission')) return;
      await this.reservations.change(principal, async (runs) => (runs.some((r) => r.runId === runId) ? runs.filter((r) => r.runId !== runId) : null));
    } catch {
      // left for missingFromLog to find
    }
  }

  /**
   * `POST /v1/conversations/{conversationId}/messages` `{clientMessageId, content,
   * continuationOfRunId?, replyTo?}`: 201 new Message and Run; 200 the same id, text and parent
   * again (nothing appended); 409 `message_conflict` the same id with other text, parent or reply
   * (`field` names it), `continuation_not_eligible` (`reason`), `clarification_answered`; 404 no
   * such parent Run or clarification in this conversation; 400 a bad body (zod reason, bytes that
   * are not UTF-8); 429 `quota_exceeded` a new Run over a quota of the principal (`quota`, `limit`,
   * `used`, `retryAfterSeconds`, header `Retry-After`; nothing appended; a repeat is never refused).
   * K1, K2, K3. The parent's facts are read from its log, never the projection.
   * After the append the Run is added to the conversation index (a repeat repairs a missing entry).
   */
  @Post('conversations/:conversationId/messages')
  @HttpCode(201)
  async postMessage(
    @Param('conversationId') rawConversationId: string,
    @Headers('content-type') contentType: string | undefined,
    @Body() body: unknown,
    @Req() req: RawBodyRequest<Request>,
    @Res({ passthrough: true }) res: Response,
    @CurrentPrincipal() principal: Principal,
  ): Promise<PostMessageResponse> {
    assertUtf8Body(req);
    const message = parseJsonBody(PostMessageBody, body, contentType, 'the message body');
    const conversationId = parseId('conversationId', rawConversationId);
    // conversation ids are per principal: another principal's Conversation of the same id is another Conversation
    const key = keyOf(conversationId, principal);
    const ordinaryRunId = admissionIds(key, message.clientMessageId).runId;
    const runId = message.replyTo ? clarificationReplyRunId(key, message.replyTo.clarificationId) : ordinaryRunId;
    const quotas = this.settings.quotas && !unlimited(this.settings.quotas) ? this.settings.quotas : null;
    // every principal, admins too; with authentication disabled every caller is one principal (Runs without one)
    const quotaPrincipal = principal.unauthenticated ? null : principal.sub;
    const [indexed, continuationParent, replyParent, ordinaryAdmitted, projected, admittedBefore] = await Promise.all([
      this.conversations.read(key),
      message.continuationOfRunId ? this.commands.folds.read(message.continuationOfRunId) : null,
      message.replyTo ? this.commands.folds.read(message.replyTo.runId) : null,
      message.replyTo ? this.log.lastOf(ordinaryRunId, 'admission') : null,
      quotas ? this.runs.quotaUsage(quotaPrincipal, new Date(), quotas) : null,
      quotas && countsRuns(quotas) ? this.log.lastOf(runId, 'admission') : null,
    ]);
    const reservation =
      quotas && projected && countsRuns(quotas) && !admittedBefore ? await this.reserve(quotaPrincipal, runId, quotas, projected) : null;
    const usage = reservation?.usage ?? projected?.usage;
    const byIndex = indexed.runs.find((r) => r.clientMessageId === message.clientMessageId)?.runId ?? null;
    const cmd: PostMessage = {
      type: 'PostMessage',
      conversationId,
      clientMessageId: message.clientMessageId,
      content: message.content,
      grant: { tools: [...ToolNames, ...(this.settings.testTools ?? []), ...(this.settings.parkingTools ?? [])], model: this.settings.model },
      limits: { ...this.settings.limits, ...moneyLimit(message.budget, this.settings) },
      requestId: randomUUID(),
      ...(principal.unauthenticated ? {} : { principal: principal.sub }),
      history: indexed.runs.map((r) => r.runId),
      messageRunElsewhere: ordinaryAdmitted && ordinaryRunId !== runId ? ordinaryRunId : byIndex,
      ...(message.continuationOfRunId ? { continuation: { parentRunId: message.continuationOfRunId, parent: continuationParent } } : {}),
      ...(message.replyTo ? { reply: { ...message.replyTo, parent: replyParent } } : {}),
      ...(quotas && usage ? { quota: { limits: quotas, usage } } : {}),
    };
    let result;
    try {
      result = await this.commands.handle(runId, (facts, now) => decide(facts, cmd, now));
    } catch (e) {
      if (reservation?.reserved) await this.release(quotaPrincipal, runId);
      throw e; // a domain error is answered from ADMISSION_PROBLEMS (problems.ts)
    }
    const admitted = result.appended.find((s) => s.event.type === 'run.admitted');
    if (reservation?.reserved && !admitted) await this.release(quotaPrincipal, runId);
    const facts = result.facts;
    const at = admitted ? admitted.event.occurredAt : facts.admitted!.at;
    // after the append (the log is the truth): a crash before this leaves the entry to the next repeat
    await this.conversations.add(key, { runId, clientMessageId: message.clientMessageId, admittedAt: at });
    if (admitted?.event.type === 'run.admitted') return responseOf(admitted.event, 'admitted');
    // decided nothing: this message was admitted before, the same (K1)
    res.status(HttpStatus.OK);
    return {
      conversationId: facts.conversationId,
      clientMessageId: facts.admitted!.message.clientMessageId,
      messageId: facts.admitted!.message.messageId,
      runId,
      admittedAt: facts.admitted!.at,
      admission: 'existing',
      link: facts.admitted!.link ?? null,
    };
  }

  /**
   * `GET /v1/conversations/{conversationId}/messages/{clientMessageId}`: what became of a message,
   * by its id, from the Run's log (K1: a client that lost the answer reconciles by id, never by
   * text). The Run is the one derived from the id, or for a clarification answer the one the
   * conversation index maps the id to. 404 when no such message was admitted. Reads never append.
   */
  @Get('conversations/:conversationId/messages/:clientMessageId')
  async getMessage(
    @Param('conversationId') rawConversationId: string,
    @Param('clientMessageId') rawClientMessageId: string,
    @CurrentPrincipal() principal: Principal,
  ): Promise<MessageOutcome> {
    const parsed = MessageParams.safeParse({ conversationId: rawConversationId, clientMessageId: rawClientMessageId });
    if (!parsed.success) throw badRequestFromZod('path', parsed.error);
    const { conversationId, clientMessageId } = parsed.data;
    const key = keyOf(conversationId, principal);
    const derived = admissionIds(key, clientMessageId).runId;
    let facts = await this.commands.folds.read(derived);
    if (!facts.admitted) {
      const indexed = await this.conversations.runOf(key, clientMessageId);
      if (indexed) facts = await this.commands.folds.read(indexed.runId);
    }
    if (
      !facts.admitted ||
      facts.admitted.message.clientMessageId !== clientMessageId ||
      facts.conversationId !== conversationId ||
      !mayAccess(principal, facts.admitted.principal)
    )
      throw apiError(HttpStatus.NOT_FOUND, 'not_found', `no message "${clientMessageId}" was admitted in conversation ${conversationId}`);
    return outcomeOf(facts);
  }

  /**
   * `POST /v1/runs/{runId}/tool-calls/{toolCallId}/reconcile` `{outcome, evidence, operator?}`: an
   * operator's reconciliation of an `unknown` call, recorded as `tool.call.reconciled` (K5).
   * 201 recorded; 200 the same again (nothing appended); 409 not `unknown` or reconciled
   * differently; 404 no such Run or call; 400 a bad body or no operator. Dispatches nothing.
   */
  @Post('runs/:runId/tool-calls/:toolCallId/reconcile')
  @HttpCode(201)
  async reconcileToolCall(
    @Param('runId') rawRunId: string,
    @Param('toolCallId') rawToolCallId: string,
    @Headers('content-type') contentType: string | undefined,
    @Headers('x-runplane-operator') operatorHeader: string | undefined,
    @Body() body: unknown,
    @Res({ passthrough: true }) res: Response,
    @CurrentPrincipal() principal: Principal,
  ): Promise<ReconcileToolCallResponse> {
    // an operator action (K5): only for the admin scope
    if (!principal.admin)
      throw apiError(HttpStatus.FORBIDDEN, 'forbidden', 'reconciling a tool call needs the runplane:admin scope', {
        extensions: { requiredScope: 'runplane:admin' },
      });
    const reconciliation = parseJsonBody(ReconcileToolCallBody, body, contentType, 'the reconciliation body');
    const runId = parseId('runId', rawRunId);
    const toolCallId = parseId('toolCallId', rawToolCallId);
    // the operator is the token's subject when authentication is on (never a name the caller picks)
    const operator = principal.unauthenticated ? (reconciliation.operator ?? operatorHeader?.trim()) : principal.sub;
    if (!operator || operator.length > 200) {
      throw apiError(HttpStatus.BAD_REQUEST, 'invalid_body', 'name the operator (body `operator` or header X-Runplane-Operator, 1-200 characters)', {
        issues: [{ path: 'operator', message: 'required: body field or X-Runplane-Operator header' }],
      });
    }
    const cmd = {
      type: 'ReconcileToolCall',
      toolCallId,
      outcome: reconciliation.outcome,
      evidence: reconciliation.evidence,
      operator,
      requestId: randomUUID(),
    } as const;
    const result = await this.commands.handle(runId, (facts, now) => decide(facts, cmd, now));
    const recorded = result.appended.find((s) => s.event.type === 'tool.call.reconciled');
    const r =
      recorded?.event.type === 'tool.call.reconciled'
        ? { ...recorded.event.data, at: recorded.event.occurredAt }
        : result.facts.toolCalls.get(toolCallId)!.reconciliation!;
    if (!recorded) res.status(HttpStatus.OK);
    return {
      runId,
      toolCallId,
      name: r.name,
      outcome: r.outcome,
      evidence: r.evidence,
      operator: r.operator,
      reconciledAt: r.at,
      reconciliation: recorded ? 'recorded' : 'existing',
    };
  }

  /**
   * `POST /v1/runs/{runId}/cancel` `{reason?}`: records the user's cancel intent (K4). 202 with the
   * same answer whether recorded now or before (nothing appended the second time); 404 no such
   * Run; 409 `run_settled` with the Run's `outcome` when it is settled already; 400 a bad body.
   */
  @Post('runs/:runId/cancel')
  @HttpCode(202)
  async cancelRun(
    @Param('runId') rawRunId: string,
    @Headers('content-type') contentType: string | undefined,
    @Headers('x-runplane-user') user: string | undefined,
    @Body() body: unknown,
    @CurrentPrincipal() principal: Principal,
  ): Promise<CancelRunResponse> {
    const runId = parseId('runId', rawRunId);
    const request = parseJsonBody(CancelRunBody, body, contentType, 'the cancel body', { optional: true });
    const cmd = {
      type: 'CancelRun',
      // who owns the Run is decided with the cancel, on the facts its append is conditional on (never from an earlier read)
      principal: actingFor(principal),
      requestedBy: actorOf(principal, user),
      reason: request.reason || null,
      requestId: randomUUID(),
    } as const;
    const result = await this.commands.handle(runId, (facts, now) => decide(facts, cmd, now));
    const recorded = result.appended.find((s) => s.event.type === 'run.cancel.requested');
    const requestedAt = recorded ? recorded.event.occurredAt : result.facts.cancelRequested!.at;
    return { runId, status: 'cancel-requested', requestedAt };
  }

  /**
   * `POST /v1/runs/{runId}/waits/{waitId}` `{answer}`: a user's answer to the Run's pending
   * question (K10), recorded once as `wait.answered`, which wakes the Run. 202 accepted now; 200
   * the same answer again (nothing appended); 409 `wait_conflict` another answer was recorded,
   * `wait_not_pending` the wait expired or the Run settled, stopped or is being canceled; 404 no
   * such Run or wait; 400 a blank answer.
   */
  @Post('runs/:runId/waits/:waitId')
  @HttpCode(202)
  async answerWait(
    @Param('runId') rawRunId: string,
    @Param('waitId') rawWaitId: string,
    @Headers('content-type') contentType: string | undefined,
    @Headers('x-runplane-user') user: string | undefined,
    @Body() body: unknown,
    @Res({ passthrough: true }) res: Response,
    @CurrentPrincipal() principal: Principal,
  ): Promise<AnswerWaitResponse> {
    const request = parseJsonBody(AnswerWaitBody, body, contentType, 'the answer body');
    const runId = parseId('runId', rawRunId);
    const waitId = parseId('waitId', rawWaitId);
    const cmd = {
      type: 'AnswerWait',
      principal: actingFor(principal),
      waitId,
      answer: request.answer,
      answeredBy: actorOf(principal, user),
      requestId: randomUUID(),
    } as const;
    const result = await this.commands.handle(runId, (facts, now) => decide(facts, cmd, now));
    const recorded = result.appended.some((s) => s.event.type === 'wait.answered');
    if (!recorded) res.status(HttpStatus.OK);
    const facts = recorded ? await this.commands.folds.read(runId) : result.facts; // with the answer just recorded
    return { ...waitView(facts, facts.waits.get(waitId)!, new Date()), recording: recorded ? 'recorded' : 'existing' };
  }

  /** `GET /v1/runs/{runId}/waits`: every wait of the Run, read from its log (reads never append, K11). 404 no such Run. */
  @Get('runs/:runId/waits')
  async listWaits(@Param('runId') rawRunId: string, @CurrentPrincipal() principal: Principal): Promise<WaitsView> {
    const runId = parseId('runId', rawRunId);
    const facts = await this.commands.folds.read(runId);
    if (!facts.admitted || !mayAccess(principal, facts.admitted.principal)) throw runNotFound(runId);
    const now = new Date();
    return { runId, waits: [...facts.waits.values()].map((w) => waitView(facts, w, now)) };
  }

  /**
   * `GET /v1/runs?limit=&cursor=`: the caller's Runs from the projections, newest admission first
   * (contracts `RunsPage`): the principal's own Runs (its `sub` on `run.admitted`), every Run for
   * an admin or with authentication disabled. Projections follow the log: a Run admitted a moment
   * ago may not be listed yet. 400 for a `limit` outside 1..100 or a cursor this API did not give.
   */
  @Get('runs')
  async listRuns(@Query() query: unknown, @CurrentPrincipal() principal: Principal): Promise<RunsPage> {
    const parsed = parseQuery(RunsQuery, query);
    const limit = parsed.limit ?? RUNS_PAGE_DEFAULT;
    const after = parsed.cursor ? decodeRunsCursor(parsed.cursor) : null;
    const { runs, more } = await this.runs.list({ principal: principal.admin ? null : principal.sub, limit, after });
    return { runs: runs.map((r) => viewFor(principal, r)), nextCursor: more && runs.length > 0 ? encodeRunsCursor(runs[runs.length - 1]!) : null };
  }

  /**
   * `GET /v1/runs/{runId}`: the Run's projection. 404 `not_found` when no such Run was admitted;
   * 404 `not_projected_yet` with `Retry-After: 1` when it was admitted but the projector has not
   * applied it yet (projections follow the log).
   */
  @Get('runs/:runId')
  async getRun(@Param('runId') rawRunId: string, @CurrentPrincipal() principal: Principal): Promise<RunView> {
    const runId = parseId('runId', rawRunId);
    // ownership from the log's admission, never from the projection (K11: projections follow the log)
    if (!principal.admin) {
      const facts = await this.commands.folds.read(runId);
      if (!facts.admitted || !mayAccess(principal, facts.admitted.principal)) throw runNotFound(runId);
    }
    const view = await this.runs.get(runId);
    if (view) return viewFor(principal, view);
    if (await this.log.lastOf(runId, 'admission')) {
      throw apiError(HttpStatus.NOT_FOUND, 'not_projected_yet', `run ${runId} is admitted but not projected yet; retry shortly`, {
        headers: { 'Retry-After': '1' },
      });
    }
    throw runNotFound(runId);
  }
}

/** A Run's view as `caller` may see it: whose Run it is (`principal`) only in an admin's (contracts `RunView`). */
function viewFor(caller: Principal, view: RunView): RunView {
  if (caller.admin) return view;
  const { principal: _whose, ...rest } = view;
  return rest;
}
