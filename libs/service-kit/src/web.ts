/**
 * What a browser needs from a service: CORS answers for the configured origins (the Run viewer,
 * served by publication, calls admission on another origin) and static files (the viewer itself).
 * Both use what Nest's Express platform ships (`cors`, `serve-static`), not code of our own.
 */
import type { INestApplication } from '@nestjs/common';

/** Request headers a cross-origin page may send: the bearer token, JSON bodies, the SSE resume position, the user name. */
export const CORS_ALLOWED_HEADERS = ['Authorization', 'Content-Type', 'Last-Event-ID', 'X-Runplane-User'];
/** Response headers a cross-origin page may read. */
export const CORS_EXPOSED_HEADERS = ['Retry-After', 'WWW-Authenticate'];

/**
 * Answers CORS (preflights included, before any guard) for exactly `origins` (contracts
 * `CorsConfig`, `RUNPLANE_CORS_ORIGINS`); nothing when the list is empty. No cookies are
 * involved: the API's credentials are bearer tokens, so `Access-Control-Allow-Credentials` is
 * never sent. A request from another origin gets no CORS headers and the browser refuses it.
 */
export function enableCorsFor(app: INestApplication, origins: readonly string[]): void {
  if (origins.length === 0) return;
  app.enableCors({
    origin: [...origins],
    methods: ['GET', 'POST'],
    allowedHeaders: CORS_ALLOWED_HEADERS,
    exposedHeaders: CORS_EXPOSED_HEADERS,
    maxAge: 600,
  });
}

/**
 * The Content-Security-Policy of the static pages: their own scripts and styles only (no inline
 * script, so text from a Run's log can never run as code even if it reached the markup), API
 * calls to their own origin and to `connectOrigins` only (the admission origins configured
 * server-side: a page opened from a hostile link cannot send the user's token anywhere else,
 * docs/operations.md "The Run viewer"), no framing, no form posts, no `<base>`.
 * @param connectOrigins exact origins (`http(s)://host[:port]`, already validated by the caller's
 *   configuration schema).
 */
export function staticCsp(connectOrigins: readonly string[]): string {
  const connect = ["'self'", ...connectOrigins].join(' ');
  return (
    `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src ${connect}; ` +
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
  );
}

/** What {@link serveStaticFiles} serves beside the files. */
export interface StaticFilesOptions {
  /** Origins besides its own the pages may call (`connect-src`); none by default. */
  connectOrigins?: readonly string[];
  /**
   * Served as `<prefix>config.json` (JSON, no token, `Cache-Control: no-store`): what the page
   * needs from the server's configuration (the viewer: the admission origins it may call).
   */
  pageConfig?: Record<string, unknown>;
}

/**
 * Serves the files of `dir` under `prefix` (e.g. `/viewer/`, its `index.html` at the prefix),
 * without authentication (they are public code; the API calls they make carry the user's token),
 * with {@link staticCsp} of `opts.connectOrigins`, `nosniff` and no referrer, and
 * `opts.pageConfig` as `<prefix>config.json`. The prefix without its slash redirects to it
 * (relative links of the page resolve under it).
 */
export function serveStaticFiles(app: INestApplication, prefix: string, dir: string, opts: StaticFilesOptions = {}): void {
  const csp = staticCsp(opts.connectOrigins ?? []);
  const headers = (res: { setHeader(name: string, value: string): void }) => {
    res.setHeader('Content-Security-Policy', csp);
    res.setHeader('X-Content-Type-Options', 'nosniff');
    res.setHeader('Referrer-Policy', 'no-referrer');
    res.setHeader('Cache-Control', 'no-cache');
  };
  const bare = prefix.replace(/\/$/, '');
  app.use(bare, (req: { originalUrl: string }, res: { redirect(status: number, url: string): void }, next: () => void) => {
    const [path, query] = req.originalUrl.split('?', 2);
    if (path === bare) res.redirect(301, `${prefix}${query !== undefined ? `?${query}` : ''}`);
    else next();
  });
  if (opts.pageConfig) {
    const body = JSON.stringify(opts.pageConfig);
    type Res = { setHeader(name: string, value: string): void; status(code: number): Res; end(body: string): void };
    app.use(`${prefix}config.json`, (req: { method: string }, res: Res, next: () => void) => {
      if (req.method !== 'GET' && req.method !== 'HEAD') return next();
      headers(res);
      res.setHeader('Cache-Control', 'no-store');
      res.setHeader('Content-Type', 'application/json; charset=utf-8');
      res.status(200).end(req.method === 'HEAD' ? '' : body);
    });
  }
  // NestExpressApplication's method, typed here without depending on the platform package
  const express = app as unknown as { useStaticAssets(dir: string, options: Record<string, unknown>): unknown };
  express.useStaticAssets(dir, { prefix, index: 'index.html', fallthrough: true, setHeaders: headers });
}
