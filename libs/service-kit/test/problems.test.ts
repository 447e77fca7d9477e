import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { JetStreamApiError } from '@nats-io/jetstream';
import { z } from 'zod';
import { BatchNotStored } from '@runplane/kit';
import { ProblemDetails, ProblemTitles, RunEventsQuery, RunsQuery } from '@runplane/contracts';
import { apiError, ApiError, badRequestFromZod, dependencyUnavailable, parseQuery, unavailableDependency } from '../src/problems.js';

describe('apiError', () => {
  it('builds problem details with type, title, status, detail, instance, code and issues', () => {
    const e = apiError(400, 'invalid_body', 'the message body is invalid', { issues: [{ path: 'content', message: 'blank' }] });
    const body = e.problem('/v1/x');
    expect(ProblemDetails.parse(body)).toEqual({
      type: 'urn:runplane:problem:invalid_body',
      title: 'The request body is invalid',
      status: 400,
      detail: 'the message body is invalid',
      instance: '/v1/x',
      code: 'invalid_body',
      issues: [{ path: 'content', message: 'blank' }],
    });
    expect(e.getStatus()).toBe(400);
  });

  it('names the wrong input in a zod 400 and keeps the extension members of a 503', () => {
    const zodError = z.object({ a: z.string() }).safeParse({ a: ['x'] }).error!;
    expect(badRequestFromZod('query', zodError).problem()).toMatchObject({ code: 'bad_request', issues: [{ path: 'query.a' }] });
    const down = dependencyUnavailable('PostgreSQL', undefined, { postgres: 'down' });
    expect(down.getStatus()).toBe(503);
    expect(down.extras.headers).toEqual({ 'Retry-After': '2' });
    expect(down.problem()).toMatchObject({ postgres: 'down', status: 503 });
  });
});

describe('the problem codes', () => {
  const root = fileURLToPath(new URL('../../..', import.meta.url));
  const sources = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((d) =>
      d.isDirectory() ? sources(join(dir, d.name)) : d.name.endsWith('.ts') && !d.name.endsWith('.d.ts') ? [join(dir, d.name)] : [],
    );
  const raised = new Set(
    ['apps', 'libs'].flatMap((top) =>
      readdirSync(join(root, top))
        .map((project) => join(root, top, project, 'src'))
        .filter((src) => {
          try {
            return readdirSync(src).length > 0;
          } catch {
            return false;
          }
        })
        .flatMap(sources)
        .flatMap((file) => [...readFileSync(file, 'utf8').matchAll(/(?:apiError\([^,]+, |status: \d{3}, code: )'([a-z_]+)'/g)].map((m) => m[1]!)),
    ),
  );

  it('given every code a service raises (apiError, the HTTP parser refusals), then each has its fixed title and a row in docs/api.md', () => {
    // the codes found are the known ones: the scan itself is checked
    expect([...raised]).toEqual(expect.arrayContaining(['unauthorized', 'forbidden', 'headers_too_large', 'request_timeout', 'run_settled']));
    const table = readFileSync(join(root, 'docs/api.md'), 'utf8');
    for (const code of raised) {
      expect([code, ProblemTitles[code]]).toEqual([code, expect.any(String)]);
      expect([code, table.includes(`| \`${code}\` |`)]).toEqual([code, true]);
      expect(apiError(400, code, 'x').problem().title).toBe(ProblemTitles[code]);
    }
  });
});

describe('unavailableDependency', () => {
  it('recognises a refused database connection, also wrapped', () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5999'), { code: 'ECONNREFUSED' });
    expect(unavailableDependency(refused)).toBe('PostgreSQL');
    expect(unavailableDependency(new Error('query failed', { cause: new AggregateError([refused]) }))).toBe('PostgreSQL');
  });

  it('recognises NATS timeouts and closed connections by their error class', () => {
    class TimeoutError extends Error {}
    class ClosedConnectionError extends Error {}
    expect(unavailableDependency(new TimeoutError('timeout'))).toBe('NATS');
    expect(unavailableDependency(new Error('read failed', { cause: new ClosedConnectionError('closed') }))).toBe('NATS');
  });

  it('recognises a JetStream request the server answered 503 (a cluster without a leader), not its other refusals', () => {
    const unavailable = new JetStreamApiError({ code: 503, err_code: 10008, description: 'JetStream system temporarily unavailable' });
    expect(unavailableDependency(unavailable)).toBe('NATS');
    expect(unavailableDependency(new Error('conversation read failed', { cause: unavailable }))).toBe('NATS');
    // an atomic batch the server did not store (a 503 answer to its commit), once the append's retries are spent
    expect(unavailableDependency(new BatchNotStored('JetStream system temporarily unavailable'))).toBe('NATS');
    expect(unavailableDependency(new JetStreamApiError({ code: 404, err_code: 10037, description: 'no message found' }))).toBeNull();
    expect(unavailableDependency(new JetStreamApiError({ code: 400, err_code: 10071, description: 'wrong last sequence: 3' }))).toBeNull();
  });

  it('leaves anything else to be a 500', () => {
    expect(unavailableDependency(new TypeError('x is undefined'))).toBeNull();
    expect(unavailableDependency('not an error')).toBeNull();
  });
});

describe('parseQuery', () => {
  /** The 400 a query gets: its issues' paths and messages. */
  const refusal = (schema: Parameters<typeof parseQuery>[0], query: unknown) => {
    try {
      parseQuery(schema, query);
    } catch (e) {
      expect(e).toBeInstanceOf(ApiError);
      return { status: (e as ApiError).getStatus(), code: (e as ApiError).code, issues: (e as ApiError).extras.issues };
    }
    throw new Error('accepted');
  };

  it('given known parameters, then their parsed values; an unknown parameter is ignored', () => {
    expect(parseQuery(RunsQuery, { limit: '20', cursor: 'abc', utm_source: 'x' })).toEqual({ limit: 20, cursor: 'abc' });
    expect(parseQuery(RunsQuery, undefined)).toEqual({});
    expect(parseQuery(RunEventsQuery, { deltas: 'true' })).toEqual({ deltas: 'true' });
  });

  it('given a known parameter in a bracketed form (limit[]=2, limit[x]=3), then 400 naming it, where it was left out before', () => {
    expect(refusal(RunsQuery, { 'limit[]': '2', 'cursor[x]': 'y', other: '1' })).toEqual({
      status: 400,
      code: 'bad_request',
      issues: [
        { path: 'query.limit[]', message: 'limit takes one plain value: limit[] is not accepted' },
        { path: 'query.cursor[x]', message: 'cursor takes one plain value: cursor[x] is not accepted' },
      ],
    });
    expect(refusal(RunEventsQuery, { 'deltas[]': 'true' }).issues).toEqual([
      { path: 'query.deltas[]', message: 'deltas takes one plain value: deltas[] is not accepted' },
    ]);
    // an unknown parameter in brackets is unknown: ignored
    expect(parseQuery(RunsQuery, { 'filter[status]': 'x' })).toEqual({});
  });

  it('given a repeated parameter (an array), then 400 with the zod reason', () => {
    expect(refusal(RunsQuery, { limit: ['1', '2'] }).issues).toEqual([expect.objectContaining({ path: 'query.limit' })]);
  });
});
