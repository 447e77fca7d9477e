/**
 * Bootstrapping shared by every Runplane service process. Each service is a Nest application
 * with a small HTTP surface (at least `GET /healthz` for Kubernetes probes) and, when it reacts to
 * events, a microservice transport over its own durable JetStream consumer.
 */
import 'reflect-metadata';
import { ConsoleLogger, Module, type INestApplication, type LogLevel as NestLogLevel, type Type } from '@nestjs/common';
import { ModuleRef, NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { Logger as PinoNestLogger, PinoLogger } from 'nestjs-pino';
import { z } from 'zod';
import {
  BusConfig,
  CorsConfig,
  DrainConfig,
  envInt,
  HttpConfig,
  loadConfig,
  MAX_REQUEST_BODY_BYTES,
  MemoryConfig,
  ShutdownConfig,
  type Owner,
  type PartitionsBody,
} from '@runplane/contracts';
import { answerClientError, apiError, ApiError, ProblemDetailsFilter, serveOpenApi, writeProblem, type ProblemTable } from './problems.js';
import { ADMIN_SCOPE, Authenticator, type Principal } from './auth.js';
import { EventLog, PartitionOwnership, ServedConsumers } from '@runplane/eventlog';
import { JetStreamEventTransport } from '@runplane/eventlog/nest';
import { ConfigModule } from './config.js';
import { LogConfig, principalFields, serviceLoggerModule, type LogLevel } from './logging.js';
import { serveMetrics } from './metrics.js';
import { enableCorsFor, serveStaticFiles, type StaticFilesOptions } from './web.js';
import { startTracing, stopTracing, traceRequests, TracingShutdown } from './tracing.js';
import { IdleMemoryRelease, releaseStartupMemory, setStartupCollection } from '@runplane/kit/memory';
import { exitOnSignalsWhileStarting, shutDownOnSignals, type ShutdownProgress } from './shutdown.js';
import { restoreDateTimeFormat } from './locale-data.js';

export * from './config.js';
export * from './logging.js';
export * from './metrics.js';
export * from './tracing.js';
export * from './shutdown.js';

export * from './health.js';

export * from './problems.js';
export * from './auth.js';
export * from './web.js';

/** What {@link runService} needs to start one service. */
export interface ServiceSpec {
  /** Service name: appears in logs, the NATS connection name and the ready line. */
  name: Owner | 'projector';
  module: Type<unknown>;
  /** Env variable holding the HTTP port, and its default (0 = any free port). */
  portEnv: string;
  defaultPort: number;
  /** Configuration schemas validated before anything starts (a bad value fails in one line). */
  config?: z.ZodObject[];
  /**
   * The service's partition consumers feeding `@EventPattern` handlers, if it reacts to events:
   * one per partition it owns, `<prefix>-<name>-p<N>`, on the owners' subjects libs/eventlog
   * bus.ts `SERVICE_CONSUMERS` lists for it.
   */
  consumer?: {
    /** The consumers' ack wait, ms, read after the configuration is validated (default `RUNPLANE_ACK_WAIT_MS`). */
    ackWaitMs?: () => number;
    /** Its handlers start as their messages arrive, in arrival order (eventlog nest.ts `EventTransportSpec.onArrival`): a service that batches them. */
    onArrival?: boolean;
  };
  /**
   * Keep each request's raw body (`req.rawBody`, a Buffer) beside the parsed one, for a route that
   * must check the bytes themselves (admission refuses bodies that are not UTF-8 instead of
   * reading them with U+FFFD substituted).
   */
  rawBody?: boolean;
  /**
   * Answer CORS for the origins of `RUNPLANE_CORS_ORIGINS` (contracts `CorsConfig`): a service
   * whose API a page of another origin calls (admission, for the Run viewer publication serves).
   */
  cors?: boolean;
  /**
   * Static files served without authentication: `dir` under `prefix` (publication's Run viewer,
   * `/viewer/`). `options`, read after the configuration is validated: the origins the pages may
   * call besides their own (their CSP `connect-src`) and the JSON served as `<prefix>config.json`.
   */
  staticFiles?: { prefix: string; dir: string; options?: () => StaticFilesOptions };
  /**
   * The service's domain errors and the RFC 9457 problems they are answered with (first match
   * wins), applied by the one {@link ProblemDetailsFilter} before its own rules.
   */
  problems?: ProblemTable;
}

/** Options of {@link startService} (process entries use {@link runService}). */
export interface StartServiceOptions {
  /** Overrides `LOG_LEVEL` (tests pass `error` or `silent`). */
  logLevel?: LogLevel;
  /**
   * On SIGTERM/SIGINT close the app (drain, consumers, then connections) and exit 0, or 1 when that
   * takes longer than `RUNPLANE_SHUTDOWN_GRACE_SECONDS`; a second signal exits at once (shutdown.ts).
   */
  shutdownHooks?: boolean;
  /** How long a client may take to send a whole request, ms (default {@link HTTP_REQUEST_TIMEOUT_MS}; tests shorten it). */
  httpRequestTimeoutMs?: number;
}

export interface StartedService {
  app: INestApplication;
  /** The HTTP address actually bound (useful with port 0), e.g. `http://127.0.0.1:8085`. */
  url: string;
  /** Where a shutdown is: its stage and the event handlers still in flight. */
  shutdownProgress(): ShutdownProgress;
}

/** pino's level number of each Nest log level. */
const PINO_LEVEL: Record<NestLogLevel, number> = { verbose: 10, debug: 20, log: 30, warn: 40, error: 50, fatal: 60 };

/**
 * One log line of `service` as pino writes the service's own (docs/operations.md "Logs"): `level`
 * (pino's number: 30 info, 40 warn, 50 error, 60 fatal), `time` (ms since the epoch), `service`,
 * `pid`, then `fields` (`msg`, `context`, `err`...), newline-terminated.
 */
export function logLine(service: string, level: number, fields: Record<string, unknown>): string {
  return `${JSON.stringify({ level, time: Date.now(), service, pid: process.pid, ...fields })}\n`;
}

/**
 * The logger Nest uses until pino takes over (and for what Nest logs when the application fails
 * to start, before pino exists): JSON lines on stderr shaped as pino's ({@link logLine}), so a log
 * pipeline parses a failed start as it parses a running service; never colours or the `[Nest]`
 * banner, and nothing on stdout (whose only line is the ready line). A failed start used to print
 * ANSI lines on stdout and a coloured stack trace.
 */
export class StartupLogger extends ConsoleLogger {
  constructor(
    private readonly serviceName: string,
    logLevels: NestLogLevel[],
  ) {
    super(serviceName, { json: true, colors: false, logLevels });
  }

  protected override printAsJson(
    message: unknown,
    options: { context: string; logLevel: NestLogLevel; errorStack?: unknown; params?: Record<string, unknown>; error?: Error },
  ): void {
    const { error, errorStack, context, params } = options;
    // Nest's report of an error that stopped the start-up: `main` logs that error once, as the
    // process's fatal last line with its stack, and `startService` throws it to its caller
    // (`abortOnError: false`); printed here too, an operator read the same failure twice
    if (context === 'ExceptionHandler') return;
    process.stderr.write(
      logLine(this.serviceName, PINO_LEVEL[options.logLevel] ?? 30, {
        ...params,
        ...(context ? { context } : {}),
        msg: typeof message === 'string' ? message : inspect(message, { breakLength: Infinity, depth: 4 }),
        ...(error ? { err: { type: error.name, message: error.message, stack: error.stack } } : errorStack ? { stack: errorStack } : {}),
      }),
    );
  }

  protected override printMessages(
    messages: unknown[],
    context?: string,
    logLevel?: NestLogLevel,
    _writeStreamType?: 'stdout' | 'stderr',
    errorStack?: unknown,
    params?: Record<string, unknown>,
  ): void {
    super.printMessages(messages, context, logLevel, 'stderr', errorStack, params);
  }
}

/** The Nest levels the start-up logger prints for a `LOG_LEVEL`. */
function startupLevels(level: LogLevel): NestLogLevel[] {
  if (level === 'silent') return [];
  if (level === 'error' || level === 'fatal') return ['fatal', 'error'];
  if (level === 'warn') return ['fatal', 'error', 'warn'];
  return ['fatal', 'error', 'warn', 'log'];
}

/** The root module of a service: validated configuration and logging around the service's module. */
@Module({})
class ServiceRootModule {}

/** How long a client may take to send a whole HTTP request (headers and body), ms; then 408 and the connection closes. */
export const HTTP_REQUEST_TIMEOUT_MS = 30_000;

/** How long a service keeps an idle kept-alive HTTP connection open, ms (Node's default is 5 s). */
export const KEEP_ALIVE_TIMEOUT_MS = 65_000;

/**
 * How often the HTTP server looks for requests past {@link HTTP_REQUEST_TIMEOUT_MS}, ms. Node's
 * default is 30 s, so a 30 s bound answered 408 after 39-71 s (a trial measured it); every second,
 * it answers within 31 s.
 */
export const HTTP_TIMEOUT_CHECK_MS = 1_000;

/**
 * Express under Nest on a Node HTTP server made with {@link HTTP_TIMEOUT_CHECK_MS}: the check
 * interval can only be given when the server is made, which Nest's own adapter does without options.
 * The options this adapter does not handle (https, Nest's connection tracking) go to Nest's own.
 */
class TimelyExpressAdapter extends ExpressAdapter {
  override initHttpServer(options: Parameters<ExpressAdapter['initHttpServer']>[0]): void {
    if (options?.httpsOptions || options?.forceCloseConnections || options?.return503OnClosing) return super.initHttpServer(options);
    this.httpServer = createServer({ connectionsCheckingInterval: HTTP_TIMEOUT_CHECK_MS }, this.getInstance());
  }
}

/**
 * Starts a service in this process: validates its configuration (every schema, before anything
 * connects), provides each schema's parsed value for injection ({@link ConfigModule}), logs JSON
 * through pino (`LOG_LEVEL`), runs the modules' start-up hooks (`onModuleInit`,
 * `onApplicationBootstrap`: a hook that throws stops the start before any event is consumed), then
 * starts the optional durable consumer (each handler runs in a log context carrying the event's
 * `runId`, `eventType` and `seq`) and the HTTP listener. Whether it
 * starts or throws, `Intl.DateTimeFormat` is the original afterwards (a service's `main.ts` defers
 * it while the modules load: locale-data.ts).
 * @throws on invalid configuration or when a dependency (NATS, PostgreSQL) cannot be reached;
 * whatever had started is closed again.
 */
export async function startService(spec: ServiceSpec, opts: StartServiceOptions = {}): Promise<StartedService> {
  try {
    return await bootService(spec, opts);
  } finally {
    // the modules are loaded and Nest is up (or the start failed): formatters made from now on are
    // built at once, as usual (a main.ts deferred them while it loaded: locale-data.ts)
    restoreDateTimeFormat();
  }
}

/** {@link startService} without the restore of `Intl.DateTimeFormat`. */
async function bootService(spec: ServiceSpec, opts: StartServiceOptions): Promise<StartedService> {
  const schemas = [BusConfig, HttpConfig, LogConfig, ShutdownConfig, ...(spec.cors ? [CorsConfig] : []), ...(spec.config ?? [])];
  const config = ConfigModule.forRoot(schemas);
  const { RUNPLANE_SHUTDOWN_GRACE_SECONDS: graceSeconds } = loadConfig(ShutdownConfig);
  // a drain that the shutdown bound would cut is a configuration error, said before anything starts
  if (spec.config?.includes(DrainConfig)) {
    const { RUNPLANE_DRAIN_SECONDS: drain } = loadConfig(DrainConfig);
    if (drain >= graceSeconds)
      throw new Error(
        `Invalid configuration: RUNPLANE_DRAIN_SECONDS (${drain}) must be below RUNPLANE_SHUTDOWN_GRACE_SECONDS (${graceSeconds}): the shutdown bound would cut the drain`,
      );
  }
  const { HOST } = loadConfig(HttpConfig);
  const port = loadConfig(z.object({ [spec.portEnv]: envInt(spec.defaultPort, 0, 65535) }))[spec.portEnv] as number;
  const level = opts.logLevel ?? loadConfig(LogConfig).LOG_LEVEL;
  // a stop while starting (waiting for the provisioning, say) exits 0 with a line, not by the signal
  const whileStarting = opts.shutdownHooks
    ? exitOnSignalsWhileStarting((signal) =>
        process.stderr.write(
          logLine(spec.name, 30, { context: 'shutdown', signal, msg: 'stopped while starting, before it was ready: nothing of it was running' }),
        ),
      )
    : () => undefined;
  try {
    return await bootStartedService(spec, opts, { config, graceSeconds, host: HOST, port, level, takeOverSignals: whileStarting });
  } finally {
    whileStarting();
  }
}

/** {@link bootService} once its settings are read: Nest, its hooks and its consumers. */
async function bootStartedService(
  spec: ServiceSpec,
  opts: StartServiceOptions,
  settings: {
    config: ReturnType<typeof ConfigModule.forRoot>;
    graceSeconds: number;
    host: string;
    port: number;
    level: LogLevel;
    takeOverSignals: () => void;
  },
): Promise<StartedService> {
  const { config, graceSeconds, host: HOST, port, level } = settings;
  // before Nest boots, so that every span of the service is recorded; flushed at shutdown
  const tracing = await startTracing(spec.name);
  let app: INestApplication;
  try {
    app = await NestFactory.create(
      {
        module: ServiceRootModule,
        imports: [config, serviceLoggerModule(spec.name, level), spec.module],
        providers: tracing ? [TracingShutdown] : [],
      },
      new TimelyExpressAdapter(),
      {
        abortOnError: false,
        bufferLogs: true,
        logger: new StartupLogger(spec.name, startupLevels(level)),
        ...(spec.rawBody ? { rawBody: true } : {}),
      },
    );
  } catch (e) {
    if (tracing) await stopTracing();
    throw e;
  }
  app.useLogger(app.get(PinoNestLogger));
  // no `X-Powered-By: Express` on any answer: it tells a client nothing it needs, and a scanner the framework
  (app.getHttpAdapter().getInstance() as { disable(setting: string): void }).disable('x-powered-by');
  if (tracing) app.use(traceRequests());
  // one body limit for every service, registered before Nest's default parser (which would take 100 KiB)
  // (NestExpressApplication's method, typed here without depending on the platform package)
  const parsers = app as unknown as { useBodyParser(type: 'json' | 'urlencoded', options: Record<string, unknown>): unknown };
  parsers.useBodyParser('json', { limit: MAX_REQUEST_BODY_BYTES });
  parsers.useBodyParser('urlencoded', { limit: MAX_REQUEST_BODY_BYTES, extended: true });
  // before every route and guard: a preflight carries no token
  if (spec.cors) enableCorsFor(app, loadConfig(CorsConfig).RUNPLANE_CORS_ORIGINS);
  if (spec.staticFiles) serveStaticFiles(app, spec.staticFiles.prefix, spec.staticFiles.dir, spec.staticFiles.options?.() ?? {});
  app.useGlobalFilters(new ProblemDetailsFilter(spec.problems));
  serveOpenApi(app, spec.name);
  serveMetrics(app, spec.name);
  servePartitions(app);
  let transport: JetStreamEventTransport | null = null;
  const shutdownProgress = (): ShutdownProgress => {
    const p = transport?.progress() ?? { state: 'consuming', handlers: [] };
    const stage = p.state === 'consuming' ? 'draining' : p.state === 'closing' ? 'closing consumers' : 'closing connections';
    return { stage, handlers: p.handlers };
  };
  // from here a signal closes the app gracefully (the start-up's handler is removed first)
  settings.takeOverSignals();
  if (opts.shutdownHooks)
    shutDownOnSignals(app, {
      graceMs: graceSeconds * 1000,
      progress: shutdownProgress,
      http: () => app.getHttpServer() as { closeAllConnections(): void },
    });
  try {
    // the modules' start-up hooks (a projector's check that its database is this log's, the tool
    // threads, recovery's watches) run before any consumer takes an event: Nest runs them only in
    // init, which listen() would call after the consumers had started (a loaded test run saw a
    // refused projector apply another log's events into its database before its check failed)
    await app.init();
    if (spec.consumer) {
      const log = app.get(EventLog);
      const pino = await app.resolve(PinoLogger);
      transport = new JetStreamEventTransport(
        log,
        {
          service: spec.name,
          ackWaitMs: spec.consumer.ackWaitMs?.() ?? loadConfig(BusConfig).RUNPLANE_ACK_WAIT_MS,
          ...(spec.consumer.onArrival ? { onArrival: true } : {}),
        },
        app.get(PartitionOwnership),
        { inLogContext: (fields, handle) => pino.runInContext(handle, { bindings: fields }) },
        app.get(ServedConsumers),
      );
      app.connectMicroservice({ strategy: transport });
      await app.startAllMicroservices();
    }
    // a listen error names the settings it came from (a trial's HOST=not-a-host said only "getaddrinfo ENOTFOUND")
    await app.listen(port, HOST).catch((e: unknown) => {
      throw new Error(`cannot listen on HOST=${HOST} ${spec.portEnv}=${port}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
    });
  } catch (e) {
    await app.close().catch(() => undefined);
    throw e;
  }
  const server = app.getHttpServer() as { address(): AddressInfo; keepAliveTimeout: number; headersTimeout: number; requestTimeout: number };
  // a request must arrive whole within 30 s (Node's default is 300 s): a client that sends a
  // Content-Length and never the body holds a connection no longer than that (a response, an SSE
  // stream included, is not bounded by it). The headers' bound may not exceed it: above it, Node
  // applied neither to a request whose body never came (a trial's answered after 71 s, a test's never)
  const requestTimeoutMs = opts.httpRequestTimeoutMs ?? HTTP_REQUEST_TIMEOUT_MS;
  server.requestTimeout = requestTimeoutMs;
  server.headersTimeout = requestTimeoutMs;
  // what the HTTP parser refuses (headers over 16 KiB, a control character in a header) is a problem too
  (server as unknown as { on(event: 'clientError', fn: typeof answerClientError): void }).on('clientError', answerClientError);
  // an idle kept-alive connection is closed after a minute, not Node's 5 s: a client (a load
  // balancer, the SDK's undici pool) that reuses one just as a short timeout passes gets "other
  // side closed" (seen in a CI run of test/e2e/broker.test.ts). Node times a request's headers from
  // its first byte, not from the connection's last response, so this idle bound may exceed them.
  server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  const address = server.address();
  return { app, url: `http://${HOST}:${address.port}`, shutdownProgress };
}

/** The request and response of a route served on the HTTP adapter directly (Express under Nest). */
interface RawRequest {
  headers: Record<string, string | string[] | undefined>;
  method?: string;
  url?: string;
}
interface RawResponse {
  headersSent: boolean;
  statusCode?: number;
  once?(event: 'finish', fn: () => void): void;
  status(code: number): RawResponse;
  setHeader(n: string, v: string): void;
  json(body: unknown): void;
  end(body?: string): void;
}

/**
 * The service's {@link Authenticator} when it has one and authentication is on (admission and
 * publication, the services callers reach), else null (the internal services have none). Looked up
 * through the {@link ModuleRef}: a lookup through the application itself that finds nothing is
 * logged by Nest as an ERROR with its stack (a trial: one per `GET /partitions` on every internal
 * service) before it is thrown.
 */
function authenticatorOf(app: INestApplication): Authenticator | null {
  try {
    const auth = app.get(ModuleRef).get(Authenticator, { strict: false });
    return auth.disabled ? null : auth;
  } catch {
    return null;
  }
}

/**
 * Serves `GET /partitions` (contracts `PartitionsBody`): this replica's share of its service's
 * partitions, `{service, instance, partitionCount, partitions, members}` (docs/operations.md). An
 * operator view: on a service with authentication on (admission, publication) it wants a bearer
 * token with `runplane:admin` (401 without a valid token, 403 without the scope); the internal
 * services, which have no authentication and are not exposed, serve it openly.
 */
function servePartitions(app: INestApplication): void {
  const adapter = app.getHttpAdapter() as unknown as {
    get(path: string, handler: (req: RawRequest, res: RawResponse) => void): unknown;
  };
  // looked up with the first request (the application is initialized by then) and kept
  let found: { auth: Authenticator | null } | undefined;
  adapter.get('/partitions', (req, res) => {
    // mounted before Nest's request logging runs: its line is written here, naming the caller as those do
    const started = Date.now();
    let caller: Principal | undefined;
    res.once?.('finish', () =>
      app.get(PinoNestLogger).log(
        // the request and response themselves, as pino-http logs them (its serializers, its redaction of
        // credentials), and its message (pino takes `msg` from the object when no message is given)
        { req, res, responseTime: Date.now() - started, ...principalFields(caller), msg: 'request completed' },
      ),
    );
    found ??= { auth: authenticatorOf(app) };
    const { auth } = found;
    if (!auth) return answerPartitions(app, res);
    auth
      .authenticate(req.headers.authorization)
      .then((principal) => {
        caller = principal;
        if (!principal.admin)
          throw apiError(403, 'forbidden', '/partitions needs the runplane:admin scope', { extensions: { requiredScope: ADMIN_SCOPE } });
        answerPartitions(app, res);
      })
      .catch((e: unknown) => {
        writeProblem(res, e instanceof ApiError ? e : apiError(500, 'internal_error', 'internal error; see the service log'), '/partitions');
      });
  });
}

/** Answers `/partitions` with this replica's share (an empty share when the service has no partition consumers). */
function answerPartitions(app: INestApplication, res: RawResponse): void {
  let body: PartitionsBody;
  try {
    const o = app.get(PartitionOwnership, { strict: false });
    body = { service: o.service, instance: o.instance, partitionCount: o.partitionCount, partitions: o.partitions(), members: o.members() };
  } catch {
    body = { service: 'unknown', instance: '', partitionCount: 0, partitions: [], members: [] };
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify(body));
}

/**
 * Starts a service as a process: {@link startService} with shutdown hooks, then prints exactly one
 * line `<name> ready on http://<host>:<port>` to stdout once it serves (process supervisors and
 * the demo wait for it; logs go to stderr), after one full garbage collection that returns the
 * start-up's garbage to the OS (kit `releaseStartupMemory`; skipped, in this thread and the worker
 * threads, with `RUNPLANE_STARTUP_COLLECTION=false`: contracts `MemoryConfig`); from then on the heap pages a burst of
 * work freed go back to the OS once the service is quiet again (kit `IdleMemoryRelease`). SIGTERM/SIGINT shut down gracefully
 * within `RUNPLANE_SHUTDOWN_GRACE_SECONDS` (shutdown.ts): the drain, then the consumers stop
 * fetching and their in-flight handlers finish, connections drain, the process exits 0; past the
 * bound it logs what it could not finish and exits 1; a second signal exits at once.
 */
export async function runService(spec: ServiceSpec): Promise<INestApplication> {
  // before anything starts: the worker threads started on the way are told the same
  setStartupCollection(loadConfig(MemoryConfig).RUNPLANE_STARTUP_COLLECTION);
  const { app, url } = await startService(spec, { shutdownHooks: true });
  // what loading the modules and starting Nest left behind goes back to the OS before any work
  // (with the heartbeat thread's own, 17-21 MiB of idle RSS per service; docs/performance.md);
  // nothing when `RUNPLANE_STARTUP_COLLECTION=false`
  releaseStartupMemory();
  // and what a burst of work freed, once the service is quiet again (V8 keeps freed pages resident)
  new IdleMemoryRelease().start();
  process.stdout.write(`${spec.name} ready on ${url}\n`);
  return app;
}

/**
 * Process entry helper: runs the service, or writes why it could not start as its last log line
 * (level 60, fatal; `msg` `<name> failed to start: <reason>`, the reason naming the setting or the
 * URL; `err` the error's type, message and stack), the only line that names that failure, and exits 1.
 */
export function main(spec: ServiceSpec): void {
  runService(spec).catch((e: unknown) => {
    process.stderr.write(
      logLine(spec.name, 60, {
        msg: `${spec.name} failed to start: ${e instanceof Error ? e.message : String(e)}`,
        ...(e instanceof Error ? { err: { type: e.name, message: e.message, stack: e.stack } } : {}),
      }),
    );
    process.exit(1);
  });
}

export * from './command-handler.js';
export * from './command-handler.provider.js';
