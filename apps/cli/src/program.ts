/**
 * The `runplane` CLI's commands and options (commander), run by main.ts; `runplane --help` lists
 * them, docs/cli.md describes them. Exported so that the docs can be checked against it
 * (test/deploy/docs.test.ts).
 */
import { Command, InvalidArgumentError } from 'commander';
import type { RunplaneEndpoints } from '@runplane/client';
import type { postLinked } from './commands.js';
import { DEFAULT_DOWNSTREAM_CONSUMERS, DOWNSTREAM_CONSUMER_PREFIX, downstreamConsumerNames } from '@runplane/eventlog/downstream';
import { devAuthDir, devToken, MAX_TOKEN_TTL_SECONDS, mintLocalToken } from './local-stack.js';
import { AUDIT_BROKEN_EXIT, commandFor, exitCodeOf, terminalSafe } from './render.js';

/**
 * The commands' implementations (and through them NATS, PostgreSQL, the projections, the HTTP
 * client and the zod contracts), loaded by the command that runs: `runplane token`, `--help` and a
 * mistyped option load none of them.
 */
const commands = () => import('./commands.js');
const contracts = () => import('@runplane/contracts');
const eventlog = () => import('@runplane/eventlog');
const client = async (endpoints: RunplaneEndpoints) => new (await import('@runplane/client')).RunplaneClient(endpoints);

/**
 * The services' base URLs and the bearer token: `--token`, else `RUNPLANE_TOKEN`, else the token
 * `runplane up` left in .runplane/auth/token (for the stack it runs); none when there is none
 * (services with authentication disabled).
 */
const endpoints = (o: { admission: string; publication: string; token?: string }) => {
  const given = o.token ?? process.env.RUNPLANE_TOKEN;
  const token = given ?? devToken();
  // the local stack's token is read again on a 401: an `ask` that outlives its `up` (stopped and
  // started again, as a service that exited asks for) goes on with the new stack's token
  return { admission: o.admission, publication: o.publication, ...(token ? { token } : {}), ...(given ? {} : { refreshToken: devToken }) };
};
const nonNegative = (v: string) => {
  if (!/^\d+$/.test(v)) throw new InvalidArgumentError('must be a non-negative integer');
  // a stream sequence has at most 15 digits (contracts LastEventIdText); more would lose precision
  if (v.replace(/^0+(?=\d)/, '').length > 15) throw new InvalidArgumentError('must be a stream sequence of at most 15 digits');
  return Number(v);
};
/**
 * Runs a command: its exit code, or 1 with its error on stderr. `exit`: the process exits then,
 * whatever is still open (`demo` and `up`, which stop what they started before they return or
 * fail: a handle nobody closed must not keep a failed stack's command running).
 */
const run =
  (fn: () => Promise<number | void>, opts: { exit?: boolean } = {}) =>
  async () => {
    try {
      process.exitCode = (await fn()) ?? 0;
    } catch (e) {
      // a failure caused by a signal's stop (a service stopped while it started, a stream ended) is
      // not reported: the signal's own lines say what happens, and it exits 130 / 143 (a trial's
      // Ctrl-C during a demo's start ended with "publication exited (SIGTERM) before it was ready")
      if ((await commands()).stoppingOnSignal()) return;
      // the reason may quote the server (problem detail and issues): shown, never executed by the terminal
      process.stderr.write(`runplane: ${terminalSafe(e instanceof Error ? e.message : String(e))}\n`);
      process.exitCode = 1;
    }
    if (opts.exit) process.exit();
  };

/** The CLI: every command with its options and arguments; `program.parseAsync(argv)` runs one. */
export const program = new Command('runplane').description('Runplane: control plane for long-running AI research Runs');
const api = (c: Command) =>
  c
    .option(
      '--admission <url>',
      'admission service base URL (env RUNPLANE_ADMISSION_URL)',
      process.env.RUNPLANE_ADMISSION_URL ?? 'http://127.0.0.1:8081',
    )
    .option(
      '--publication <url>',
      'publication service base URL (env RUNPLANE_PUBLICATION_URL)',
      process.env.RUNPLANE_PUBLICATION_URL ?? 'http://127.0.0.1:8082',
    )
    .option('--token <jwt>', 'bearer token for the API (default: RUNPLANE_TOKEN, else the one `runplane up` wrote)');

/** Help text of every command that follows a Run to its settlement: its exit codes ({@link exitCodeOf}; docs/cli.md "Exit codes"). */
const SETTLEMENT_EXIT_CODES =
  '\nExit codes: 0 the Run settled completed; 3 it settled partial (the unanswered parts are printed with the settlement);\n' +
  '1 it settled failed, canceled or interrupted, or no settlement was seen (or a request failed).';
const NO_EVENTS = ['--no-events', "print only the answer and the settlement, not the Run's events as they arrive"] as const;

program
  .command('demo')
  .description(
    "start NATS, PostgreSQL's database (or an embedded one), every service and the scripted model; ask a question; print the Run's events, then the answer, then the settlement; stop",
  )
  .argument('[question]', 'the research question (default: the SPY/QQQ comparison)')
  .option(...NO_EVENTS)
  .addHelpText('after', SETTLEMENT_EXIT_CODES)
  .action((question: string | undefined, o: { events: boolean }) =>
    run(async () => (await commands()).demo(question, { events: o.events }), { exit: true })(),
  );

program
  .command('up')
  .description('start NATS, every service and the scripted model on their configured ports; run until Ctrl-C')
  .option('--cluster', 'run NATS as a 3-node JetStream cluster on loopback ports (stream and buckets at 3 replicas)')
  .action((o: { cluster?: boolean }) => run(async () => (await commands()).up({ cluster: o.cluster === true }), { exit: true })());

program
  .command('token')
  .description(
    'print a bearer token for any principal, minted from the signing key of the local stack (`up`, the demo) in .runplane/auth: a second user, or an operator with --scope runplane:admin',
  )
  .requiredOption('--sub <name>', "the principal (the token's sub, 1-200 characters)")
  .option('--scope <scope>', 'a scope of the token, e.g. runplane:admin (repeat for more)', (v: string, all: string[]) => [...all, v], [] as string[])
  .option('--ttl <seconds>', `how long it is valid, 1..${MAX_TOKEN_TTL_SECONDS} s`, nonNegative, 3_600)
  .option('--auth-dir <dir>', 'the folder of the signing key (default: .runplane/auth of this checkout)')
  .addHelpText(
    'after',
    '\nThe token is accepted only by the stack whose key minted it: start `up` first, and mint again after each start.\n' +
      'Example: curl -H "Authorization: Bearer $(npm run runplane --silent -- token --sub eve)" http://127.0.0.1:8081/v1/runs',
  )
  .action((o: { sub: string; scope: string[]; ttl: number; authDir?: string }) =>
    run(async () => {
      const token = await mintLocalToken({ sub: o.sub, scopes: o.scope, ttlSeconds: o.ttl, authDir: o.authDir ?? devAuthDir() });
      process.stdout.write(`${token}\n`);
      return 0;
    })(),
  );

api(
  program
    .command('ask')
    .description("ask a question to running services: the Run's events as they arrive, then the answer, then the settlement")
    .argument('<question>'),
)
  .option('--conversation <id>', 'conversation id (default: a new one)')
  .option(
    '--message-id <id>',
    'clientMessageId of this message (default: a new one); ask again with the same --conversation and --message-id to retry safely',
  )
  .option(...NO_EVENTS)
  .addHelpText('after', SETTLEMENT_EXIT_CODES)
  .action((question: string, o: { admission: string; publication: string; conversation?: string; messageId?: string; events: boolean }) =>
    run(async () =>
      exitCodeOf(await (await commands()).ask(endpoints(o), question, o.conversation, { mode: 'answer', events: o.events }, o.messageId)),
    )(),
  );

api(program.command('watch').description("follow a Run's events until it settles").argument('<runId>'))
  .option('--last-event-id <seq>', 'resume after this stream sequence', nonNegative, 0)
  .action((runId: string, o: { admission: string; publication: string; lastEventId: number }) =>
    run(async () => {
      // the server ends at once (204) when the cursor is at or after the settlement: say so, not nothing
      if (!(await (await commands()).watch(endpoints(o), runId, o.lastEventId)))
        process.stderr.write(`no events after --last-event-id ${o.lastEventId}: run ${runId} settled at or before it\n`);
      return 0;
    })(),
  );

api(program.command('cancel').description('ask to cancel a Run (it settles `canceled`, keeping what was published)').argument('<runId>'))
  .option('--reason <text>', 'why (kept with the cancel intent)')
  .action((runId: string, o: { admission: string; publication: string; reason?: string }) =>
    run(async () => {
      const api = await client(endpoints(o));
      const r = await api.cancelRun(runId, {
        ...(o.reason ? { reason: o.reason } : {}),
        user: process.env.USER ?? 'cli',
      });
      process.stdout.write(
        `cancel requested for run ${r.runId} at ${r.requestedAt}; watch it settle with: ${commandFor(endpoints(o))('watch', r.runId)}\n`,
      );
      return 0;
    })(),
  );

api(
  program
    .command('answer')
    .description("answer a Run's pending question for a human (the Run continues)")
    .argument('<runId>')
    .argument('<waitId>')
    .argument('<text>'),
).action((runId: string, waitId: string, text: string, o: { admission: string; publication: string }) =>
  run(async () => {
    const api = await client(endpoints(o));
    const r = await api.answerWait(runId, waitId, text, { user: process.env.USER ?? 'cli' });
    process.stdout.write(
      r.body.recording === 'recorded'
        ? `answer accepted for wait ${waitId} of run ${runId}; watch it continue with: ${commandFor(endpoints(o))('watch', runId)}\n`
        : `this answer was already recorded at ${r.body.answeredAt}; nothing changed\n`,
    );
    return 0;
  })(),
);

api(
  program
    .command('status')
    .description("a Run's status, budget used against its limits and its clocks (queue, execution, last progress, deadline)")
    .argument('<runId>'),
)
  .option('--json', 'the Run view as JSON (GET /v1/runs/{runId})')
  .action((runId: string, o: { admission: string; publication: string; json?: boolean }) =>
    run(async () => (await commands()).status(endpoints(o), runId, Boolean(o.json)))(),
  );
type LinkedOptions = { admission: string; publication: string; conversation?: string; messageId?: string; follow: boolean; events: boolean };
const linked = (c: Command) =>
  api(c)
    .option('--conversation <id>', "the Run's conversation (default: read from the Run)")
    .option('--message-id <id>', 'clientMessageId of this message (default: a new one); reuse it to retry safely')
    .option('--no-follow', 'do not follow the new Run')
    .option(...NO_EVENTS)
    .addHelpText('after', `${SETTLEMENT_EXIT_CODES}\nWith --no-follow: 0 once admitted.`);
/** Without following, 0 once admitted; else the same exit codes as `ask` (0 completed, 3 partial, 1 other). */
const settledOk = (e: Awaited<ReturnType<typeof postLinked>>, follow: boolean) => (follow ? exitCodeOf(e ?? null) : 0);

linked(
  program
    .command('continue')
    .description('continue a settled Run (completed, partial, or interrupted by a lost runtime) as a new, linked Run with a fresh grant (K3)')
    .argument('<runId>')
    .argument('<text>'),
).action((runId: string, text: string, o: LinkedOptions) =>
  run(async () => {
    const { postLinked } = await commands();
    const e = await postLinked(endpoints(o), { kind: 'continue', parentRunId: runId }, text, {
      ...(o.conversation ? { conversationId: o.conversation } : {}),
      ...(o.messageId ? { clientMessageId: o.messageId } : {}),
      follow: o.follow,
      events: o.events,
    });
    return settledOk(e, o.follow);
  })(),
);

linked(
  program
    .command('reply')
    .alias('clarify')
    .description("answer a Run's clarification question: a new Run linked to it, carrying the question and the original request (K2)")
    .argument('<runId>')
    .argument('<clarificationId>')
    .argument('<text>'),
).action((runId: string, clarificationId: string, text: string, o: LinkedOptions) =>
  run(async () => {
    const { postLinked } = await commands();
    const e = await postLinked(endpoints(o), { kind: 'reply', runId, clarificationId }, text, {
      ...(o.conversation ? { conversationId: o.conversation } : {}),
      ...(o.messageId ? { clientMessageId: o.messageId } : {}),
      follow: o.follow,
      events: o.events,
    });
    return settledOk(e, o.follow);
  })(),
);

program
  .command('timeline')
  .description(
    "print a Run's events from the log (NATS_URL, RUNPLANE_STREAM, RUNPLANE_SUBJECT_PREFIX); creates nothing, a missing stream is an error",
  )
  .argument('<runId>')
  .option('--json', 'one JSON object per event: seq, subject, event and the stored headers the log verifies (headers)')
  .action((runId: string, o: { json?: boolean }) => run(async () => (await commands()).timeline(runId, Boolean(o.json)))());

program
  .command('provision')
  .description(
    'create the Run stream, the KV buckets, the object store and the downstream durable consumers when missing, with RUNPLANE_NATS_REPLICAS copies, and put back a downstream durable whose configuration was changed (run as the admin NATS user: NATS_USER, NATS_PASSWORD)',
  )
  .option(
    '--downstream <names>',
    `comma-separated downstream durable consumer names to create as pull consumers, the same as given to docs nats-auth (default: ${DEFAULT_DOWNSTREAM_CONSUMERS.join(',')})`,
  )
  .action((o: { downstream?: string }) =>
    run(async () =>
      (await commands()).provision(
        process.env,
        undefined,
        o.downstream ? downstreamConsumerNames(o.downstream.split(',').map((n) => n.trim())) : DEFAULT_DOWNSTREAM_CONSUMERS,
      ),
    )(),
  );

program
  .command('projections')
  .description('projection maintenance')
  .command('rebuild')
  .description(
    'replay the log into a fresh database and compare its rows with the live projections; a missing stream or live database (DATABASE_URL) is an error, nothing is created for it',
  )
  .option('--database <name>', 'name of the fresh database (default: <live>_rebuild_<timestamp>)')
  .option('--keep', 'keep the fresh database even when it is identical')
  .action((o: { database?: string; keep?: boolean }) => run(async () => (await commands()).rebuild(o.database, Boolean(o.keep)))());

program
  .command('audit')
  .description(
    'check the guarantees of Runs (K1, K3-K11; K2 through the K3 link check) from the log alone (never the projections); reads the log, writes nothing',
  )
  .option('--run <id>', 'audit this Run (its parent and children are read for the link checks)')
  .option('--all', 'audit every Run in the log')
  .option('--since <time>', 'with --all: only Runs admitted at or after this time (ISO-8601); refused with --run')
  .option('--json', 'the report as one JSON document')
  .option(
    '--projections',
    "also rebuild the audited Runs' projections from the log into a fresh database (dropped after) and compare them with the live ones (DATABASE_URL): with --all the whole log, with --run (or --since) those Runs' rows",
  )
  .addHelpText(
    'after',
    `\nReads NATS_URL, NATS_CA_FILE, RUNPLANE_STREAM, RUNPLANE_SUBJECT_PREFIX and NATS_USER/NATS_PASSWORD (the ops user can read).\n` +
      `With RUNPLANE_SIGNING_PUBLIC_KEYS_FILE (the deployment's event signing public keys) every event's signature is checked too:\n` +
      `an unsigned event, a bad signature or a signer that is not the event type's owner is reported as an unverified message.\n` +
      `Exit codes: 0 every check held; ${AUDIT_BROKEN_EXIT} a check is broken (each violation names the event); 1 the audit could not run.`,
  )
  .action((o: { run?: string; all?: boolean; since?: string; json?: boolean; projections?: boolean }) =>
    run(async () => (await commands()).audit(o))(),
  );

const docs = program.command('docs').description('generated documentation');
docs
  .command('event-catalog')
  .description('print the event catalogue generated from the zod schemas (docs/event-catalog.md)')
  .action(async () => {
    process.stdout.write((await contracts()).renderEventCatalog());
  });
docs
  .command('openapi')
  .description('print the OpenAPI 3.1 description of every HTTP endpoint, generated from the zod schemas (docs/openapi.json)')
  .action(async () => {
    process.stdout.write((await contracts()).renderOpenApi());
  });
docs
  .command('nats-auth')
  .description(
    "print the NATS users and permissions for a deployment's stream, subject prefix and partition count (deploy/nats/accounts.conf: RUNPLANE, rp, 8), passwords from the server environment",
  )
  .option('--stream <name>', 'the Run stream (env RUNPLANE_STREAM; default RUNPLANE)')
  .option('--prefix <token>', "the subjects' first token (env RUNPLANE_SUBJECT_PREFIX; default rp)")
  .option('--partitions <n>', 'partitions, 1..256: the count the stream is provisioned with (env RUNPLANE_PARTITIONS; default 8)')
  .option(
    '--downstream <names>',
    `comma-separated durable consumer names the downstream \`consumer\` user may use, each starting with ${DOWNSTREAM_CONSUMER_PREFIX} (default: ${DEFAULT_DOWNSTREAM_CONSUMERS.join(',')})`,
  )
  .action((o: { downstream?: string; stream?: string; prefix?: string; partitions?: string }) =>
    run(async () => {
      const downstream = o.downstream ? downstreamConsumerNames(o.downstream.split(',').map((n) => n.trim())) : DEFAULT_DOWNSTREAM_CONSUMERS;
      const [{ DEPLOYED_SPACE, renderNatsAuthorization }, { BusConfig, loadConfig }] = await Promise.all([eventlog(), contracts()]);
      // the names the services are configured with: a permission granted for another stream, prefix
      // or partition count refuses their consumers (a lifecycle for 16 partitions was refused p8-p15)
      const space = loadConfig(BusConfig.pick({ RUNPLANE_STREAM: true, RUNPLANE_SUBJECT_PREFIX: true, RUNPLANE_PARTITIONS: true }), {
        RUNPLANE_STREAM: o.stream ?? process.env.RUNPLANE_STREAM ?? DEPLOYED_SPACE.stream,
        RUNPLANE_SUBJECT_PREFIX: o.prefix ?? process.env.RUNPLANE_SUBJECT_PREFIX ?? DEPLOYED_SPACE.prefix,
        RUNPLANE_PARTITIONS: o.partitions ?? process.env.RUNPLANE_PARTITIONS ?? String(DEPLOYED_SPACE.partitions),
      });
      process.stdout.write(
        renderNatsAuthorization(
          { stream: space.RUNPLANE_STREAM, prefix: space.RUNPLANE_SUBJECT_PREFIX, partitions: space.RUNPLANE_PARTITIONS },
          'env',
          downstream,
        ),
      );
      return 0;
    })(),
  );
docs
  .command('event-schema')
  .description('print the JSON Schema (2020-12) of every event type, generated from the zod schemas (docs/contract/events.schema.json)')
  .action(async () => {
    process.stdout.write((await contracts()).renderEventsJsonSchema());
  });
docs
  .command('asyncapi')
  .description('print the AsyncAPI 3.0 description of the Run stream for stream RUNPLANE, prefix rp (docs/contract/asyncapi.json)')
  .action(async () => {
    const { DEPLOYED_SPACE, renderAsyncApi } = await eventlog();
    process.stdout.write(renderAsyncApi(DEPLOYED_SPACE));
  });
