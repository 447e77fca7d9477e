import { describe, expect, it } from '@jest/globals';
import { z } from 'zod';
import { ProblemDetails } from '@runplane/contracts';
import { apiError, badRequestFromZod, dependencyUnavailable, unavailableDependency } from '../src/problems.js';

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

  it('leaves anything else to be a 500', () => {
    expect(unavailableDependency(new TypeError('x is undefined'))).toBeNull();
    expect(unavailableDependency('not an error')).toBeNull();
  });
});
