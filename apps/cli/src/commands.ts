import { randomUUID } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BusConfig, DatabaseConfig, Id, loadConfig, MessageContent, type RunEvent } from '@runplane/contracts';
import { retry } from '@runplane/kit/retry';
import { postMessagePatiently, RunplaneClient, RunplaneHttpError, type RunplaneEndpoints } from '@runplane/client';
import type { DevAuth, NatsUsers } from '@runplane/devstack';
import { DEFAULT_DOWNSTREAM_CONSUMERS, EventLog, StreamNotFound } from '@runplane/eventlog';
import { resolveDataFolder } from '@runplane/holdings/data-folder';
import type { EmbeddedDatabase } from '@runplane/projections';
import type { AuditOptions } from './audit.js';
import { repoRoot } from './local-stack.js';
import { readCommands, withReadCredentials } from './read-commands.js';
import {
  AnswerAssembly,
  exitCodeOf,
  renderAnswer,
  commandFor,
  renderLive,
  renderProtocol,
  renderSettlement,
  renderStatus,
  stepClocks,
  terminalSafe,
  timelineLine,
} from './render.js';

/** The default demo question on the real issuer files (../shared present). */
export const DEFAULT_QUESTION = 'Compare the holdings of SPY and QQQ: verify the disclosure date of each file and identify gaps in coverage';
/** The default question on the shipped illustrative sample. */
export const ILLUSTRATIVE_QUESTION = 'Compare the holdings of AAA and BBB: verify the disclosure date of each file and identify gaps in coverage';

const out = (line: string) => process.stdout.write(`${terminalSafe(line)}\n`);
const err = (line: string) => process.stderr.write(`${terminalSafe(line)}\n`);

/**
 * The devstack (local NATS, PostgreSQL, every service as a process), loaded only by the commands
 * that start one (`up`, `demo`): the production image has no devstack, and its CLI still serves
 * `timeline`, `audit`, `projections rebuild` and `provision`.
 */
const devstack = () => import('@runplane/devstack');
/**
 * The projections (MikroORM, PostgreSQL, PGlite) and the audit, loaded only by the commands that
 * use them (`projections rebuild`, `audit`, `up`, `demo`): `timeline`, `ask`, `watch` and `status`
 * read the log or the HTTP API and need none of them.
 */
const projections = () => import('@runplane/projections');
const auditing = () => import('./audit.js');

/**
 * How a followed Run is printed. `answer` (`ask`, `continue`, `reply`, `demo`): the protocol
 * lines as the facts arrive (unless `events` is false), then, once the Run settles, the answer's
 * passages together ({@link renderAnswer}), then the settlement. `live` (`watch`): every fact
 * where it happens, a passage's text where it was committed.
 */
export type FollowView = { mode: 'answer'; events: boolean } | { mode: 'live' };
const ANSWER_VIEW: FollowView = { mode: 'answer', events: true };

/**
 * Admits `question` as a new Message and follows the Run until it settles: the protocol lines
 * (`view.events`), then the answer's passages together, then the settlement. The message id
 * (`clientMessageId`, default a new UUID) is printed with the admission: asking again with the same
 * conversation and message id admits nothing new and follows the same Run (K1). Returns the
 * settlement event, or null when none was seen (see {@link exitCodeOf}).
 */
export async function ask(
  endpoints: RunplaneEndpoints,
  question: string,
  conversationId = `cli-${randomUUID()}`,
  view: FollowView = ANSWER_VIEW,
  clientMessageId: string = randomUUID(),
): Promise<RunEvent | null> {
  const client = new RunplaneClient(endpoints);
  const { status, body } = await postPatiently(client, conversationId, { clientMessageId, content: question });
  leaveOnSignal(body.runId, endpoints);
  out(`Run ${body.runId} ${status === 201 ? 'admitted' : 'already admitted'} (conversation ${conversationId}, message ${clientMessageId})`);
  return follow(client, body.runId, 0, view);
}

/**
 * Posts a message, and when admission answers 503 `dependency_unavailable` (NATS was slow to take
 * the append: restarting, or a hung node of the cluster being left) posts the same message again
 * after 2 s, up to five more times (`postMessagePatiently` of @runplane/client; safe by K1), with a
 * line on stderr each time. Any other answer is the caller's. @throws RunplaneHttpError of the last attempt.
 */
export async function postPatiently(
  client: Pick<RunplaneClient, 'postMessage'>,
  conversationId: string,
  body: Parameters<RunplaneClient['postMessage']>[1],
): ReturnType<RunplaneClient['postMessage']> {
  return postMessagePatiently(client, conversationId, body, (error, attempt) =>
    process.stderr.write(`  (${error.message}; sending message ${body.clientMessageId} again in 2 s, attempt ${attempt})\n`),
  );
}

/** What `continue` and `reply` post on top of the text: the Continue parent (K3) or the clarification answered (K2). */
export type LinkedMessage = { kind: 'continue'; parentRunId: string } | { kind: 'reply'; runId: string; clarificationId: string };

/**
 * Posts an explicit Continue of a Run (K3) or an answer to a Run's clarification (K2) in that
 * Run's conversation (read from its projection unless `conversationId` is given), prints what was
 * admitted and follows the new Run until it settles. The message id defaults to a new UUID: pass
 * the same `clientMessageId` to retry safely (K1). 404 and 409 answers are explained in words.
 * @returns the new Run's settlement, or null; throws an Error with a readable reason when refused,
 *   and the client's error when the named Run cannot be looked up (admission unreachable, 401).
 */
export async function postLinked(
  endpoints: RunplaneEndpoints,
  link: LinkedMessage,
  text: string,
  opts: { conversationId?: string; clientMessageId?: string; follow?: boolean; events?: boolean } = {},
): Promise<RunEvent | null> {
  const client = new RunplaneClient(endpoints);
  const namedRunId = link.kind === 'continue' ? link.parentRunId : link.runId;
  // a Run the projection does not show is not found (null); a refusal (401) or an admission that
  // cannot be reached is said as what it is, not as "not found"
  const conversationId = opts.conversationId ?? (await client.getRun(namedRunId))?.conversationId;
  if (!conversationId) throw new Error(`run ${namedRunId} not found (or not projected yet); give its conversation with --conversation`);
  const body = {
    clientMessageId: opts.clientMessageId ?? randomUUID(),
    content: text,
    ...(link.kind === 'continue'
      ? { continuationOfRunId: link.parentRunId }
      : { replyTo: { runId: link.runId, clarificationId: link.clarificationId } }),
  };
  let res;
  try {
    res = await postPatiently(client, conversationId, body);
  } catch (e) {
    throw new Error(refusalOf(e, link), { cause: e });
  }
  const what =
    link.kind === 'continue' ? `continuing run ${link.parentRunId}` : `answering clarification ${link.clarificationId} of run ${link.runId}`;
  if (opts.follow !== false) leaveOnSignal(res.body.runId, endpoints);
  out(
    `Run ${res.body.runId} ${res.status === 201 ? 'admitted' : 'already admitted'}, ${what} (conversation ${conversationId}, message ${body.clientMessageId})`,
  );
  return opts.follow === false ? null : follow(client, res.body.runId, 0, { mode: 'answer', events: opts.events ?? true });
}

/** A readable reason for a refused Continue or clarification answer. */
function refusalOf(e: unknown, link: LinkedMessage): string {
  if (!(e instanceof RunplaneHttpError)) return e instanceof Error ? e.message : String(e);
  const detail = e.problem?.detail ?? e.message;
  // extension members (`reason`, `field`) are in the raw body: the parsed problem keeps only the standard members
  const extra = (typeof e.body === 'object' && e.body !== null ? e.body : {}) as { reason?: string; field?: string };
  switch (e.code) {
    case 'not_found':
      return link.kind === 'continue'
        ? `cannot continue: ${detail}`
        : `cannot answer: ${detail} (only a clarification the Run really asked, in this conversation, can be answered)`;
    case 'continuation_not_eligible':
      return `cannot continue run ${link.kind === 'continue' ? link.parentRunId : ''} (${extra.reason ?? 'not eligible'}): ${detail}. Only a settled Run that completed, ended partial, or was interrupted by a lost runtime can be continued; ask a new question instead.`;
    case 'clarification_answered':
      return `cannot answer: ${detail}`;
    case 'message_conflict':
      return `this message id was used before with a different ${extra.field ?? 'body'}: ${detail}; use a new --message-id`;
    default:
      return e.message;
  }
}

/**
 * Follows an existing Run's events from after `lastEventId` until it settles.
 * @throws Error saying which `--last-event-id` is refused and why, when the server answers
 *   `invalid_cursor` (not 0 and not a position in this Run's log: K4); the caller
 *   exits non-zero.
 */
export async function watch(endpoints: RunplaneEndpoints, runId: string, lastEventId: number): Promise<RunEvent | null> {
  try {
    return await follow(new RunplaneClient(endpoints), runId, lastEventId, { mode: 'live' });
  } catch (e) {
    if (e instanceof RunplaneHttpError && e.code === 'invalid_cursor') {
      throw new Error(
        `--last-event-id ${lastEventId} is not a position in run ${runId}'s log: ${e.problem!.detail}. ` +
          `Use 0 to watch from the start, or an id this Run's stream sent.`,
        { cause: e },
      );
    }
    throw e;
  }
}

/** The longest `Retry-After` the observer honours before its next try, seconds (a larger one is waited this long). */
const MAX_RETRY_AFTER_S = 60;

/** Tries of an event stream whose publication never answered before the observer gives up (about 1.5 s of backoff). */
const UNREACHED_OBSERVER_ATTEMPTS = 3;

/**
 * Prints a Run's events from after `lastEventId` until the server ends the stream (settled), as
 * `view` says ({@link FollowView}). A dropped connection is resumed from the last event seen
 * (`Last-Event-ID`), with backoff: a disconnect is not a cancel (K4), for the observer either. A
 * stream that never opened is given up after {@link UNREACHED_OBSERVER_ATTEMPTS} tries.
 * Returns the settlement, if seen; when none is seen, the `answer` view still prints the passages
 * it has, headed as not settled, before the error propagates.
 */
async function follow(client: RunplaneClient, runId: string, lastEventId: number, view: FollowView): Promise<RunEvent | null> {
  following = runId;
  let last = lastEventId;
  let settled: RunEvent | null = null;
  const answer = new AnswerAssembly();
  // any 4xx is final: a 401 was already sent again with a newer token when there was one (a local
  // stack started again writes its token before its services verify with the new key: client refreshToken)
  const permanent = (e: unknown) => e instanceof RunplaneHttpError && e.status < 500;
  // the clarification the Run asked, if any: its reply command follows the settlement (K2)
  let clarification: Extract<RunEvent, { type: 'clarification.requested' }> | null = null;
  // the commands it prints name the services it follows, so they work when pasted
  const hint = commandFor(client.endpoints);
  const show = (event: RunEvent, seq: number) => {
    if (view.mode === 'live') return out(renderLive(event, seq, hint));
    answer.add(event);
    if (event.type === 'clarification.requested') clarification = event;
    if (event.type === 'run.settled') {
      out(renderAnswer(answer.texts()));
      out(renderSettlement(event));
      if (clarification)
        out(
          `  clarification ${clarification.data.clarificationId}: reply with: ${hint('reply', `${runId} ${clarification.data.clarificationId} "<text>"`)}`,
        );
    } else if (view.events) {
      out(renderProtocol(event, seq, hint));
    }
  };
  leaveOnSignal(runId, client.endpoints);
  try {
    await followStream();
  } finally {
    leaving?.remove();
    if (view.mode === 'answer' && !settled) out(renderAnswer(answer.texts(), false));
  }
  return settled;

  async function followStream() {
    // whether publication ever answered: a stream that never opened (nothing runs there) is given
    // up after a few tries, not after the half hour of resumes a dropped one gets (a trial's
    // `watch` with no stack running printed 30 resume lines over 2 min 18 s before failing)
    let reached = false;
    // publication answering at all (a 503 while it stops) counts as reached
    const resumes = ({ error, attemptNumber }: { error: Error; attemptNumber: number }) =>
      !permanent(error) && (reached || error instanceof RunplaneHttpError || attemptNumber < UNREACHED_OBSERVER_ATTEMPTS);
    await retry(
      'observerResume',
      async () => {
        const { ended } = await client.streamEvents(runId, {
          lastEventId: last,
          onOpen: () => (reached = true),
          onEvent: ({ seq, event }) => {
            last = seq;
            show(event, seq);
            if (event.type === 'run.settled') {
              settled = event;
              following = null;
            }
          },
        });
        reached = true;
        // a stream the server ended before the settlement (e.g. publication restarting) is resumed
        if (!settled && ended === 'server') throw new Error('the event stream ended before the settlement');
      },
      {
        shouldRetry: resumes,
        onFailedAttempt: async (c) => {
          // while a signal stops the services this command started, their streams end: the resumes
          // go on quietly until the signal's exit (130, 143) ends the command (a trial's Ctrl-C
          // mid-Run printed three resume attempts against the stopping publication)
          if (c.retriesLeft === 0 || !resumes(c) || stopping) return;
          // a refusal that says when to come back (503 observer_capacity, dependency_unavailable:
          // Retry-After) is tried again no sooner than that, on top of the backoff
          const asked = c.error instanceof RunplaneHttpError ? c.error.retryAfterSeconds : null;
          const wait = asked ? `; the server asked to wait ${asked} s` : '';
          // only a publication that never answered is given up after a few tries: one that answers
          // (a 503) is tried as long as a dropped stream is resumed, so no bound is printed
          process.stderr.write(
            reached
              ? `  (observer connection lost: ${c.error.message}${wait}; resuming after #${last}, attempt ${c.attemptNumber + 1})\n`
              : c.error instanceof RunplaneHttpError
                ? `  (${c.error.message}${wait}; trying again, attempt ${c.attemptNumber + 1})\n`
                : `  (${c.error.message}; trying again, attempt ${c.attemptNumber + 1} of ${UNREACHED_OBSERVER_ATTEMPTS})\n`,
          );
          if (asked) await new Promise((r) => setTimeout(r, Math.min(asked, MAX_RETRY_AFTER_S) * 1000));
        },
      },
    );
  }
}

/**
 * Opens the event log of the bus configuration (`NATS_URL`, `RUNPLANE_STREAM`, ...) for reading
 * only: the auditors' tools (`timeline`, `projections rebuild`, `audit`) create no stream, bucket
 * or database they did not find (K11: reads never append). Its reads make only short-lived
 * consumers of their own, deleted when the read ends.
 * @param name the connection name the NATS server shows.
 * @throws Error naming the NATS server (and the stream) when the configuration is invalid, the
 *   server cannot be reached or refuses the user, JetStream is off, or the stream does not exist
 *   (`StreamNotFound` of @runplane/eventlog).
 */
export async function openLogReadOnly(name: string): Promise<EventLog> {
  loadConfig(BusConfig); // a bad value fails here in one readable line
  return EventLog.fromEnv(name, process.env, { readOnly: true });
}

/**
 * Prints a Run's event timeline straight from the log: sequence, time, time since the previous
 * event, owner, type, summary, and each step's clock where a step ends (a model turn's duration,
 * a tool call's wait for dispatch and run time, a parked wait: K7). With `json`, one object per
 * event: `{ seq, subject, event, headers }`, `headers` holding the message's stored
 * expectation and batch headers that the log's verification reads (eventlog `STORED_HEADERS`).
 * Creates nothing ({@link openLogReadOnly}).
 */
export async function timeline(runId: string, json: boolean): Promise<number> {
  const valid = Id.safeParse(runId);
  if (!valid.success) throw new Error(`not a run id: "${runId}" (${valid.error.issues[0]?.message})`);
  const log = await withReadCredentials('timeline', process.env, () => openLogReadOnly('runplane-cli'));
  try {
    const events = await withReadCredentials('timeline', process.env, () => log.readRun(runId, 1, { headers: true }));
    if (events.length === 0) {
      process.stderr.write(`runplane: no events for run ${runId} in stream ${log.space.stream}\n`);
      return 1;
    }
    const steps = stepClocks(events);
    let previousAt: string | null = null;
    for (const stored of events) {
      const { seq, subject, event, headers } = stored;
      out(json ? JSON.stringify({ seq, subject, event, headers }) : timelineLine(stored, previousAt, steps.get(seq)));
      previousAt = event.occurredAt;
    }
    return 0;
  } finally {
    await log.close();
  }
}

/**
 * Audits one Run (`run`) or every Run (`all`, optionally admitted `since` a time) from the log
 * alone ({@link auditLog}, libs/audit): prints the report, returns 0 when every check held and
 * {@link AUDIT_BROKEN_EXIT} when one is broken. The text report's first line says which stream on
 * which NATS it read, and whether `NATS_URL` set it or it is the default (a machine's own
 * nats-server on :4222 is not a Runplane stack's); every error says it too.
 * @throws Error naming the NATS URL, the stream and the settings to check when the stream is not
 *   there, or when `--all` (no `--since`) finds no Run in it: nothing was audited, which is not
 *   "all clean" (exit 1).
 */
export async function audit(opts: Omit<AuditOptions, 'projectionsUrl'> & { projections?: boolean }): Promise<number> {
  const { auditLog, checkAuditSelection } = await auditing();
  // a bad selection (--run with --all, a bad id or time) is refused before anything connects
  checkAuditSelection(opts);
  const projectionsUrl = opts.projections ? loadConfig(DatabaseConfig).DATABASE_URL : undefined;
  const { NATS_URL, RUNPLANE_STREAM } = loadConfig(BusConfig);
  const from = process.env.NATS_URL ? 'from NATS_URL' : 'NATS_URL is not set: the default';
  const where = `stream ${RUNPLANE_STREAM} on NATS at ${NATS_URL} (${from})`;
  const settings =
    "set NATS_URL (and RUNPLANE_STREAM, NATS_USER, NATS_PASSWORD) to the stack's: `runplane up` prints them in its ready audit command; a deployment's are its services' NATS_URL and the ops user of runplane-nats-users";
  if (!opts.json) out(`reading ${where}`);
  let log: EventLog;
  try {
    log = await withReadCredentials('audit', process.env, () => openLogReadOnly('runplane-audit'));
  } catch (e) {
    if (!(e instanceof StreamNotFound)) throw e;
    throw new Error(`audit: stream ${RUNPLANE_STREAM} does not exist on NATS at ${NATS_URL} (${from}); nothing was audited (${settings})`, {
      cause: e,
    });
  }
  try {
    const empty =
      opts.all === true && opts.since === undefined ? () => new Error(`audit: ${where} holds no Run; nothing was audited (${settings})`) : null;
    return await withReadCredentials('audit', process.env, () =>
      auditLog(log, { ...opts, ...(projectionsUrl ? { projectionsUrl } : {}) }, out, empty ? { onNoRun: empty } : {}),
    );
  } finally {
    await log.close();
  }
}

/**
 * Runs `work` with a signal aborted by the first SIGINT or SIGTERM (said on stderr), so that work
 * that made something (a rebuild's fresh database) removes it before the command ends; a second
 * signal exits at once (130 after SIGINT, 143 after SIGTERM).
 */
export async function stoppable<T>(work: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const stop = new AbortController();
  const onSignal = (signal: NodeJS.Signals) => {
    if (stop.signal.aborted) process.exit(signal === 'SIGINT' ? 130 : 143);
    process.stderr.write(`runplane: ${signal}: stopping (a second one exits at once)\n`);
    stop.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return await work(stop.signal);
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

/**
 * Replays the whole log into a fresh database and compares it with the live projections (K11).
 * Exit 0 identical (the fresh database is dropped unless `keep`), 2 different (it is kept for
 * inspection). The live projections are never modified, and nothing is created that was not
 * found: the log is opened read-only ({@link openLogReadOnly}), and a missing live database
 * (`DATABASE_URL`) fails naming it before any database is created (`rebuildProjections`).
 * @throws Error naming the NATS server, the stream, the PostgreSQL server or the database it
 *   could not use.
 */
export async function rebuild(targetDatabase: string | undefined, keep = false): Promise<number> {
  const { DATABASE_URL } = loadConfig(DatabaseConfig);
  const log = await withReadCredentials('projections rebuild', process.env, () => openLogReadOnly('runplane-rebuild'));
  try {
    const { databaseUrlWith, dropDatabase, rebuildProjections } = await projections();
    log.onInvalid = (e) => out(`anomaly: ${e.message}: skipped`);
    const result = await withReadCredentials('projections rebuild', process.env, () =>
      stoppable((signal) => rebuildProjections({ log, databaseUrl: DATABASE_URL, signal, ...(targetDatabase ? { targetDatabase } : {}) })),
    );
    out(`replayed ${result.eventsApplied} event(s) from stream ${log.space.stream} into database ${result.database}`);
    for (const line of result.skipped) out(`anomaly: ${line}`);
    if (result.identicalToLive) {
      out('rebuilt projections are identical to the live ones');
      if (keep) out(`kept database ${result.database}`);
      else {
        await dropDatabase(databaseUrlWith(DATABASE_URL, 'postgres'), result.database);
        out(`dropped database ${result.database} (use --keep to keep it)`);
      }
      return 0;
    }
    out(`rebuilt projections differ from the live ones in ${result.differences.length} place(s):`);
    for (const d of result.differences.slice(0, 50)) out(`  ${d}`);
    out(`kept database ${result.database} for inspection (drop it when done)`);
    return 2;
  } finally {
    await log.close();
  }
}

/**
 * Starts NATS, the database, every service and the scripted model on their configured ports
 * (admission 8081, publication 8082, model 8090...) and keeps them running until Ctrl-C, so `ask`,
 * `watch` and `timeline` can be used against them. With `cluster`, NATS is a 3-node JetStream
 * cluster on loopback ports (stream, buckets and object store at 3 replicas; the services are
 * given every node's URL).
 */
export async function up(opts: { cluster?: boolean } = {}): Promise<number> {
  const dev = await devstack();
  const cleanup = stopOnSignal();
  const env = await prepareEnvironment(opts);
  cleanup.also(() => env.close());
  // the tokens first, with the signing key the services will verify: a CLI still following a Run
  // of the previous `up` reads the new token on its first 401 (client refreshToken)
  const user = process.env.USER || 'dev';
  const token = await env.auth.mint(user, { ttlSeconds: 12 * 3600 });
  const admin = await env.auth.mint('operator', { scopes: ['runplane:admin'], ttlSeconds: 12 * 3600 });
  writeFileSync(join(env.stateDir, 'auth', 'token'), token, { mode: 0o600 });
  writeFileSync(join(env.stateDir, 'auth', 'admin-token'), admin, { mode: 0o600 });
  let stack: Awaited<ReturnType<typeof dev.startStack>>;
  try {
    stack = await dev.startStack({ env: env.env, logDir: join(env.stateDir, 'logs'), fixedPorts: true, natsUsers: env.natsUsers, ...env.model });
  } catch (e) {
    // a service that failed to start: stop what this command started (nats-server too), then fail
    await dev.stopEverything().catch(() => undefined);
    await env.close().catch(() => undefined);
    throw e;
  }
  for (const [name, p] of stack.services) {
    // nothing restarts a service here: say so at once (Runs wait for it; recovery acts on what it held)
    p.child.once('exit', (code, signal) => {
      if (!stopping)
        err(`runplane: ${name} exited (${code ?? signal}); it is not restarted: stop with Ctrl-C and run up again (logs: ${stack.logFile})`);
    });
  }
  // nor a node of the cluster: one that exits is said once (a trial killed one and `up` said nothing)
  const goneNodes = new Set<string>();
  const nodeWatch = setInterval(() => {
    for (const node of env.clusterNodes) {
      // its pid is null once its process has exited (and was reaped)
      const pid = node.pid;
      if (stopping || goneNodes.has(node.name) || (pid !== null && dev.processAlive(pid))) continue;
      goneNodes.add(node.name);
      err(
        `runplane: NATS node ${node.name} exited; it is not restarted (the cluster goes on while 2 of its 3 nodes run): stop with Ctrl-C and run up again (its log: ${node.logFile})`,
      );
    }
  }, 2_000);
  nodeWatch.unref();
  cleanup.also(async () => clearInterval(nodeWatch));
  out(`  services: ${[...stack.services.entries()].map(([n, p]) => `${n} ${p.url}`).join(', ')}`);
  out(`  model:    ${stack.modelUrl}`);
  out(`  logs:     ${stack.logFile}`);
  out(
    `  auth:     bearer tokens for "${user}" in .runplane/auth/token (the CLI uses it) and for an operator (runplane:admin) in .runplane/auth/admin-token, valid 12 h; curl -H "Authorization: Bearer $(cat .runplane/auth/token)" ...; another principal's: npm run runplane --silent -- token --sub <name> [--scope runplane:admin]`,
  );
  out(
    `  viewer:   ${stack.endpoints.publication}/viewer/?admission=${encodeURIComponent(stack.endpoints.admission)} (paste the token of .runplane/auth/token into its form)`,
  );
  const bus = loadConfig(BusConfig);
  const reads = readCommands({
    ...dev.natsEnvOf(env.natsUsers, 'ops'),
    NATS_URL: env.env.NATS_URL!,
    ...(env.env.NATS_CA_FILE ? { NATS_CA_FILE: env.env.NATS_CA_FILE } : {}),
    DATABASE_URL: env.env.DATABASE_URL!,
    RUNPLANE_STREAM: bus.RUNPLANE_STREAM,
    RUNPLANE_SUBJECT_PREFIX: bus.RUNPLANE_SUBJECT_PREFIX,
    // the stack's count (the kept stream's, when it differs from RUNPLANE_PARTITIONS), not the configured one
    RUNPLANE_PARTITIONS: env.env.RUNPLANE_PARTITIONS ?? String(bus.RUNPLANE_PARTITIONS),
  });
  out(`  reads (as the ops user; each line runs as printed, from this checkout):`);
  out(`    ${reads.timeline}`);
  out(`    ${reads.audit}`);
  out(`    ${reads.rebuild}`);
  out(
    `  consumers: downstream services: each provisioned durable pull consumer of stream ${bus.RUNPLANE_STREAM} has its own user, alone in a NATS account of its own and allowed only that durable (docs/consumers.md):`,
  );
  for (const name of DEFAULT_DOWNSTREAM_CONSUMERS) {
    const own = dev.downstreamEnvOf(env.natsUsers, name);
    out(
      `    NATS_URL=${env.env.NATS_URL}${env.env.NATS_CA_FILE ? ` NATS_CA_FILE=${env.env.NATS_CA_FILE}` : ''} NATS_USER=${own.NATS_USER} NATS_PASSWORD=${own.NATS_PASSWORD}${own.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE ? ` RUNPLANE_SIGNING_PUBLIC_KEYS_FILE=${own.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE}` : ''} RUNPLANE_CONSUMER_NAME=${name}`,
    );
  }
  out(`Running. In another terminal: ${askHint(stack.endpoints)}. Ctrl-C stops everything.`);
  return new Promise<number>(() => undefined); // until a signal stops everything
}

/**
 * The `ask` line `up` prints, naming the stack's admission and publication (`--admission`,
 * `--publication`): without them `ask` goes to 127.0.0.1:8081 and 8082 or to what the terminal's
 * `RUNPLANE_ADMISSION_URL` and `RUNPLANE_PUBLICATION_URL` say, which may be another stack.
 */
export function askHint(endpoints: { admission: string; publication: string }): string {
  return commandFor(endpoints)('ask', '"Compare the holdings of SPY and QQQ"');
}

/** A start-up line (what was started, where), left out once a signal is stopping it all: it would follow the stopping line. */
const progress = (line: string) => {
  if (!stopping) out(line);
};

/** True once a signal is stopping everything this command started (their exits are expected then). */
let stopping = false;

/** True once this command started processes and stops them on a signal ({@link stopOnSignal}). */
let stopsOnSignal = false;

/** The Run whose following a signal ends ({@link leaveOnSignal}), and how to stop listening. */
let leaving: { runId: string; remove(): void } | null = null;

/**
 * From now on until `leaving.remove()`, SIGINT or SIGTERM of a command that started no process
 * (`ask`, `watch`, `continue`, `reply` against a running stack) ends only the following of `runId`,
 * with 130 / 143 and a line naming the Run and the `watch` command that follows it again: the Run
 * goes on (a disconnect is not a cancel, K4). Set before anything names the Run on the terminal:
 * a signal sent on seeing the Run's id must find it listening (a test's Ctrl-C right after `ask`
 * printed the admission killed the CLI before its following had started listening).
 */
function leaveOnSignal(runId: string, endpoints: RunplaneEndpoints): void {
  if (stopsOnSignal || leaving?.runId === runId) return;
  leaving?.remove();
  const leave = (signal: NodeJS.Signals) => {
    out(
      `\n${signal}: stopped following. Run ${runId} goes on (leaving is not a cancel); follow it again with: ${commandFor(endpoints)('watch', runId)}`,
    );
    process.exit(SIGNAL_EXIT_CODES[signal] ?? 1);
  };
  const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
  for (const s of signals) process.once(s, leave);
  leaving = {
    runId,
    remove: () => {
      for (const s of signals) process.removeListener(s, leave);
      leaving = null;
    },
  };
}

/** The Run this command follows and has not seen settled yet, if any (named when a signal stops it). */
let following: string | null = null;

/** True once SIGINT, SIGTERM or SIGHUP is stopping what this command started: it exits on its own (130 / 143 / 129). */
export function stoppingOnSignal(): boolean {
  return stopping;
}

/** The exit code after each signal that stops the processes this CLI started (128 + the signal's number). */
const SIGNAL_EXIT_CODES: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 };

/**
 * From now on, SIGINT, SIGTERM or SIGHUP (the terminal closed) stops every process this CLI started
 * (also while they are still starting), runs the registered clean-ups and exits (130 / 143 / 129).
 * Without SIGHUP, a closed terminal killed the CLI and left its nats-server running (nats-server
 * takes SIGHUP as "reload the configuration").
 */
function stopOnSignal(): { also(fn: () => Promise<void>): void } {
  stopsOnSignal = true;
  const cleanups: (() => Promise<void>)[] = [];
  const interrupt = (signal: NodeJS.Signals) => {
    stopping = true;
    // after a hangup there is no terminal to tell
    if (signal !== 'SIGHUP') out(`\n${signal}: stopping every process this command started...`);
    void devstack()
      .then((d) => d.stopEverything())
      .then(async () => {
        for (const fn of cleanups.reverse()) await fn().catch(() => undefined);
        if (signal !== 'SIGHUP')
          out(
            following
              ? `Stopped. Run ${following} stays unsettled in the log until the stack runs again (its recovery takes it up then).`
              : 'Stopped.',
          );
      })
      .finally(() => process.exit(SIGNAL_EXIT_CODES[signal] ?? 1));
  };
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  process.once('SIGHUP', interrupt);
  return { also: (fn) => void cleanups.push(fn) };
}

/** What the demo and `up` share: NATS, the database (or the embedded one), the data folder, the model choice. */
async function prepareEnvironment(opts: { cluster?: boolean } = {}): Promise<{
  stateDir: string;
  env: NodeJS.ProcessEnv;
  /** The users of the nats-server this command started (permissions switched on). */
  natsUsers: NatsUsers;
  /** With `cluster`, its nodes (each its name, running pid and log file); none otherwise. */
  clusterNodes: readonly { readonly name: string; readonly pid: number | null; readonly logFile: string }[];
  dataSet: 'shared' | 'illustrative';
  model: { modelBaseUrl?: string };
  /** The development issuer: the services verify its tokens (authentication is on, as deployed). */
  auth: DevAuth;
  close(): Promise<void>;
}> {
  const dev = await devstack();
  const root = repoRoot();
  const stateDir = join(root, '.runplane');
  mkdirSync(stateDir, { recursive: true });
  // one stack per checkout: a second would rewrite the keys and open the store of the running one
  const releaseState = dev.lockStateDir(stateDir);
  const bus = loadConfig(BusConfig);
  const { DATABASE_URL } = loadConfig(DatabaseConfig);
  const data = resolveDataFolder();
  const realModel = process.env.RUNPLANE_DEMO_MODEL === 'external';
  if (realModel && !process.env.OPENAI_BASE_URL) {
    throw new Error('RUNPLANE_DEMO_MODEL=external needs OPENAI_BASE_URL (and OPENAI_API_KEY, RUNPLANE_MODEL) for the model endpoint');
  }
  out('Runplane');
  // always a server of its own with the Runplane users switched on, as deployed (K9 by the broker);
  // a server already running (the machine's) is never reconfigured
  const space = { stream: bus.RUNPLANE_STREAM, prefix: bus.RUNPLANE_SUBJECT_PREFIX, partitions: bus.RUNPLANE_PARTITIONS };
  const nats = opts.cluster ? await dev.startSecuredNatsCluster({ stateDir, space }) : await dev.startSecuredNats({ stateDir, space });
  progress(`  bus:      ${nats.note}`);
  let embedded: EmbeddedDatabase | null = null;
  try {
    // The NATS started here has its own log, so its projections go to a database of their own.
    // the cluster's store is a log of its own too: a database of its own
    let databaseUrl = dev.projectionDatabaseFor(DATABASE_URL, nats, nats.cluster ? join(stateDir, 'nats-cluster') : stateDir);
    // a store put in place of the kept one starts a new log: the database of the old one goes (K11)
    if (await dev.forgetProjectionsOfAnotherLog(nats, databaseUrl, DATABASE_URL)) {
      progress(
        `  database: dropped ${redactUrl(databaseUrl)}: it held the projections of a log no longer in the store (a new store starts with no Run)`,
      );
    }
    if (await dev.ensureDatabaseExists(databaseUrl)) {
      progress(`  database: ${redactUrl(databaseUrl)}${databaseUrl !== DATABASE_URL ? ' (its own, for the NATS started here)' : ''}`);
    } else {
      embedded = await (
        await projections()
      ).startEmbeddedDatabase({
        dataDir: join(
          stateDir,
          nats.cluster ? `pglite${dev.FALLBACK_NATS_SUFFIX}_cluster` : nats.child ? `pglite${dev.FALLBACK_NATS_SUFFIX}` : 'pglite',
        ),
      });
      databaseUrl = embedded.url;
      progress(
        `  database: PostgreSQL is not reachable at ${redactUrl(DATABASE_URL)}: using an embedded PostgreSQL (PGlite, migrated through MikroORM's PGlite driver, data in .runplane/pglite) served on ${embedded.url}`,
      );
    }
    progress(
      `  data:     ${data.dir}${data.dataSet === 'illustrative' ? ' (ILLUSTRATIVE sample shipped with the project: invented figures, not real holdings)' : ''}`,
    );
    // authentication on, as deployed: a signing key of this run's own, tokens minted from it
    const auth = await dev.createDevAuth(join(stateDir, 'auth'));
    return {
      stateDir,
      auth,
      env: {
        ...process.env,
        ...auth.env,
        NATS_URL: nats.url,
        // the server requires TLS with a certificate of the private CA made for it: every service verifies it
        ...dev.natsCaEnvOf(nats),
        ...(nats.cluster ? { RUNPLANE_NATS_REPLICAS: '3' } : {}),
        // the kept stream's partition count when it differs from the configured one (the stream wins)
        ...(nats.partitions !== undefined ? { RUNPLANE_PARTITIONS: String(nats.partitions) } : {}),
        DATABASE_URL: databaseUrl,
        RUNPLANE_DATA_DIR: data.dir,
      },
      natsUsers: nats.users,
      clusterNodes: nats.cluster?.nodes ?? [],
      dataSet: data.dataSet,
      model: realModel ? { modelBaseUrl: process.env.OPENAI_BASE_URL! } : {},
      async close() {
        await embedded?.close();
        await nats.stop();
        releaseState();
      },
    };
  } catch (e) {
    await embedded?.close();
    await nats.stop();
    releaseState();
    throw e;
  }
}

/**
 * The main job: NATS (started), PostgreSQL (found; database created, or an embedded one), every
 * service as its own process, the scripted model (or OPENAI_BASE_URL), one question asked and
 * followed as `ask` follows it (the protocol lines unless `opts.events` is false, then the
 * answer's passages together, then the settlement), everything stopped. Returns `ask`'s exit code
 * ({@link exitCodeOf}: 0 completed, 3 partial, 1 otherwise).
 * @throws Error before anything starts when `question` is one admission would refuse
 *   (`MessageContent`: blank, invisible, or over its size limit).
 */
export async function demo(question: string | undefined, opts: { events?: boolean } = {}): Promise<number> {
  // a question admission would refuse is refused before the stack starts, by the same rule
  const asked = question === undefined ? null : MessageContent.safeParse(question);
  if (asked && !asked.success) throw new Error(`the question: ${asked.error.issues.map((i) => i.message).join('; ')} (nothing was started)`);
  const dev = await devstack();
  const cleanup = stopOnSignal();
  const prepared = await prepareEnvironment();
  cleanup.also(() => prepared.close());
  let started = false;
  try {
    // a process that failed to start fails this at once, naming it; the stack stops what it started
    const stack = await dev.startStack({
      env: prepared.env,
      logDir: join(prepared.stateDir, 'logs'),
      natsUsers: prepared.natsUsers,
      ...prepared.model,
    });
    out(`  model:    ${stack.model ? `scripted research policy at ${stack.modelUrl} (offline)` : `${stack.modelUrl}`}`);
    out(`  services: ${[...stack.services.entries()].map(([n, p]) => `${n} ${p.url}`).join(', ')}`);
    out(`  logs:     ${stack.logFile}`);
    out('');
    started = true;
    try {
      const q = question ?? (prepared.dataSet === 'illustrative' ? ILLUSTRATIVE_QUESTION : DEFAULT_QUESTION);
      out(`Question: ${q}`);
      const token = await prepared.auth.mint('demo', { ttlSeconds: 3_600 });
      const settled = await ask({ ...stack.endpoints, token }, q, `demo-${Date.now()}`, { mode: 'answer', events: opts.events ?? true });
      return exitCodeOf(settled);
    } finally {
      await stack.stop();
    }
  } finally {
    await prepared.close();
    // said once everything is down, the nats-server included (a trial saw it printed while the
    // nats-server still ran for another 1.6 s)
    if (started) out('\nAll services stopped.');
  }
}

export { provision } from './provision.js';

/** A URL without its password, for printing. */
function redactUrl(url: string): string {
  return url.replace(/\/\/([^:@/]+):[^@/]*@/, '//$1:***@');
}

/**
 * Prints a Run's projection (`GET /v1/runs/{runId}` of admission): status, budget used against
 * its limits (unknown usage marked, K7, K9) and its clocks. Returns 0, or 1 when the Run is
 * unknown, not projected yet or another user's (admission answers all three alike).
 */
export async function status(endpoints: RunplaneEndpoints, runId: string, json: boolean): Promise<number> {
  const view = await new RunplaneClient(endpoints).getRun(runId);
  if (!view) {
    // admission answers another user's Run as it answers an unknown one (nothing of it leaks): say so
    process.stderr.write(
      `runplane: no projection for run ${runId} visible to this user (unknown, not projected yet, or another user's Run: an admin token, --scope runplane:admin, sees every Run)\n`,
    );
    return 1;
  }
  out(json ? JSON.stringify(view) : renderStatus(view, new Date()));
  return 0;
}
