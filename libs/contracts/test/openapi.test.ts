import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { HttpRoutes, HttpServices, openApiDocument, PostMessageBody, ProblemDetails, renderOpenApi } from '@runplane/contracts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

describe('OpenAPI description', () => {
  it('docs/openapi.json is the description generated from the zod schemas (regenerate: npm run runplane --silent -- docs openapi > docs/openapi.json)', () => {
    expect(readFileSync(join(root, 'docs', 'openapi.json'), 'utf8')).toBe(renderOpenApi());
  });

  it('is OpenAPI 3.1 and documents every registered route with its answers', () => {
    const doc = openApiDocument();
    expect(doc.openapi).toBe('3.1.0');
    for (const route of HttpRoutes) {
      const op = doc.paths?.[route.path]?.[route.method];
      expect(op).toBeDefined();
      expect(Object.keys(op!.responses ?? {}).sort()).toEqual(
        expect.arrayContaining(route.path === '/healthz' ? ['200', '503'] : Object.keys(route.responses)),
      );
    }
    expect(doc.components?.schemas?.ProblemDetails).toMatchObject({
      type: 'object',
      required: expect.arrayContaining(['type', 'title', 'status', 'detail', 'code']),
    });
    const post = doc.paths?.['/v1/conversations/{conversationId}/messages']?.post;
    expect(post?.responses).toMatchObject({ '400': { content: { 'application/problem+json': expect.anything() } } });
    expect(post?.requestBody).toMatchObject({ content: { 'application/json': { schema: { $ref: '#/components/schemas/PostMessageBody' } } } });
  });

  it('gives each service only its own routes, /healthz and /openapi.json included', () => {
    for (const service of HttpServices) {
      const paths = Object.keys(openApiDocument(service).paths ?? {});
      expect(paths).toEqual(expect.arrayContaining(['/healthz', '/openapi.json']));
      expect(paths).toEqual([...new Set(HttpRoutes.filter((r) => r.services.includes(service)).map((r) => r.path))]);
    }
    expect(openApiDocument('projector').paths?.['/healthz']?.get?.operationId).toBe('health');
  });

  it('describes the same shapes the services validate with (one zod source)', () => {
    const body = HttpRoutes.find((r) => r.operationId === 'postMessage')!.request!.body!.schema;
    expect(body).toBe(PostMessageBody);
    expect(ProblemDetails.safeParse({ type: 'urn:runplane:problem:x', title: 'X', status: 400, detail: 'why', code: 'x' }).success).toBe(true);
    expect(ProblemDetails.safeParse({ error: { code: 'x', message: 'old shape' } }).success).toBe(false);
  });
});
