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
 * calls to any http(s) origin (admission is configured by the user), no framing.
 */
export const STATIC_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' http: https:; " +
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/**
 * Serves the files of `dir` under `prefix` (e.g. `/viewer/`, its `index.html` at the prefix),
 * without authentication (they are public code; the API calls they make carry the user's token),
 * with {@link STATIC_CSP}, `nosniff` and no referrer. The prefix without its slash redirects to
 * it (relative links of the page resolve under it).
 */
export function serveStaticFiles(app: INestApplication, prefix: string, dir: string): void {
  const bare = prefix.replace(/\/$/, '');
  app.use(bare, (req: { originalUrl: string }, res: { redirect(status: number, url: string): void }, next: () => void) => {
    const [path, query] = req.originalUrl.split('?', 2);
    if (path === bare) res.redirect(301, `${prefix}${query !== undefined ? `?${query}` : ''}`);
    else next();
  });
  // NestExpressApplication's method, typed here without depending on the platform package
  const express = app as unknown as { useStaticAssets(dir: string, options: Record<string, unknown>): unknown };
  express.useStaticAssets(dir, {
    prefix,
    index: 'index.html',
    fallthrough: true,
    setHeaders: (res: { setHeader(name: string, value: string): void }) => {
      res.setHeader('Content-Security-Policy', STATIC_CSP);
      res.setHeader('X-Content-Type-Options', 'nosniff');
      res.setHeader('Referrer-Policy', 'no-referrer');
      res.setHeader('Cache-Control', 'no-cache');
    },
  });
}
