/**
 * Authentication for a development stack (`runplane up`, the demo, the auth tests): a signing key
 * generated here (ES256, never leaves the state folder), its public JWKS in a file the services
 * read (`RUNPLANE_AUTH_JWKS_FILE`), and short-lived tokens minted from it. A deployment uses its
 * own issuer instead (`RUNPLANE_AUTH_JWKS_URL`, docs/operations.md).
 */
import { randomUUID } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';

/** The issuer and audience of development tokens. */
export const DEV_ISSUER = 'runplane-devstack';
export const DEV_AUDIENCE = 'runplane';

/** A development issuer: the services' settings and a way to mint tokens. */
export interface DevAuth {
  /** `RUNPLANE_AUTH_JWKS_FILE`, `RUNPLANE_AUTH_ISSUER`, `RUNPLANE_AUTH_AUDIENCE` for the services. */
  env: { RUNPLANE_AUTH_JWKS_FILE: string; RUNPLANE_AUTH_ISSUER: string; RUNPLANE_AUTH_AUDIENCE: string; RUNPLANE_AUTH_DISABLED: 'false' };
  /**
   * A signed token for `sub` (1-200 characters) with `scopes` (space-separated in `scope`),
   * valid for `ttlSeconds` (default 3,600).
   */
  mint(sub: string, opts?: { scopes?: string[]; ttlSeconds?: number; issuer?: string; audience?: string }): Promise<string>;
}

/**
 * Generates a signing key in `dir` (created): `jwks.json` (public, for the services) and
 * `signing-key.jwk` (private, mode 0600, for the CLI to mint tokens while `up` runs).
 */
export async function createDevAuth(dir: string): Promise<DevAuth> {
  mkdirSync(dir, { recursive: true });
  const { publicKey, privateKey } = await generateKeyPair('ES256', { extractable: true });
  const kid = randomUUID();
  const pub: JWK = { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' };
  const priv: JWK = { ...(await exportJWK(privateKey)), kid, alg: 'ES256' };
  const jwksFile = join(dir, 'jwks.json');
  writeFileSync(jwksFile, JSON.stringify({ keys: [pub] }, null, 2));
  writeFileSync(join(dir, 'signing-key.jwk'), JSON.stringify(priv), { mode: 0o600 });
  return devAuthFrom(priv, jwksFile);
}

/** The development issuer whose key `createDevAuth` left in `dir`, or null when there is none. */
export async function openDevAuth(dir: string): Promise<DevAuth | null> {
  let priv: JWK;
  try {
    priv = JSON.parse(readFileSync(join(dir, 'signing-key.jwk'), 'utf8')) as JWK;
  } catch {
    return null;
  }
  return devAuthFrom(priv, join(dir, 'jwks.json'));
}

async function devAuthFrom(priv: JWK, jwksFile: string): Promise<DevAuth> {
  const key = await importJWK(priv, 'ES256');
  return {
    env: {
      RUNPLANE_AUTH_JWKS_FILE: jwksFile,
      RUNPLANE_AUTH_ISSUER: DEV_ISSUER,
      RUNPLANE_AUTH_AUDIENCE: DEV_AUDIENCE,
      RUNPLANE_AUTH_DISABLED: 'false',
    },
    mint: (sub, opts = {}) =>
      new SignJWT({ ...(opts.scopes?.length ? { scope: opts.scopes.join(' ') } : {}) })
        .setProtectedHeader({ alg: 'ES256', kid: priv.kid! })
        .setSubject(sub)
        .setIssuer(opts.issuer ?? DEV_ISSUER)
        .setAudience(opts.audience ?? DEV_AUDIENCE)
        .setIssuedAt()
        .setExpirationTime(Math.floor(Date.now() / 1000) + (opts.ttlSeconds ?? 3_600))
        .sign(key),
  };
}
