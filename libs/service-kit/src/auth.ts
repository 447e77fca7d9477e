/**
 * Authentication of the HTTP API: a bearer JWT per request, verified with `jose` against a JWKS
 * (a URL, or a file for tests and air-gapped sites), its issuer, audience and expiry. The
 * principal is the token's `sub`; its scopes are the `scope` claim (space-separated, OAuth 2.0
 * style, or an array). `runplane:admin` is the operator's scope. Another principal's Conversation
 * and Runs answer 404 exactly as an unknown id does (nothing leaks).
 */
import { readFileSync } from 'node:fs';
import {
  type CanActivate,
  createParamDecorator,
  type ExecutionContext,
  HttpStatus,
  Inject,
  Injectable,
  Logger,
  Module,
  type OnModuleInit,
} from '@nestjs/common';
import { AuthConfig, principalProblem } from '@runplane/contracts';
import { createLocalJWKSet, createRemoteJWKSet, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTVerifyGetKey } from 'jose';
import { configToken } from './config.js';
import { ApiError, apiError, dependencyUnavailable } from './problems.js';

/** The signature algorithms a token may use (asymmetric only: a JWKS holds public keys). */
export const ACCEPTED_ALGORITHMS = ['ES256', 'ES384', 'ES512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'EdDSA'];

/** The operator's scope: reconcile an unknown tool outcome, read any Run. */
export const ADMIN_SCOPE = 'runplane:admin';

/** Who is calling: the token's subject and scopes (`admin` when it holds {@link ADMIN_SCOPE}). */
export interface Principal {
  /** The token's `sub`; with authentication disabled, `anonymous`. */
  sub: string;
  scopes: string[];
  admin: boolean;
  /** True when authentication is disabled (`RUNPLANE_AUTH_DISABLED=true`): every caller is this principal, with every right. */
  unauthenticated: boolean;
  /**
   * When the token stops being accepted, ms since the epoch: its `exp` plus the clock-skew
   * allowance (`RUNPLANE_AUTH_CLOCK_SKEW_SECONDS`), the instant the same token gets 401. What a
   * token opened must not outlive it (an event stream ends there). Null with authentication disabled.
   */
  expiresAt: number | null;
}

/** The principal of a service whose authentication is disabled: anyone, with every right (local tools, black-box tests). */
export const UNAUTHENTICATED: Principal = Object.freeze({ sub: 'anonymous', scopes: [], admin: true, unauthenticated: true, expiresAt: null });

/** A 401 with `WWW-Authenticate` (RFC 6750) naming why, and the reason in the problem body. */
export function unauthorized(detail: string, error: 'invalid_request' | 'invalid_token' = 'invalid_token'): ApiError {
  const description = detail.replace(/["\\]/g, "'");
  return apiError(HttpStatus.UNAUTHORIZED, 'unauthorized', detail, {
    headers: { 'WWW-Authenticate': `Bearer realm="runplane", error="${error}", error_description="${description}"` },
  });
}

/** True when `principal` may see what `owner` owns (the owner itself, an admin, or anyone when authentication is off). */
export function mayAccess(principal: Principal, owner: string | null | undefined): boolean {
  return principal.admin || (owner !== undefined && owner !== null && owner === principal.sub);
}

/**
 * Verifies bearer tokens against the configured JWKS, issuer and audience (`AuthConfig`). With
 * authentication disabled, every request is {@link UNAUTHENTICATED}.
 */
export class Authenticator {
  private readonly logger = new Logger('auth');

  private constructor(
    private readonly keys: JWTVerifyGetKey | null,
    private readonly cfg: AuthConfig,
    /** The JWKS URL the keys are fetched from (`RUNPLANE_AUTH_JWKS_URL`); null for a file or with authentication disabled. */
    private readonly jwksUrl: string | null = null,
  ) {}

  /**
   * From the configuration.
   * @throws Error naming the setting when neither `RUNPLANE_AUTH_JWKS_URL` nor `RUNPLANE_AUTH_JWKS_FILE` is set
   *   (and authentication is not disabled), or the file cannot be read as a JWKS: the service refuses to start.
   */
  static fromConfig(cfg: AuthConfig): Authenticator {
    if (cfg.RUNPLANE_AUTH_DISABLED) return new Authenticator(null, cfg);
    if (!cfg.RUNPLANE_AUTH_JWKS_FILE && !cfg.RUNPLANE_AUTH_JWKS_URL)
      throw new Error(
        'authentication is not configured: set RUNPLANE_AUTH_JWKS_URL or RUNPLANE_AUTH_JWKS_FILE (with RUNPLANE_AUTH_ISSUER and RUNPLANE_AUTH_AUDIENCE), ' +
          'or RUNPLANE_AUTH_DISABLED=true for local tools and tests only',
      );
    // a token minted for another application or tenant of the same identity provider must not pass
    if (!cfg.RUNPLANE_AUTH_ISSUER || !cfg.RUNPLANE_AUTH_AUDIENCE)
      throw new Error('authentication needs RUNPLANE_AUTH_ISSUER and RUNPLANE_AUTH_AUDIENCE (the iss and aud every token must carry)');
    if (cfg.RUNPLANE_AUTH_JWKS_FILE) {
      let jwks: JSONWebKeySet;
      try {
        jwks = JSON.parse(readFileSync(cfg.RUNPLANE_AUTH_JWKS_FILE, 'utf8')) as JSONWebKeySet;
        if (!Array.isArray(jwks.keys) || jwks.keys.length === 0) throw new Error('no "keys" in it');
      } catch (e) {
        throw new Error(`RUNPLANE_AUTH_JWKS_FILE=${cfg.RUNPLANE_AUTH_JWKS_FILE} is not a readable JWKS: ${(e as Error).message}`, { cause: e });
      }
      return new Authenticator(createLocalJWKSet(jwks), cfg);
    }
    const url = new URL(cfg.RUNPLANE_AUTH_JWKS_URL!);
    // a JWKS fetched in the clear can be swapped on the way for one with an attacker's key
    if (url.protocol !== 'https:' && !['localhost', '127.0.0.1', '[::1]'].includes(url.hostname))
      throw new Error(`RUNPLANE_AUTH_JWKS_URL=${cfg.RUNPLANE_AUTH_JWKS_URL} must be https (plain http only on loopback)`);
    return new Authenticator(createRemoteJWKSet(url), cfg, url.href);
  }

  /** True when authentication is disabled. */
  get disabled(): boolean {
    return this.keys === null;
  }

  /** Logs a warning when authentication is disabled (at start-up). */
  warnIfDisabled(): void {
    if (this.disabled)
      this.logger.warn(
        { setting: 'RUNPLANE_AUTH_DISABLED' },
        'authentication is DISABLED: every caller may read, cancel and answer every Run (local tools and tests only)',
      );
  }

  /**
   * The principal of a request's `Authorization` header.
   * @throws ApiError 401 (`WWW-Authenticate: Bearer`) when the header is missing or not `Bearer <jwt>`, or the token's
   *   signature, issuer, audience, expiry or `sub` is not valid, with the reason in the problem body; 503
   *   `dependency_unavailable` naming the URL when the JWKS (`RUNPLANE_AUTH_JWKS_URL`) cannot be fetched or is not
   *   one: the caller's token was not judged, and an operator must not read it as a wave of bad tokens.
   */
  async authenticate(authorization: string | string[] | undefined): Promise<Principal> {
    if (this.disabled) return UNAUTHENTICATED;
    const header = Array.isArray(authorization) ? authorization[0] : authorization;
    if (!header) throw unauthorized('a bearer token is required (Authorization: Bearer <JWT>)', 'invalid_request');
    const match = /^Bearer ([A-Za-z0-9_\-.~+/]+=*)$/i.exec(header.trim());
    if (!match) throw unauthorized('the Authorization header must be "Bearer <JWT>"', 'invalid_request');
    let payload;
    try {
      ({ payload } = await jwtVerify(match[1]!, this.keys!, {
        issuer: this.cfg.RUNPLANE_AUTH_ISSUER!,
        audience: this.cfg.RUNPLANE_AUTH_AUDIENCE!,
        algorithms: ACCEPTED_ALGORITHMS,
        clockTolerance: this.cfg.RUNPLANE_AUTH_CLOCK_SKEW_SECONDS,
        requiredClaims: ['exp', 'sub'],
      }));
    } catch (e) {
      const unavailable = this.jwksUrl === null ? null : jwksUnavailable(e);
      if (unavailable !== null) {
        this.logger.warn({ setting: 'RUNPLANE_AUTH_JWKS_URL', url: this.jwksUrl, reason: unavailable }, 'cannot fetch the JWKS: requests get 503');
        throw dependencyUnavailable(`the JWKS at ${this.jwksUrl}`, unavailable);
      }
      throw unauthorized(reasonOf(e));
    }
    // the principal is recorded in the log, keyed on, stored in PostgreSQL (which refuses a NUL) and printed
    const problem = principalProblem(payload.sub);
    if (problem === 'length') throw unauthorized('the token\'s "sub" must be 1 to 200 characters, counted in UTF-16 units (an emoji may count 2)');
    if (problem === 'blank')
      throw unauthorized(
        'the token\'s "sub" must show something, with no invisible format character (zero-width...) and no white space at its start or end',
      );
    if (problem === 'characters')
      throw unauthorized('the token\'s "sub" must be well-formed Unicode without control or bidirectional override characters');
    const sub = payload.sub!; // a string of 1 to 200 characters (principalProblem said so)
    const raw = (payload as { scope?: unknown; scp?: unknown }).scope ?? (payload as { scp?: unknown }).scp;
    const scopes =
      typeof raw === 'string' ? raw.split(' ').filter(Boolean) : Array.isArray(raw) ? raw.filter((s): s is string => typeof s === 'string') : [];
    // `exp` is required above, so jose checked it is a number
    const expiresAt = ((payload.exp as number) + this.cfg.RUNPLANE_AUTH_CLOCK_SKEW_SECONDS) * 1000;
    return { sub, scopes, admin: scopes.includes(ADMIN_SCOPE), unauthenticated: false, expiresAt };
  }
}

/**
 * Why a remote JWKS could not be had, or null when `e` is about the token: the fetch failed (a
 * connection refused, a network policy, DNS: not a `jose` error), timed out, answered other than
 * 200, or served something that is not a JWKS.
 */
function jwksUnavailable(e: unknown): string | null {
  if (!(e instanceof joseErrors.JOSEError)) {
    // fetch's TypeError may come from another realm (instanceof Error would be false): read its fields
    const { message, cause } = (e ?? {}) as { message?: unknown; cause?: { code?: unknown; message?: unknown } };
    const why = typeof cause?.code === 'string' ? cause.code : typeof cause?.message === 'string' ? cause.message : null;
    return `${typeof message === 'string' ? message : String(e)}${why ? ` (${why})` : ''}`;
  }
  if (e instanceof joseErrors.JWKSTimeout) return 'it did not answer in time';
  if (e instanceof joseErrors.JWKSInvalid) return 'it is not a JSON Web Key Set';
  if (e.code === 'ERR_JOSE_GENERIC' && /JSON Web Key Set/.test(e.message)) return e.message;
  return null;
}

/** Why `jose` refused a token, said for the caller (never the token itself). */
function reasonOf(e: unknown): string {
  if (e instanceof joseErrors.JWTExpired) return 'the token has expired';
  if (e instanceof joseErrors.JWTClaimValidationFailed) return `the token's "${e.claim}" claim is not valid: ${e.reason}`;
  if (e instanceof joseErrors.JWSSignatureVerificationFailed) return "the token's signature does not verify";
  if (e instanceof joseErrors.JWKSNoMatchingKey) return 'no key of the JWKS matches the token';
  if (e instanceof joseErrors.JWSInvalid || e instanceof joseErrors.JWTInvalid) return 'the token is not a valid JWT';
  if (e instanceof joseErrors.JOSEAlgNotAllowed || e instanceof joseErrors.JOSENotSupported) return "the token's algorithm is not supported";
  if (e instanceof joseErrors.JWKSTimeout) return 'the JWKS could not be fetched in time';
  return 'the token was refused';
}

/** The request field the guard sets. */
interface AuthenticatedRequest {
  headers: Record<string, string | string[] | undefined>;
  principal?: Principal;
}

/**
 * The guard of every API controller (health, metrics and `openapi.json` are served outside
 * them): authenticates the request ({@link Authenticator.authenticate}) and keeps the principal
 * for {@link CurrentPrincipal}. A refusal is the 401 problem the authenticator threw.
 */
@Injectable()
export class AuthGuard implements CanActivate {
  constructor(@Inject(Authenticator) private readonly auth: Authenticator) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (context.getType() !== 'http') return true;
    const req = context.switchToHttp().getRequest<AuthenticatedRequest>();
    req.principal = await this.auth.authenticate(req.headers.authorization);
    return true;
  }
}

/**
 * Parameter decorator: the request's principal, set by {@link AuthGuard}.
 * @throws Error when the guard did not run on the route (a route wired without it fails closed, never as an admin).
 */
export const CurrentPrincipal = createParamDecorator((_data: unknown, context: ExecutionContext): Principal => {
  const principal = context.switchToHttp().getRequest<AuthenticatedRequest>().principal;
  if (!principal) throw new Error('no principal: the route is not behind AuthGuard');
  return principal;
});

/** Provides the {@link Authenticator} from `AuthConfig` (validated at start-up) and the {@link AuthGuard}; warns at start-up when authentication is disabled. */
@Module({
  providers: [
    { provide: Authenticator, inject: [configToken(AuthConfig)], useFactory: (cfg: AuthConfig) => Authenticator.fromConfig(cfg) },
    AuthGuard,
  ],
  exports: [Authenticator, AuthGuard],
})
export class AuthModule implements OnModuleInit {
  constructor(@Inject(Authenticator) private readonly auth: Authenticator) {}

  onModuleInit(): void {
    this.auth.warnIfDisabled();
  }
}
