/**
 * Admission's domain errors as RFC 9457 problems: each error of the decider (and a persistent
 * append conflict) answered by the service's one ProblemDetailsFilter from ADMISSION_PROBLEMS,
 * with the status, type, title, detail, extension members and headers the API documents
 * (docs/api.md "Errors").
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { Controller, Module, Post, type ArgumentsHost, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppendConflict } from '@runplane/eventlog';
import { ProblemDetailsFilter, quotaRefusalsTotal } from '@runplane/service-kit';
import { ADMISSION_PROBLEMS } from '../src/problems.js';
import { BudgetRefused } from '../src/budget.js';
import { QuotaExceeded } from '../src/decide.js';
// the decider's errors as one namespace: the table below names each error class once, in its row
import * as errors from '@runplane/app-admission';

interface Answer {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/** What the filter answers for `error` thrown by the route `route` (Express `req.route.path`). */
function answer(error: unknown, route = '/v1/runs/:runId/cancel', url = '/v1/runs/r1/cancel'): Answer {
  const out: Answer = { status: 0, headers: {}, body: {} };
  const res = {
    headersSent: false,
    status(code: number) {
      out.status = code;
      return res;
    },
    setHeader(name: string, value: string) {
      out.headers[name.toLowerCase()] = value;
    },
    json(body: Record<string, unknown>) {
      out.body = body;
    },
    end() {},
  };
  const req = { method: 'POST', originalUrl: url, route: { path: route } };
  const host = { switchToHttp: () => ({ getResponse: () => res, getRequest: () => req }) } as unknown as ArgumentsHost;
  new ProblemDetailsFilter(ADMISSION_PROBLEMS).catch(error, host);
  return out;
}

const problem = (status: number, code: string, title: string, detail: string, extra: Record<string, unknown> = {}) => ({
  type: `urn:runplane:problem:${code}`,
  title,
  status,
  detail,
  instance: '/v1/runs/r1/cancel',
  code,
  ...extra,
});

describe('admission: domain errors as problems (RFC 9457)', () => {
  it.each([
    [
      'MessageConflict',
      new errors.MessageConflict('m1', 'content'),
      409,
      'message_conflict',
      'clientMessageId "m1" was already admitted in this conversation with different content',
      { field: 'content' },
    ],
    ['ParentNotFound', new errors.ParentNotFound('r0', 'c1'), 404, 'not_found', 'run r0 not found in conversation c1', {}],
    [
      'ClarificationNotFound',
      new errors.ClarificationNotFound('run r0 of conversation c1 has no clarification q1'),
      404,
      'not_found',
      'run r0 of conversation c1 has no clarification q1',
      {},
    ],
    [
      'ContinuationNotEligible',
      new errors.ContinuationNotEligible('running', 'run r0 is not settled yet; only a settled Run can be continued'),
      409,
      'continuation_not_eligible',
      'run r0 is not settled yet; only a settled Run can be continued',
      { reason: 'running' },
    ],
    [
      'ClarificationAnswered',
      new errors.ClarificationAnswered('q1', { runId: 'r2', clientMessageId: 'm2' }),
      409,
      'clarification_answered',
      'clarification q1 was already answered by message "m2" (run r2)',
      { answeredBy: { runId: 'r2', clientMessageId: 'm2' } },
    ],
    ['ReconcileNotFound', new errors.ReconcileNotFound('run r1 has no tool call t1'), 404, 'not_found', 'run r1 has no tool call t1', {}],
    [
      'ReconcileConflict',
      new errors.ReconcileConflict('tool call t1 was already reconciled'),
      409,
      'reconcile_conflict',
      'tool call t1 was already reconciled',
      {},
    ],
    ['RunNotFound', new errors.RunNotFound('run r1 not found'), 404, 'not_found', 'run r1 not found', {}],
    [
      'RunAlreadySettled',
      new errors.RunAlreadySettled('completed'),
      409,
      'run_settled',
      'the Run is already settled (completed); a cancel changes nothing',
      { outcome: 'completed' },
    ],
    ['WaitNotFound', new errors.WaitNotFound('run r1 has no wait w1'), 404, 'not_found', 'run r1 has no wait w1', {}],
    ['WaitConflict', new errors.WaitConflict('wait w1 was answered differently'), 409, 'wait_conflict', 'wait w1 was answered differently', {}],
    [
      'WaitNotPending',
      new errors.WaitNotPending('expired', 'wait w1 expired at 2026-01-01T00:00:00.000Z'),
      409,
      'wait_not_pending',
      'wait w1 expired at 2026-01-01T00:00:00.000Z',
      { reason: 'expired' },
    ],
  ])('given %s, then its status, type, detail and extensions', (_name, error, status, code, detail, extensions) => {
    const a = answer(error);
    expect(a.status).toBe(status);
    expect(a.headers['content-type']).toBe('application/problem+json; charset=utf-8');
    expect(a.body).toMatchObject({ type: `urn:runplane:problem:${code}`, status, detail, code, instance: '/v1/runs/r1/cancel', ...extensions });
    expect(typeof a.body['title']).toBe('string');
  });

  it('given a money limit nothing can charge, then 400 invalid_body naming the field', () => {
    const a = answer(
      new BudgetRefused('budget.maxCost.currency', 'the model is priced in USD'),
      '/v1/conversations/:conversationId/messages',
      '/v1/runs/r1/cancel',
    );
    expect(a.status).toBe(400);
    expect(a.body).toEqual(
      problem(400, 'invalid_body', a.body['title'] as string, 'the message body is invalid: budget.maxCost.currency: the model is priced in USD', {
        issues: [{ path: 'budget.maxCost.currency', message: 'the model is priced in USD' }],
      }),
    );
  });

  it('given a quota refusal, then 429 quota_exceeded with Retry-After and the refusal as extensions, counted once', async () => {
    const count = async () => (await quotaRefusalsTotal.get()).values.find((v) => v.labels['quota'] === 'runs-per-hour')?.value ?? 0;
    const before = await count();
    const refusal = { quota: 'runs-per-hour', limit: 3, used: 3, retryAfterSeconds: 2940 } as const;
    const a = answer(new QuotaExceeded(refusal));
    expect(a.status).toBe(429);
    expect(a.headers['retry-after']).toBe('2940');
    expect(a.body).toEqual(
      problem(
        429,
        'quota_exceeded',
        'A quota of the principal is exceeded',
        'quota runs-per-hour exceeded: 3 of 3 Runs admitted in the last hour; retry in 2940 s',
        refusal,
      ),
    );
    expect(await count()).toBe(before + 1);
  });

  it.each([
    ['/v1/conversations/:conversationId/messages', 'admission could not be decided; retry with the same clientMessageId'],
    ['/v1/runs/:runId/tool-calls/:toolCallId/reconcile', 'the reconciliation could not be recorded; retry the same request'],
    ['/v1/runs/:runId/cancel', 'the cancel could not be recorded; retry'],
    ['/v1/runs/:runId/waits/:waitId', 'the answer could not be recorded; retry'],
  ])('given conflicts that persist on %s, then 503 admission_contended saying how to retry', (route, detail) => {
    const a = answer(new AppendConflict('rp.run.r1.admission', 3, 'wrong last sequence'), route);
    expect(a.status).toBe(503);
    expect(a.body).toEqual(problem(503, 'admission_contended', 'Admission contended', detail));
  });

  it('given an error that is not a domain error, then 500 internal_error as before (the table answers only its own)', () => {
    const a = answer(new Error('a bug'));
    expect(a.status).toBe(500);
    expect(a.body).toMatchObject({ code: 'internal_error', detail: 'internal error; see the service log' });
  });
});

/** A route of admission's shape whose command handler gave up on conflicts. */
@Controller('v1')
class ContendedController {
  @Post('runs/:runId/cancel')
  cancel(): never {
    throw new AppendConflict('rp.run.r1.admission', 3, 'wrong last sequence');
  }
}

@Module({ controllers: [ContendedController] })
class ContendedModule {}

describe('admission: the problems table behind a real Nest route', () => {
  let app: INestApplication;
  let url: string;
  beforeAll(async () => {
    app = await NestFactory.create(ContendedModule, { logger: false });
    app.useGlobalFilters(new ProblemDetailsFilter(ADMISSION_PROBLEMS));
    await app.listen(0, '127.0.0.1');
    url = await app.getUrl();
  });
  afterAll(async () => {
    await app?.close();
  });

  it('given a persistent conflict on POST /v1/runs/{runId}/cancel, then the route pattern picks its detail', async () => {
    const res = await fetch(`${url}/v1/runs/r1/cancel`, { method: 'POST' });
    expect(res.status).toBe(503);
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    expect(await res.json()).toEqual(problem(503, 'admission_contended', 'Admission contended', 'the cancel could not be recorded; retry'));
  });
});
