/**
 * The authenticator's start-up rules (docs/operations.md "Authentication"): secure by default, a service without a JWKS
 * refuses to start naming the settings, `RUNPLANE_AUTH_DISABLED=true` lets every caller through
 * as an unauthenticated admin; a JWKS file that is not one is named; a JWKS URL that cannot be had
 * is 503 naming it, never a 401 blaming the caller's token. Token checks against a real
 * stack: test/e2e/auth.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { AuthConfig } from '@runplane/contracts';
import { createDevAuth, DEV_AUDIENCE, DEV_ISSUER } from '@runplane/devstack/auth';
import { ApiError } from '../src/problems.js';
import { Authenticator, mayAccess, UNAUTHENTICATED } from '../src/auth.js';

const dir = mkdtempSync(join(tmpdir(), 'rp-authn-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('Authenticator.fromConfig', () => {
  it('given no JWKS setting, then it refuses to start, naming the settings', () => {
    expect(() => Authenticator.fromConfig(AuthConfig.parse({}))).toThrow(
      /RUNPLANE_AUTH_JWKS_URL or RUNPLANE_AUTH_JWKS_FILE.*RUNPLANE_AUTH_DISABLED=true/,
    );
  });

  it('given a JWKS file that is not one, then it refuses to start, naming the file', () => {
    const file = join(dir, 'bad.json');
    writeFileSync(file, '{"keys": []}');
    expect(() =>
      Authenticator.fromConfig(AuthConfig.parse({ RUNPLANE_AUTH_JWKS_FILE: file, RUNPLANE_AUTH_ISSUER: 'idp', RUNPLANE_AUTH_AUDIENCE: 'runplane' })),
    ).toThrow(`RUNPLANE_AUTH_JWKS_FILE=${file} is not a readable JWKS`);
  });

  it('given a JWKS but no issuer or audience, then it refuses to start (a token of another application of the same provider must not pass)', () => {
    expect(() =>
      Authenticator.fromConfig(AuthConfig.parse({ RUNPLANE_AUTH_JWKS_URL: 'https://idp.example/jwks', RUNPLANE_AUTH_AUDIENCE: 'runplane' })),
    ).toThrow(/RUNPLANE_AUTH_ISSUER and RUNPLANE_AUTH_AUDIENCE/);
    expect(() =>
      Authenticator.fromConfig(AuthConfig.parse({ RUNPLANE_AUTH_JWKS_URL: 'https://idp.example/jwks', RUNPLANE_AUTH_ISSUER: 'idp' })),
    ).toThrow(/RUNPLANE_AUTH_ISSUER and RUNPLANE_AUTH_AUDIENCE/);
  });

  it('given a JWKS URL in plain http off loopback, then it refuses to start; on loopback it is allowed', () => {
    const cfg = (url: string) => AuthConfig.parse({ RUNPLANE_AUTH_JWKS_URL: url, RUNPLANE_AUTH_ISSUER: 'idp', RUNPLANE_AUTH_AUDIENCE: 'runplane' });
    expect(() => Authenticator.fromConfig(cfg('http://idp.example/jwks'))).toThrow(/must be https/);
    expect(Authenticator.fromConfig(cfg('http://127.0.0.1:9999/jwks')).disabled).toBe(false);
  });

  it('given a clock skew allowance over 120 s, then the configuration is refused', () => {
    expect(AuthConfig.safeParse({ RUNPLANE_AUTH_CLOCK_SKEW_SECONDS: '600' }).success).toBe(false);
  });

  it('given RUNPLANE_AUTH_DISABLED=true, then every request is the unauthenticated admin, token or not', async () => {
    const auth = Authenticator.fromConfig(AuthConfig.parse({ RUNPLANE_AUTH_DISABLED: 'true' }));
    expect(auth.disabled).toBe(true);
    await expect(auth.authenticate(undefined)).resolves.toBe(UNAUTHENTICATED);
    expect(mayAccess(UNAUTHENTICATED, 'alice')).toBe(true);
  });

  it('given a dev issuer, then its token gives the principal and scopes, and a missing header is a 401 naming what is required', async () => {
    const dev = await createDevAuth(dir);
    const auth = Authenticator.fromConfig(AuthConfig.parse(dev.env));
    const token = await dev.mint('carol', { scopes: ['runplane:admin', 'x'] });
    const p = await auth.authenticate(`Bearer ${token}`);
    const exp = (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { exp: number }).exp;
    // the instant the same token is refused: exp plus the skew allowance (30 s by default)
    expect(p).toEqual({ sub: 'carol', scopes: ['runplane:admin', 'x'], admin: true, unauthenticated: false, expiresAt: (exp + 30) * 1000 });
    const err = await auth.authenticate(undefined).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).getStatus()).toBe(401);
    expect((err as ApiError).extras.headers?.['WWW-Authenticate']).toMatch(/^Bearer realm="runplane", error="invalid_request"/);
    expect(mayAccess({ ...p, admin: false }, 'dave')).toBe(false);
    expect(mayAccess({ ...p, admin: false }, undefined)).toBe(false);
  });
});

describe("a token's sub", () => {
  let dev: Awaited<ReturnType<typeof createDevAuth>>;
  let auth: Authenticator;
  beforeAll(async () => {
    dev = await createDevAuth(join(dir, 'subs'));
    auth = Authenticator.fromConfig(AuthConfig.parse(dev.env));
  });

  it.each([
    ['a NUL', '\u0000nul'],
    ['a line break', 'line\nbreak'],
    ['a C1 control', 'c1\u0085'],
    ['a bidirectional override', '\u202eevil'],
    ['a lone surrogate', 'half\ud800'],
  ])('given %s in it, then 401 naming why (a NUL reached PostgreSQL as the principal: 500)', async (_what, sub) => {
    const err = (await auth.authenticate(`Bearer ${await dev.mint(sub)}`).catch((e: unknown) => e)) as ApiError;
    expect(err).toBeInstanceOf(ApiError);
    expect(err.getStatus()).toBe(401);
    expect(err.detail).toBe('the token\'s "sub" must be well-formed Unicode without control or bidirectional override characters');
  });

  it.each([
    ['only a zero-width space', '\u200b'],
    ['only a space', ' '],
    ['a trailing space', 'alice '],
    ['a leading no-break space', '\u00a0alice'],
    ['a zero-width space after a name', 'alice\u200b'],
    ['a zero-width joiner inside a name', 'al\u200dice'],
  ])(
    'given %s as the sub, then 401 naming why (a trial cancelled a Run as an invisible principal the timeline printed blank)',
    async (_what, sub) => {
      const err = (await auth.authenticate(`Bearer ${await dev.mint(sub)}`).catch((e: unknown) => e)) as ApiError;
      expect(err).toBeInstanceOf(ApiError);
      expect(err.getStatus()).toBe(401);
      expect(err.detail).toBe(
        'the token\'s "sub" must show something, with no invisible format character (zero-width...) and no white space at its start or end',
      );
    },
  );

  it.each(['auth0|64b7f', 'alice@example.com', 'with space', 'a.b*>', 'x/y=z', '日本語ユーザー'])(
    'given %j, then it is the principal',
    async (sub) => {
      await expect(auth.authenticate(`Bearer ${await dev.mint(sub)}`)).resolves.toMatchObject({ sub });
    },
  );
});

describe('Authenticator with a JWKS URL (the identity provider)', () => {
  /** A loopback JWKS server: `answer` decides each response. */
  async function jwksServer(answer: (res: ServerResponse) => void): Promise<{ url: string; close(): Promise<void> }> {
    const server = createServer((_req, res) => answer(res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/.well-known/jwks.json`;
    return {
      url,
      close: () => {
        server.closeAllConnections();
        return new Promise<void>((resolve) => server.close(() => resolve()));
      },
    };
  }
  const authFor = (url: string) =>
    Authenticator.fromConfig(
      AuthConfig.parse({ RUNPLANE_AUTH_JWKS_URL: url, RUNPLANE_AUTH_ISSUER: DEV_ISSUER, RUNPLANE_AUTH_AUDIENCE: DEV_AUDIENCE }),
    );
  /** The error `authenticate` throws for a valid token of the dev issuer. */
  const refusal = async (auth: Authenticator) =>
    (await auth.authenticate(`Bearer ${await (await createDevAuth(join(dir, 'idp'))).mint('erin')}`).catch((e: unknown) => e)) as ApiError;

  it('given it serves the JWKS, then its tokens are accepted and a token of another key is 401', async () => {
    const dev = await createDevAuth(join(dir, 'served'));
    const jwks = readFileSync(dev.env.RUNPLANE_AUTH_JWKS_FILE, 'utf8');
    const idp = await jwksServer((res) => res.setHeader('content-type', 'application/json').end(jwks));
    try {
      const auth = authFor(idp.url);
      await expect(auth.authenticate(`Bearer ${await dev.mint('erin')}`)).resolves.toMatchObject({ sub: 'erin' });
      const other = await refusal(auth);
      expect(other.getStatus()).toBe(401);
      expect(other.detail).toBe('no key of the JWKS matches the token');
    } finally {
      await idp.close();
    }
  });

  it.each([
    ['answers 500', (res: ServerResponse) => res.writeHead(500).end('down'), /Expected 200 OK/],
    ['serves no JWKS', (res: ServerResponse) => res.setHeader('content-type', 'application/json').end('{"nope": 1}'), /not a JSON Web Key Set/],
    ['serves no JSON', (res: ServerResponse) => res.end('<html>'), /as JSON/],
  ])(
    'given it %s, then a valid token gets 503 dependency_unavailable naming the URL (not a 401 blaming the token)',
    async (_what, answer, reason) => {
      const idp = await jwksServer(answer);
      try {
        const err = await refusal(authFor(idp.url));
        expect(err).toBeInstanceOf(ApiError);
        expect(err.getStatus()).toBe(503);
        expect(err.code).toBe('dependency_unavailable');
        expect(err.detail).toContain(`the JWKS at ${idp.url} is unavailable: `);
        expect(err.detail).toMatch(reason);
        expect(err.extras.headers?.['Retry-After']).toBeDefined();
        expect(err.extras.headers?.['WWW-Authenticate']).toBeUndefined();
      } finally {
        await idp.close();
      }
    },
  );

  it('given nothing listens at the URL, then 503 naming the URL and the refused connection', async () => {
    const idp = await jwksServer(() => undefined);
    await idp.close(); // a port that was just free: nothing listens there now
    const err = await refusal(authFor(idp.url));
    expect(err.getStatus()).toBe(503);
    expect(err.detail).toBe(`the JWKS at ${idp.url} is unavailable: fetch failed (ECONNREFUSED); retry later`);
  });
});
