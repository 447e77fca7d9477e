/**
 * What the CLI knows of the local stack's files without loading the stack: the checkout root, the
 * signing key `runplane up` keeps in `.runplane/auth`, the tokens minted from it. Kept apart from
 * commands.ts so that `runplane token` and every API command's token lookup load only this file,
 * the contracts' principal check, the devstack's auth module (a dynamic import: the production image
 * has no devstack) and jose, not NATS, PostgreSQL and the projections.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { principalProblem } from '@runplane/contracts/principal';
import { findRepoRoot } from '@runplane/holdings/data-folder';

/** The repository root (nx.json), for the files `runplane up` keeps in `.runplane`. @throws outside a checkout. */
export function repoRoot(): string {
  const root = findRepoRoot(dirname(fileURLToPath(import.meta.url)));
  if (root === null) throw new Error('cannot find the repository root (nx.json)');
  return root;
}

/** The folder of the local stack's signing key and JWKS (`runplane up`, the demo): `.runplane/auth` of this checkout. */
export function devAuthDir(): string {
  return join(repoRoot(), '.runplane', 'auth');
}

/** The longest a `runplane token` token may live, s (a day: the local stack's own tokens live 12 h). */
export const MAX_TOKEN_TTL_SECONDS = 86_400;

/**
 * `runplane token`: a bearer token for the principal `sub` with `scopes`, valid `ttlSeconds`, minted
 * from the signing key the running local stack generated in `authDir` (default {@link devAuthDir}),
 * so the services of that stack accept it: a second user to try tenancy with, or an operator.
 * A deployment's tokens come from its identity provider; this key exists only beside `up` and the demo.
 * @throws Error naming the setting when `sub` is not a principal the services accept (contracts
 *   `principalProblem`: 1-200 characters, no control or bidirectional override), a scope is empty or holds
 *   white space, `ttlSeconds` is not a whole number from 1 to {@link MAX_TOKEN_TTL_SECONDS}, or
 *   there is no signing key in `authDir` (no stack was started from this checkout).
 */
export async function mintLocalToken(opts: { sub: string; scopes?: string[]; ttlSeconds?: number; authDir?: string }): Promise<string> {
  const { sub, scopes = [], ttlSeconds = 3_600 } = opts;
  const problem = principalProblem(sub);
  if (problem === 'length')
    throw new Error(
      `--sub must be 1 to 200 characters, counted in UTF-16 units (an emoji may count 2; the services refuse another "sub"); got ${sub.length}`,
    );
  if (problem === 'blank')
    throw new Error(
      '--sub must show something, with no invisible format character (zero-width...) and no white space at its start or end (the services refuse another "sub")',
    );
  if (problem === 'characters')
    throw new Error('--sub must be well-formed Unicode without control or bidirectional override characters (the services refuse another "sub")');
  for (const s of scopes) if (!/^\S+$/.test(s)) throw new Error(`--scope ${JSON.stringify(s)} is not a scope: one word without white space`);
  if (!Number.isInteger(ttlSeconds) || ttlSeconds < 1 || ttlSeconds > MAX_TOKEN_TTL_SECONDS)
    throw new Error(`--ttl must be a whole number of seconds from 1 to ${MAX_TOKEN_TTL_SECONDS}; got ${ttlSeconds}`);
  const dir = opts.authDir ?? devAuthDir();
  const auth = await (await import('@runplane/devstack/auth')).openDevAuth(dir);
  if (!auth)
    throw new Error(
      `no signing key in ${dir}: start the local stack first (npm run runplane -- up); a deployment's tokens come from its identity provider`,
    );
  return auth.mint(sub, { scopes, ttlSeconds });
}

/** The token `runplane up` wrote for its user (.runplane/auth/token), or undefined when there is none. */
export function devToken(): string | undefined {
  try {
    return readFileSync(join(repoRoot(), '.runplane', 'auth', 'token'), 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}
