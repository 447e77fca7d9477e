/**
 * Configuration from environment variables, validated at start-up. Every variable is documented
 * in docs/configuration.md; a bad value stops the process with the zod reason.
 */
import { z } from 'zod';
import { ParkingToolNames, TestToolNames } from './tools.js';

/** Node timers overflow (and fire at once) past 2^31 - 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * A whole decimal number from an environment variable, within [min, max]; unset or empty means
 * `def`. `0x1F`, `1e3`, `12abc`, `-1` are refused (plain `Number()` would accept some of them).
 */
export function envInt(def: number, min: number, max = Number.MAX_SAFE_INTEGER) {
  return z.preprocess(
    (v) => (v === undefined || v === '' ? String(def) : v),
    z.string().regex(/^\d+$/, 'must be a whole decimal number').transform(Number).pipe(z.number().int().min(min).max(max)),
  );
}

/**
 * The servers named by a `NATS_URL`: one URL, or a comma-separated list (every node of a cluster),
 * trimmed, empty entries dropped, in the given order.
 */
export function natsServerList(natsUrl: string): string[] {
  return natsUrl
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** An optional text setting (a file path, a name): unset and empty both read as undefined. */
const optionalSetting = () =>
  z
    .string()
    .optional()
    .transform((v) => (v ? v : undefined));

export const BusConfig = z.object({
  /**
   * The NATS server, or every node of a JetStream cluster as a comma-separated list
   * (`nats://a:4222,nats://b:4222,nats://c:4222`): the client connects to one and moves to another
   * when it goes away (see {@link natsServerList}).
   */
  NATS_URL: z
    .string()
    .default('nats://127.0.0.1:4222')
    .refine((v) => natsServerList(v).length > 0, 'must name at least one NATS server (comma-separated for a cluster)'),
  /** Credentials of this service's NATS user (deploy/nats/accounts.conf), when the server requires them. */
  NATS_USER: z.string().min(1).optional(),
  NATS_PASSWORD: z.string().optional(),
  /**
   * PEM CA bundle (a file path) the NATS server's certificate is verified against: set, every
   * connection requires TLS and refuses a server whose certificate does not chain to it or does
   * not name the host of `NATS_URL`. Unset or empty: TLS only when the server requires it (or the
   * URL is `tls://`), verified against the system's CAs. A missing or non-PEM file stops the
   * process at start-up (libs/eventlog tls.ts).
   */
  NATS_CA_FILE: optionalSetting(),
  /**
   * This service's Ed25519 event signing key (a file path, PKCS#8 PEM): set, every event the service
   * appends carries its signature (`Runplane-Signer`, `Runplane-Key-Id`, `Runplane-Signature`;
   * libs/eventlog signing.ts). Only a service that owns facts takes one; an unreadable or
   * non-Ed25519 file stops the process at start-up.
   */
  RUNPLANE_SIGNING_KEY_FILE: optionalSetting(),
  /**
   * The deployment's event signing public keys (a file path, JSON `{ "<owner>": ["<SPKI PEM or raw
   * base64>", ...] }`, several per owner while a key rotates): set, every reader refuses a message
   * whose signature is missing, does not verify, or is not its event type's owner's (a forgery
   * with a stolen NATS password, docs/guarantees.md).
   */
  RUNPLANE_SIGNING_PUBLIC_KEYS_FILE: optionalSetting(),
  /**
   * The first stream sequence whose events must be signed (default 1: every one). A log that holds
   * events from before signing was switched on sets it to the stream's last sequence plus one at
   * the switch: an unsigned event below it is still a fact, a signed one is checked as any other
   * (docs/operations.md "Event signing keys").
   */
  RUNPLANE_SIGNING_REQUIRED_FROM_SEQ: envInt(1, 1),
  /**
   * Whether a service verifies the signature of every event it reads (default `true`, with
   * `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE` set). `false`: the service still signs what it appends
   * and checks its own key against the public keys at start-up, but acts on what the broker's
   * per-service users let through without verifying signatures (about 10-25 ms of CPU per W1 Run
   * across the services, docs/performance.md); `runplane audit` and `@runplane/consumer` verify
   * whatever this says. What that gives up: docs/guarantees.md.
   */
  RUNPLANE_SIGNING_VERIFY: z
    .enum(['true', 'false', ''])
    .optional()
    .transform((v) => v !== 'false'),
  /** JetStream stream holding every Run's subjects. */
  RUNPLANE_STREAM: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('RUNPLANE'),
  /** First subject token; the stream captures `<prefix>.run.>`. */
  RUNPLANE_SUBJECT_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .default('rp'),
  /** How long a delivered event may stay unacknowledged before it is redelivered (handlers heartbeat while they run), ms. */
  RUNPLANE_ACK_WAIT_MS: envInt(5_000, 500, MAX_TIMER_MS),
  /** The Run stream's duplicate window when a process creates it, ms (a copy published later is a new message, recognised as a replay). */
  RUNPLANE_DUPLICATE_WINDOW_MS: envInt(120_000, 100, 7 * 24 * 3600 * 1000),
  /**
   * Partitions the Runs are spread over when a process creates the stream (1..256; fixed for the
   * stream's life, stored in its metadata; an existing stream's own count wins). At least the most
   * replicas any service runs (docs/event-log.md "Partitions").
   */
  RUNPLANE_PARTITIONS: envInt(8, 1, 256),
  /**
   * How long one beat of a process's membership heartbeat vouches for it, ms (beaten every third):
   * a replica whose heartbeat is older is counted gone and its partitions move to the others.
   */
  RUNPLANE_MEMBER_TTL_MS: envInt(3_000, 300, 60_000),
  /**
   * Copies JetStream keeps of the Run stream, the buckets and the object store when they are
   * created (`num_replicas`): 1 on a single server, 3 on a 3-node cluster (a node may be lost, K11).
   */
  RUNPLANE_NATS_REPLICAS: z.preprocess(
    (v) => (v === undefined || v === '' ? '1' : v),
    z.enum(['1', '3'], { message: 'must be 1 (one server) or 3 (a 3-node JetStream cluster)' }).transform(Number),
  ),
});
export type BusConfig = z.infer<typeof BusConfig>;

/** Whether `value` is a PostgreSQL connection URL (`postgresql://` or `postgres://`). */
function isPostgresUrl(value: string): boolean {
  try {
    return ['postgresql:', 'postgres:'].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}

export const DatabaseConfig = z.object({
  // refused at start-up, named, rather than as a bare "Invalid URL" from the first connection;
  // the message never repeats the value (it may hold a password)
  DATABASE_URL: z
    .string()
    .default('postgresql://postgres@127.0.0.1:5432/runplane')
    .refine(isPostgresUrl, { message: 'must be a PostgreSQL URL: postgresql://user[:password]@host[:port]/database' }),
});

/**
 * A comma-separated list of tool names (blanks ignored), each one of `known`: an unknown name is
 * refused at start-up, naming it and the known ones (a typo would silently take a tool out of
 * every grant, or leave a test tool unrun).
 */
function toolNameList(defaultValue: string, known: readonly string[]) {
  return z
    .string()
    .default(defaultValue)
    .superRefine((value, ctx) => {
      const unknown = value
        .split(',')
        .map((t) => t.trim())
        .filter((t) => t !== '' && !known.includes(t));
      if (unknown.length > 0)
        ctx.addIssue({ code: 'custom', message: `unknown tool name(s) ${unknown.join(', ')}; the known ones are ${known.join(', ')}` });
    });
}

/** One model's price as written in `RUNPLANE_MODEL_PRICES`: currency units per million tokens. */
const PriceSetting = z
  .object({
    inputPerMTok: z.number().nonnegative().max(1_000_000),
    outputPerMTok: z.number().nonnegative().max(1_000_000),
    currency: z.string().regex(/^[A-Z]{3}$/, 'currency is a 3-letter code such as USD'),
  })
  .strict();

/**
 * `RUNPLANE_MODEL_PRICES`: JSON `{ "<model>": { "inputPerMTok": 3, "outputPerMTok": 15,
 * "currency": "USD" } }` (currency units per million tokens), parsed into integer micro-units per
 * million tokens (`TokenPrice`, K7: no floats on the ledger). Unset or empty: no model is priced.
 */
export const ModelPrices = z.preprocess(
  (v) => (v === undefined || v === '' ? '{}' : v),
  z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: 'custom', message: 'must be JSON: {"<model>": {"inputPerMTok": n, "outputPerMTok": n, "currency": "USD"}}' });
        return z.NEVER;
      }
    })
    .pipe(z.record(z.string().min(1), PriceSetting))
    .transform(
      (prices) =>
        Object.fromEntries(
          Object.entries(prices).map(([model, p]) => [
            model,
            {
              currency: p.currency,
              inputMicrosPerMTok: Math.round(p.inputPerMTok * 1_000_000),
              outputMicrosPerMTok: Math.round(p.outputPerMTok * 1_000_000),
            },
          ]),
        ) as Record<string, { currency: string; inputMicrosPerMTok: number; outputMicrosPerMTok: number }>,
    ),
);

export const ModelConfig = z
  .object({
    OPENAI_BASE_URL: z.string().url().default('http://127.0.0.1:8090/v1'),
    OPENAI_API_KEY: z.string().default('runplane-scripted'),
    RUNPLANE_MODEL: z.string().default('runplane-scripted-research'),
    /** Per model request, milliseconds. */
    RUNPLANE_MODEL_TIMEOUT_MS: envInt(120_000, 1, MAX_TIMER_MS),
    /** The most `max_tokens` one model request asks for (what the model accepts in one reply), within the Run's output budget (K7). */
    RUNPLANE_MODEL_MAX_TOKENS: envInt(16_384, 1),
    /**
     * Seconds before a Run's deadline from which research stops and, when the Run has material and
     * a final-output reserve, the one finalization request answers from it (K9); at most a quarter of
     * the Run's whole time. 0: off.
     */
    RUNPLANE_FINALIZATION_LEAD_SECONDS: envInt(60, 0, 366 * 24 * 3600),
    /** Model requests in flight at once per model, for all Runs of one runtime process (K7). */
    RUNPLANE_MODEL_MAX_CONCURRENT: envInt(8, 1, 10_000),
    /** Smallest gap between the starts of two model requests per runtime process, ms (0: no rate limit). */
    RUNPLANE_MODEL_MIN_INTERVAL_MS: envInt(0, 0, MAX_TIMER_MS),
    /**
     * The retry backoff of a failed model request (connection, timeout, 429, 5xx; K7), ms: the n-th
     * failure in a row waits `MIN * 2^(n-1) * (1 + jitter)` (jitter in [0, 1)), at most `MAX`, and at
     * least the provider's `Retry-After`, before the Run's next request; never past its deadline.
     */
    RUNPLANE_MODEL_RETRY_MIN_MS: envInt(1_000, 0, MAX_TIMER_MS),
    /** The longest retry backoff of a failed model request, ms (see `RUNPLANE_MODEL_RETRY_MIN_MS`). */
    RUNPLANE_MODEL_RETRY_MAX_MS: envInt(30_000, 0, MAX_TIMER_MS),
    /** Token prices per model (`ModelPrices`): what turns every turn's usage into money on the ledger (K7). */
    RUNPLANE_MODEL_PRICES: ModelPrices,
  })
  .superRefine((v, ctx) => {
    if (v.RUNPLANE_MODEL_RETRY_MIN_MS > v.RUNPLANE_MODEL_RETRY_MAX_MS)
      ctx.addIssue({
        code: 'custom',
        path: ['RUNPLANE_MODEL_RETRY_MIN_MS'],
        message: `must be at most RUNPLANE_MODEL_RETRY_MAX_MS (${v.RUNPLANE_MODEL_RETRY_MAX_MS})`,
      });
  });
export type ModelConfig = z.infer<typeof ModelConfig>;

export const LimitsConfig = z
  .object({
    RUNPLANE_MAX_MODEL_REQUESTS: envInt(8, 1),
    RUNPLANE_MAX_TOOL_CALLS: envInt(16, 0),
    /** Overall Run deadline, seconds from admission. */
    RUNPLANE_RUN_DEADLINE_SECONDS: envInt(900, 1, 366 * 24 * 3600),
    /** Prompt tokens all model requests of one Run may consume (K7). */
    RUNPLANE_MAX_INPUT_TOKENS: envInt(2_000_000, 1),
    /** Completion tokens all model requests of one Run may consume (K7). */
    RUNPLANE_MAX_OUTPUT_TOKENS: envInt(64_000, 1),
    /** Model requests kept for the finalization request, out of RUNPLANE_MAX_MODEL_REQUESTS (K7, K9). */
    RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS: envInt(1, 0),
    /** Completion tokens kept for the finalization request, out of RUNPLANE_MAX_OUTPUT_TOKENS. */
    RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS: envInt(4_000, 0),
    /** A Run without progress (answer text, a receipt, a valid tool call) for this long ends, seconds (K7). */
    RUNPLANE_NO_PROGRESS_SECONDS: envInt(300, 1, 366 * 24 * 3600),
  })
  .superRefine((v, ctx) => {
    // the reserve is kept out of the limit: one that takes all of it leaves research nothing, and
    // every Run would stop before its first model request
    if (v.RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS >= v.RUNPLANE_MAX_MODEL_REQUESTS) {
      ctx.addIssue({
        code: 'custom',
        path: ['RUNPLANE_FINAL_RESERVE_MODEL_REQUESTS'],
        message: `must be less than RUNPLANE_MAX_MODEL_REQUESTS (${v.RUNPLANE_MAX_MODEL_REQUESTS}): research needs at least one model request`,
      });
    }
    if (v.RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS >= v.RUNPLANE_MAX_OUTPUT_TOKENS) {
      ctx.addIssue({
        code: 'custom',
        path: ['RUNPLANE_FINAL_RESERVE_OUTPUT_TOKENS'],
        message: `must be less than RUNPLANE_MAX_OUTPUT_TOKENS (${v.RUNPLANE_MAX_OUTPUT_TOKENS}): research needs at least one output token`,
      });
    }
  });

/**
 * A whole decimal number from an environment variable, within [min, max]; unset or empty means
 * null (no limit). Refused as {@link envInt} refuses.
 */
export function envOptionalInt(min: number, max = Number.MAX_SAFE_INTEGER) {
  return z.preprocess(
    (v) => (v === undefined || v === '' ? null : v),
    z
      .string()
      .regex(/^\d+$/, 'must be a whole decimal number, or unset for no limit')
      .transform(Number)
      .pipe(z.number().int().min(min).max(max))
      .nullable(),
  );
}

/**
 * Per-principal quotas of admission (docs/configuration.md "Quotas"): a new Run over one is refused
 * 429 `quota_exceeded` and nothing is appended. Unset: no limit. Counted from the Run projections
 * (rebuilt from the log, K11).
 */
export const QuotaConfig = z.object({
  /** Runs of one principal admitted and not settled yet (child Runs not counted: they are charged to their parent's grant). */
  RUNPLANE_QUOTA_CONCURRENT_RUNS: envOptionalInt(1, 1_000_000),
  /** Runs one principal may have admitted in any sliding hour (child Runs not counted). */
  RUNPLANE_QUOTA_RUNS_PER_HOUR: envOptionalInt(1, 1_000_000),
  /**
   * Money one principal's Runs admitted in any sliding 24 h may cost (measured, plus the upper bound
   * of what is not measured yet or stayed unknown; child Runs included), micro-units of the price's
   * currency (1 USD = 1,000,000), each currency on its own; up to 10^15 (a billion USD).
   */
  RUNPLANE_QUOTA_COST_MICROS_PER_DAY: envOptionalInt(1, 1_000_000_000_000_000),
});
export type QuotaConfig = z.infer<typeof QuotaConfig>;

export const HttpConfig = z.object({ HOST: z.string().min(1).default('127.0.0.1') });

export const ToolsConfig = z.object({
  /** A tool call without an outcome by then gets an `unknown` receipt (K5), milliseconds. */
  RUNPLANE_TOOL_TIMEOUT_MS: envInt(60_000, 1, MAX_TIMER_MS),
  /** A running call's claim lasts this long unless renewed (renewed every third of it), ms. */
  RUNPLANE_TOOL_CLAIM_TTL_MS: envInt(15_000, 100, MAX_TIMER_MS),
  /** How often each worker looks for expired claims to wake their Runs, ms. */
  RUNPLANE_TOOL_CLAIM_SWEEP_MS: envInt(5_000, 50, MAX_TIMER_MS),
  /** Ack wait of the tools consumer, ms (redelivery of a proposal still being handled). */
  RUNPLANE_TOOLS_ACK_WAIT_MS: envInt(5_000, 100, MAX_TIMER_MS),
  /** After the timeout, how long a call may still run for a late observation before its thread is stopped, ms. */
  RUNPLANE_TOOL_ABANDON_MS: envInt(300_000, 0, MAX_TIMER_MS),
  /** Worker threads executing tools. */
  RUNPLANE_TOOL_THREADS: envInt(2, 1, 64),
  /** Comma-separated test tools to grant and execute (`record_effect`); empty in production. */
  RUNPLANE_TEST_TOOLS: toolNameList('', TestToolNames),
  /** File `record_effect` appends its lines to. */
  RUNPLANE_RECORD_EFFECT_FILE: z.string().default(''),
  /**
   * Folder of the issuer holdings files the research tools read; empty (the default): the
   * project's `../shared/data/etf-holdings` when present, else the illustrative sample
   * (holdings `resolveDataFolder`).
   */
  RUNPLANE_DATA_DIR: z.string().default(''),
  /**
   * Folder where the tool threads keep what each data file turned out to be (holdings
   * `InspectionStore`), so that another thread or process reading the same files does not parse
   * them again; empty (the default): each thread parses for itself. It must be this user's own
   * folder, mode 0700 (created so when missing), no symbolic link, under folders no one else may
   * write unless sticky: start-up refuses anything else (holdings `unsafeStoreFolder`).
   */
  RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: z.string().default(''),
  /**
   * FAULT INJECTION, tests only; empty (off) by default and in production. While the file at this
   * path exists, a tools wake that has taken the claims of the calls it decided to dispatch pauses
   * before appending their `tool.call.dispatched`, so that a test can make a peer's wake meet
   * those claims (a wake-up lost to a claim).
   */
  RUNPLANE_FAULT_TOOLS_DISPATCH_PAUSE_FILE: z.string().default(''),
});
/** Execution leases (K6, K10): read by the runtime (holder) and recovery (watcher). */
export const LeaseConfig = z.object({
  /** A held lease without a renewal for this long has expired and its Run is fenced, ms (renewed every third of it). */
  RUNPLANE_LEASE_TTL_MS: envInt(15_000, 300, MAX_TIMER_MS),
});
export type LeaseConfig = z.infer<typeof LeaseConfig>;

/**
 * Drain on SIGTERM (a rollout), read by the runtime and the tools service: how long a stopping
 * replica may finish what it has in flight (a model request and its turn record, a dispatched tool
 * call and its receipt) before it hands its Runs over. Past it, what is still in flight is aborted
 * (the runtime releases those Runs `stopping`: recovery fences them, the lifecycle settles them
 * `interrupted`). Keep it below {@link ShutdownConfig}'s bound (the runtime and tools refuse to
 * start otherwise), which leaves the few seconds the process needs to close its connections.
 */
export const DrainConfig = z.object({
  /** The drain bound, s (0: abort at once, as a kill would, but still release honestly). */
  RUNPLANE_DRAIN_SECONDS: envInt(20, 0, 3_600),
});
export type DrainConfig = z.infer<typeof DrainConfig>;

/**
 * The shutdown bound, read by every service: from the first SIGTERM or SIGINT, how long the process
 * may take to stop (the drain of {@link DrainConfig} included, then closing its consumers and
 * connections) before it logs what it could not finish and exits anyway (code 1). A NATS server
 * that is gone or frozen otherwise held a stopping service until its pod was SIGKILLed. Keep it
 * above `RUNPLANE_DRAIN_SECONDS` (a runtime or tools process refuses to start otherwise) and below
 * the pod's `terminationGracePeriodSeconds` minus any `preStop` (Kubernetes' default 30, which
 * this default of 25 fits; deploy/k8s sets 38 against a grace of 45 and a 5 s preStop).
 */
export const ShutdownConfig = z.object({
  /** The shutdown bound, s. */
  RUNPLANE_SHUTDOWN_GRACE_SECONDS: envInt(25, 1, 3_600),
});
export type ShutdownConfig = z.infer<typeof ShutdownConfig>;

/**
 * Memory, read by every service when it starts. `RUNPLANE_STARTUP_COLLECTION` (default `true`):
 * once started, each thread of the process (the main one, the heartbeat worker, the tools' threads)
 * runs one full collection that returns its start-up garbage to the OS, 17-21 MiB of idle RSS per
 * service. `false` skips them, saving about 1.6 s of CPU per start of seven services: for stacks that
 * start often and live briefly (the test suites), not for a deployment (docs/performance.md).
 */
export const MemoryConfig = z.object({
  RUNPLANE_STARTUP_COLLECTION: z
    .enum(['true', 'false', ''])
    .optional()
    .transform((v) => v !== 'false'),
});
export type MemoryConfig = z.infer<typeof MemoryConfig>;

/** Human waits (K10), read by the runtime when it opens a wait. */
export const WaitConfig = z.object({
  /** How long a question for a human stays answerable, s (capped by the Run's deadline). */
  RUNPLANE_WAIT_TTL_SECONDS: envInt(3_600, 1, 366 * 24 * 3600),
  /**
   * FAULT INJECTION, tests only; empty (off) by default and in production. While the file at this
   * path exists, the runtime pauses after recording a park (`wait.opened`, `child.run.requested`)
   * and before releasing the Run's lease `parked`, so that a test can kill it in that window (K10).
   */
  RUNPLANE_FAULT_PARK_PAUSE_FILE: z.string().default(''),
});
export type WaitConfig = z.infer<typeof WaitConfig>;

/**
 * Caps on the observer streams (`GET /v1/runs/{runId}/events`) one publication process holds open,
 * read by publication. Each open stream holds one ordered JetStream consumer on the Run stream,
 * whose consumers are limited (10,000 named by the stream, eventlog `RUN_STREAM_MAX_CONSUMERS`;
 * nats-server's default of 1,000 on a stream that names none), shared by every publication
 * replica's observers, the services' durables (7 per partition: 56 at the default 8 partitions)
 * and the downstream durables. Without a cap one principal opening 3,000 streams took them all,
 * and every other user's stream was answered 200 and closed at once. The defaults keep one replica
 * at about half of a stream at the server's default limit, with room for the durables and a
 * second replica's observers at a rolling update;
 * 20 per principal lets one user watch 20 Runs at once (a CLI `watch`, a few viewer tabs) while no
 * fewer than 25 principals are needed to fill a replica. With authentication disabled every caller
 * is one principal (`anonymous`): only the process cap applies then. Over the principal's cap a
 * stream is refused 429 `observer_limit`; over the process cap 503 `observer_capacity`; both with
 * `Retry-After` (docs/operations.md "Limits and where each holds").
 */
export const ObserverConfig = z.object({
  /** Observer streams one publication process holds open at once, all principals together. */
  RUNPLANE_OBSERVER_STREAMS_MAX: envInt(500, 1, 100_000),
  /**
   * Observer streams one principal (a token's `sub`, admins included) holds open at once on one
   * publication process; one above `RUNPLANE_OBSERVER_STREAMS_MAX` leaves the process cap to bind.
   */
  RUNPLANE_OBSERVER_STREAMS_PER_PRINCIPAL: envInt(20, 1, 100_000),
});
export type ObserverConfig = z.infer<typeof ObserverConfig>;

/** Parking tools admission grants every Run admitted from a user's message (comma-separated; empty = none). */
export const ParkingToolsConfig = z.object({ RUNPLANE_PARKING_TOOLS: toolNameList('ask_human,spawn_subagent,ask_clarification', ParkingToolNames) });

/** How much the runtime sends the model per request (K2, K3), read by the runtime. */
export const ContextConfig = z.object({
  /**
   * Upper bound on one model request's messages, in characters of their JSON. Over it, whole
   * units are left out, oldest first: carried history items, then whole earlier turns (an
   * assistant message with its tool calls and every result of them), never a call without its
   * result. At most half of it is carried from earlier Runs (`context.carried`).
   */
  RUNPLANE_CONTEXT_MAX_CHARS: envInt(200_000, 2_000, 50_000_000),
});
export type ContextConfig = z.infer<typeof ContextConfig>;

/** The recovery service. */
export const RecoveryConfig = z.object({
  /** How often recovery compares every lease with the clock, ms. */
  RUNPLANE_RECOVERY_SWEEP_MS: envInt(1_000, 50, MAX_TIMER_MS),
});
export type RecoveryConfig = z.infer<typeof RecoveryConfig>;

/** Test tools admission grants (`RUNPLANE_TEST_TOOLS`, comma-separated); none by default. */
export const TestToolsConfig = z.object({ RUNPLANE_TEST_TOOLS: toolNameList('', TestToolNames) });
export const AdmissionPort = z.object({ ADMISSION_PORT: envInt(8081, 0, 65535) });
export const PublicationPort = z.object({ PUBLICATION_PORT: envInt(8082, 0, 65535) });

/**
 * A comma-separated list of exact browser origins (`scheme://host[:port]`, http or https, no path,
 * no trailing slash, no wildcard), trimmed, empty entries dropped; empty (the default): none.
 */
const originList = () =>
  z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean),
    )
    .pipe(
      z.array(
        z.string().refine((o) => {
          try {
            return !o.includes('*') && ['http:', 'https:'].includes(new URL(o).protocol) && new URL(o).origin === o;
          } catch {
            return false;
          }
        }, 'each entry must be an origin: http(s)://host[:port], without path or trailing slash'),
      ),
    );

/**
 * Browser origins allowed to call a service's HTTP API from another origin (CORS): the Run viewer
 * that publication serves at `/viewer/` calls admission, another origin. A comma-separated list
 * of exact origins (`scheme://host[:port]`, no path, no wildcard); empty (the default): no
 * cross-origin request is answered with CORS headers. Credentials are bearer tokens in the
 * `Authorization` header, never cookies.
 */
export const CorsConfig = z.object({ RUNPLANE_CORS_ORIGINS: originList() });
export type CorsConfig = z.infer<typeof CorsConfig>;

/**
 * The admission origins the Run viewer (publication, `/viewer/`) may call with the user's bearer
 * token, the first one its default (exact origins as in {@link CorsConfig}; empty, the default:
 * the page calls no admission and says so). Publication serves them to the page
 * (`/viewer/config.json`) and lists them, beside its own origin, as the only `connect-src` of the
 * page's Content-Security-Policy: a link's `?admission=<url>` naming any other host is refused by
 * the page and blocked by the browser, so the token never leaves for a host the operator did not
 * configure (docs/operations.md "The Run viewer").
 */
export const ViewerConfig = z.object({ RUNPLANE_VIEWER_ADMISSION_ORIGINS: originList() });
export type ViewerConfig = z.infer<typeof ViewerConfig>;

const configTokens = new WeakMap<z.ZodObject, symbol>();

/**
 * The injection token of a configuration schema's parsed value, one per schema object: the
 * service bootstrap provides each schema's value under it (service-kit `ConfigModule`), and every
 * class or provider that needs settings injects it (service-kit `InjectConfig`, or
 * `inject: [configToken(BusConfig)]`) instead of reading `process.env`. Here, beside the schemas,
 * so that libraries below service-kit (eventlog's Nest module) use the same token.
 */
export function configToken(schema: z.ZodObject): symbol {
  let token = configTokens.get(schema);
  if (!token) {
    token = Symbol(`config:${Object.keys(schema.shape).join(',')}`);
    configTokens.set(schema, token);
  }
  return token;
}

/**
 * Parses `env` with `schema`; on failure throws an Error listing every bad variable, e.g.
 * `Invalid configuration: NATS_URL: Required`.
 */
export function loadConfig<S extends z.ZodObject>(schema: S, env: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const parsed = schema.safeParse(env);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new Error(`Invalid configuration: ${lines.join('; ')}`);
  }
  return parsed.data;
}

/**
 * Authentication of the HTTP API (admission, publication): every route but health and metrics
 * takes a bearer JWT verified against a JWKS (`RUNPLANE_AUTH_JWKS_URL`, or the file
 * `RUNPLANE_AUTH_JWKS_FILE` for tests and air-gapped sites), with its `iss` and `aud`, and an
 * expiry within `RUNPLANE_AUTH_CLOCK_SKEW_SECONDS`. Secure by default: with neither JWKS setting
 * a service refuses to start, unless `RUNPLANE_AUTH_DISABLED=true` (local tools, black-box tests),
 * which it logs as a warning.
 */
export const AuthConfig = z.object({
  RUNPLANE_AUTH_JWKS_URL: z
    .url({ protocol: /^https?$/ })
    .optional()
    .or(z.literal('').transform(() => undefined)),
  RUNPLANE_AUTH_JWKS_FILE: optionalSetting(),
  RUNPLANE_AUTH_ISSUER: optionalSetting(),
  RUNPLANE_AUTH_AUDIENCE: optionalSetting(),
  RUNPLANE_AUTH_CLOCK_SKEW_SECONDS: envInt(30, 0, 120),
  RUNPLANE_AUTH_DISABLED: z
    .enum(['true', 'false', ''])
    .optional()
    .transform((v) => v === 'true'),
});
export type AuthConfig = z.infer<typeof AuthConfig>;

/**
 * The most any Run's grant may hold, checked by the runtime before it executes a Run: defence in
 * depth against a forged admission (with admission's credentials, a `run.admitted` carrying
 * 1,000,000 model requests and a 2099 deadline was executed by a runtime that trusted its grant). A Run over it stops at
 * once, `run.execution.finished` reason `grant-refused`, and settles `failed`. Keep each at or
 * above the matching admission limit (`LimitsConfig`), or every Run is refused.
 */
export const GrantCeilingConfig = z.object({
  RUNPLANE_GRANT_CEILING_MODEL_REQUESTS: envInt(64, 1),
  RUNPLANE_GRANT_CEILING_TOOL_CALLS: envInt(256, 0),
  /** From admission to the Run's deadline, seconds. */
  RUNPLANE_GRANT_CEILING_DEADLINE_SECONDS: envInt(24 * 3600, 1, 366 * 24 * 3600),
  RUNPLANE_GRANT_CEILING_INPUT_TOKENS: envInt(20_000_000, 1),
  RUNPLANE_GRANT_CEILING_OUTPUT_TOKENS: envInt(1_000_000, 1),
  /** The most money a Run's grant may hold (`maxCost`), micro-units of its currency (100 USD); admission refuses more (400). */
  RUNPLANE_GRANT_CEILING_COST_MICROS: envInt(100_000_000, 1),
});
export type GrantCeilingConfig = z.infer<typeof GrantCeilingConfig>;
