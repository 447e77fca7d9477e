/** The cursor of `GET /v1/runs`: opaque to clients, and a cursor the API did not give is a 400 naming `query.cursor`. */
import { describe, expect, it } from '@jest/globals';
import type { RunView } from '@runplane/contracts';
import { ApiError } from '@runplane/service-kit';
import { decodeRunsCursor, encodeRunsCursor } from '../src/admission.controller.js';

const last = { runId: 'run-7', admittedAt: '2026-12-02T04:00:00.123Z' } as RunView;

describe('GET /v1/runs cursor', () => {
  it('given the last Run of a page, then its cursor decodes to its admission time and id', () => {
    const cursor = encodeRunsCursor(last);
    expect(cursor).toMatch(/^[A-Za-z0-9_-]+$/);
    expect(decodeRunsCursor(cursor)).toEqual({ admittedAt: last.admittedAt, runId: 'run-7' });
  });

  it('given something else (not base64url, not JSON, another shape, extra fields, a bad id), then 400 bad_request at query.cursor', () => {
    const b64 = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');
    for (const raw of [
      'not a cursor!',
      b64('not json'),
      b64({ runId: 'run-7' }),
      b64({ admittedAt: 'yesterday', runId: 'run-7' }),
      b64({ admittedAt: last.admittedAt, runId: 'a b' }),
      b64({ admittedAt: last.admittedAt, runId: 'run-7', extra: 1 }),
    ]) {
      let error: unknown = null;
      try {
        decodeRunsCursor(raw);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(ApiError);
      expect((error as ApiError).getStatus()).toBe(400);
      expect((error as ApiError).problem().issues).toEqual([{ path: 'query.cursor', message: 'not a cursor of GET /v1/runs' }]);
    }
  });
});
