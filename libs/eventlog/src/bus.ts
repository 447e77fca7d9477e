/**
 * The bus layout and who may do what on it: one source for the services' durable consumers, the
 * coordination buckets, the NATS users and their permissions (K9: only the lifecycle settles, and
 * the broker enforces it). The same definitions render deploy/nats/accounts.conf (Kubernetes), the
 * configuration of the nats-server the local stack starts (`demo`, `up`, the tests), and the set-up
 * an admin user does before any service starts ({@link provisionBus}).
 *
 * Publish permissions on Run subjects are derived from the event catalogue: a service may publish
 * on `<prefix>.run.*.<token>.*` for every subject token of every event type it owns
 * (`subjectTokensOfType`), so recovery gets the runtime and tools subjects for `run.fenced`, and a
 * new event type gets its owner's permission without an edit here. Nobody but the admin may
 * create, change, purge or delete a stream, delete a message, or delete or take over another
 * service's durable consumer. Each user receives replies only on its own inbox
 * ({@link inboxSubscription}): no user reads another's request replies (docs/operations.md "NATS users and permissions").
 */
import { AckPolicy, DeliverPolicy, JetStreamApiError, type ConsumerConfig } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { Objm } from '@nats-io/obj';
import { EventCatalog, EventTypes, Owner, subjectTokensOfType } from '@runplane/contracts';
import type { EventLog } from './event-log.js';
import { DEFAULT_DOWNSTREAM_CONSUMERS, DOWNSTREAM_CONSUMER_PREFIX, DOWNSTREAM_PRIORITY_GROUP, downstreamConsumerNames } from './downstream.js';
import { inboxPrefixOf } from './inbox.js';
import { allRunsFilter, ownerFilter, partitionFilter, runtimeNudgeFilter, type SubjectSpace } from './subjects.js';

export { DEFAULT_DOWNSTREAM_CONSUMERS, DOWNSTREAM_CONSUMER_PREFIX, DOWNSTREAM_PRIORITY_GROUP, downstreamConsumerNames };

/** The subject space of the deployment (deploy/nats, deploy/k8s/base/config.env): stream `RUNPLANE`, prefix `rp`, 8 partitions. */
export const DEPLOYED_SPACE: SubjectSpace = { stream: 'RUNPLANE', prefix: 'rp', partitions: 8 };

/** The services that connect to NATS: every owner, and the projector (which owns nothing). */
export const BUS_SERVICES = [...Owner.options, 'projector'] as const;
export type BusService = (typeof BUS_SERVICES)[number];
/**
 * Every fixed NATS user: the services, `ops` (the CLI's reads: timeline, audit, projections
 * rebuild) and `admin` (stream set-up). Downstream services have one user per durable consumer
 * name ({@link downstreamUserName}, {@link DOWNSTREAM_CONSUMER_PREFIX}).
 */
export const BUS_USERS = [...BUS_SERVICES, 'ops', 'admin'] as const;
export type BusUser = (typeof BUS_USERS)[number];

/** The NATS user name of a Runplane user (`runplane-<user>`), as set in `NATS_USER`. */
export const natsUserName = (user: BusUser): string => `runplane-${user}`;

/**
 * The owners whose subjects each service that reacts to events reads (`all`: every Run subject).
 * A service has one durable consumer per partition ({@link consumerFilters}, {@link durableNameOf}).
 */
export const SERVICE_CONSUMERS: Partial<Record<BusService, readonly Owner[] | 'all'>> = {
  // The owners that decide on the hot path read every subject of their partitions: each of their
  // Runs' events is delivered to them in order, so their folds are kept from the deliveries and a
  // decision taken on a delivery reads nothing from the log (no read on the hot path: deliveries.ts, RunFolds).
  // What each reacts to: the runtime to `run.admitted`, receipts, cancels, answered waits, a child's
  // settlement on its parent (`child.run.settled`, K10) and a draining replica's `run.handed_over`;
  // the tools to proposals; publication to paragraphs and the finished execution; the lifecycle to
  // what settles a Run; recovery to cancels and finished executions.
  runtime: 'all',
  // child Runs (K10): `child.run.requested` on the runtime subject, a parent's `run.settled` on the lifecycle subject
  admission: ['runtime', 'lifecycle'],
  tools: 'all',
  publication: 'all',
  lifecycle: 'all',
  recovery: 'all',
  projector: 'all',
};

/**
 * Where each service beats its process heartbeat (heartbeats.ts `HeartbeatPlacement`): the runtime
 * on a worker thread, since recovery judges its execution leases by it ("late" is not "gone", K6,
 * K10) and its main loop parses long streamed replies; every other service on its main thread (its
 * heartbeat serves only the partition membership of its replicas).
 */
export const HEARTBEAT_PLACEMENT: Record<BusService, 'thread' | 'main'> = {
  admission: 'main',
  runtime: 'thread',
  tools: 'main',
  publication: 'main',
  recovery: 'main',
  lifecycle: 'main',
  projector: 'main',
};

/** The services with durable consumers (and so a share of the partitions). */
export const CONSUMING_SERVICES = BUS_SERVICES.filter((s) => SERVICE_CONSUMERS[s] !== undefined);

/**
 * The subject filters of a service's durable consumer of one partition (empty when it has none):
 * `<prefix>.run.*.<owner>.<N>` for each owner it reads, or `<prefix>.run.*.*.<N>` for all
 * (`filter_subjects`, several filters on one consumer: nats-server 2.10+).
 */
export function consumerFilters(space: SubjectSpace, service: BusService, partition: number): string[] {
  const reads = SERVICE_CONSUMERS[service];
  if (!reads) return [];
  return reads === 'all' ? [partitionFilter(space, partition)] : reads.map((o) => ownerFilter(space, o, partition));
}

/** The server-side name of a service's durable consumer of one partition: `<prefix>-<service>-p<N>`. */
export const durableNameOf = (space: Pick<SubjectSpace, 'prefix'>, service: string, partition: number): string =>
  `${space.prefix}-${service}-p${partition}`;

/** The server-side names of a service's durable consumers, one per partition (none when it reads nothing). */
export function durableNamesOf(space: SubjectSpace, service: BusService): string[] {
  if (!SERVICE_CONSUMERS[service]) return [];
  return Array.from({ length: space.partitions }, (_, p) => durableNameOf(space, service, p));
}

/** The coordination buckets: who writes them and who only reads them. */
export const BUS_BUCKETS = {
  /** Execution leases (K6): taken and renewed by the runtime, fenced and forgotten by recovery. */
  leases: { kind: 'kv', writers: ['runtime', 'recovery'], readers: [] },
  /**
   * Each service process's membership heartbeat (`<service>.<instance>`), beaten apart from its
   * work: the replicas of a service share its partitions among the live ones, and recovery tells a
   * late runtime holder from a gone one (K10).
   */
  heartbeats: { kind: 'kv', writers: [...BUS_SERVICES], readers: [] },
  /** Live executors' claims on tool calls (K5). */
  claims: { kind: 'kv', writers: ['tools'], readers: [] },
  /** Run deadlines recovery watches (K10). */
  deadlines: { kind: 'kv', writers: ['recovery'], readers: [] },
  /** Large tool results, content-addressed. */
  results: { kind: 'obj', writers: ['tools'], readers: ['runtime'] },
  /** The conversation index (K2): each Conversation's admitted Runs and their clientMessageIds, kept by admission. */
  conversations: { kind: 'kv', writers: ['admission'], readers: ['runtime'] },
  /** Admission's quota reservations: per principal, the Runs admitted that the projections may not show yet. */
  quotas: { kind: 'kv', writers: ['admission'], readers: [] },
} as const satisfies Record<string, { kind: 'kv' | 'obj'; writers: readonly BusService[]; readers: readonly BusService[] }>;
export type BusBucket = keyof typeof BUS_BUCKETS;

/** A bucket's name in a subject space: `<prefix>_<bucket>`. */
export const bucketName = (space: Pick<SubjectSpace, 'prefix'>, bucket: BusBucket): string => `${space.prefix}_${bucket}`;

/**
 * The replies a user may receive: its own inbox, `<inbox prefix>.>` ({@link inboxPrefixOf} of its
 * NATS user name), never `_INBOX.>` nor another user's inbox (a reply carries what the
 * request read, e.g. a lease or a tool result).
 */
export const inboxSubscription = (user: BusUser): string => `${inboxPrefixOf(natsUserName(user))}.>`;

/** NATS permissions of one user (subject lists as in a nats-server `permissions` block). */
export interface UserPermissions {
  publish: { allow: string[]; deny: string[] };
  subscribe: { allow: string[]; deny: string[] };
}

/** The subject tokens a service may publish Run events on, from the event catalogue. */
export function runSubjectTokensOf(service: BusService): Owner[] {
  const tokens = new Set<Owner>();
  for (const type of EventTypes) if (EventCatalog[type].owner === service) for (const t of subjectTokensOfType(type)) tokens.add(t);
  return Owner.options.filter((o) => tokens.has(o));
}

const bucketApi = (stream: string): string[] => [
  `$JS.API.STREAM.INFO.${stream}`,
  `$JS.API.STREAM.MSG.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}`,
  `$JS.API.DIRECT.GET.${stream}.>`,
  `$JS.API.CONSUMER.CREATE.${stream}`,
  `$JS.API.CONSUMER.CREATE.${stream}.>`,
  `$JS.API.CONSUMER.INFO.${stream}.*`,
  `$JS.API.CONSUMER.MSG.NEXT.${stream}.*`,
  `$JS.API.CONSUMER.DELETE.${stream}.*`,
  `$JS.FC.${stream}.>`,
];

/** Reading the Run stream without a consumer: the JetStream account info, stream info and single-message gets. */
const streamReadApi = (space: SubjectSpace): string[] => [
  '$JS.API.INFO',
  `$JS.API.STREAM.INFO.${space.stream}`,
  `$JS.API.DIRECT.GET.${space.stream}`,
  `$JS.API.DIRECT.GET.${space.stream}.${space.prefix}.run.>`,
  // reads of a replicated stream go to its leader (EventLog.readMessage)
  `$JS.API.STREAM.MSG.GET.${space.stream}`,
];

/**
 * The NATS accounts: the services and `admin` share {@link SERVICES_ACCOUNT}, which holds the Run
 * stream and the buckets; each downstream user ({@link downstreamUserName}) has an account of its
 * own ({@link downstreamAccountOf}) and `ops` is in {@link OPS_ACCOUNT}, none with JetStream of its
 * own: they reach the Run stream only through the imports of {@link consumerImports} and
 * {@link opsImports}. A subject lives in one account: what a client of those accounts names as a
 * reply (or publishes) stays in its account, so a pull's deliveries (and any API answer) can never
 * land on a service's subject or in a bucket (docs/consumers.md). Within one account nats-server
 * checks no permission on a request's reply subject: that is why ops is not in the services'
 * account, and why no two downstream users share one (a pull whose reply named another's next
 * subject, imported into a shared account, turned each delivery into a pull on the other's
 * durable, whose messages then went to the first one's ack subjects: a stalled consumer).
 */
export const SERVICES_ACCOUNT = 'RUNPLANE';
/** The ops user's account ({@link SERVICES_ACCOUNT}): reads of the Run stream only. */
export const OPS_ACCOUNT = 'OPS';
/** The account a Runplane user belongs to (a downstream user's: {@link downstreamAccountOf}). */
export const accountOf = (user: BusUser): string => (user === 'ops' ? OPS_ACCOUNT : SERVICES_ACCOUNT);

/**
 * The account of one downstream user, alone in it (no JetStream of its own; it imports its durable
 * from {@link SERVICES_ACCOUNT}): its name in upper case, `-` as `_` (`downstream-1`:
 * `DOWNSTREAM_1`), as its password variable ({@link downstreamPasswordVariable}).
 * @throws RangeError when `name` is no downstream name ({@link downstreamConsumerNames}).
 */
export const downstreamAccountOf = (name: string): string => downstreamUserName(name).toUpperCase().replaceAll('-', '_');

/**
 * The NATS user of one downstream durable consumer: its name itself (`downstream-1`). Each has its
 * own password and may use only its own durable ({@link downstreamPermissions}).
 * @throws RangeError when `name` is no downstream name ({@link downstreamConsumerNames}).
 */
export const downstreamUserName = (name: string): string => downstreamConsumerNames([name])[0]!;

/**
 * The environment variable holding a downstream user's password in the deployed nats-server:
 * `RUNPLANE_NATS_PASSWORD_` and the name in upper case, `-` as `_` (`RUNPLANE_NATS_PASSWORD_DOWNSTREAM_1`).
 * @throws RangeError when `name` is no downstream name ({@link downstreamConsumerNames}).
 */
export const downstreamPasswordVariable = (name: string): string =>
  `RUNPLANE_NATS_PASSWORD_${downstreamUserName(name).toUpperCase().replaceAll('-', '_')}`;

/**
 * One JetStream API subject the services' account exports to another account (and that account
 * imports): `response` is `stream` where one request is answered by many messages (a pull: its
 * deliveries and status messages), else `singleton`.
 */
export interface ConsumerImport {
  subject: string;
  response: 'singleton' | 'stream';
}

const one = (subject: string): ConsumerImport => ({ subject, response: 'singleton' });

/** A stream read's import: a direct get answers a batch (`batch`, `multi_last`) with several messages, the rest with one. */
const readImport = (subject: string): ConsumerImport => (subject.startsWith('$JS.API.DIRECT.GET.') ? { subject, response: 'stream' } : one(subject));

/** What one downstream durable needs beyond the stream reads: its info, next (`stream` responses) and acks. */
function durableImports(space: SubjectSpace, name: string): ConsumerImport[] {
  const S = space.stream;
  return [
    one(`$JS.API.CONSUMER.INFO.${S}.${name}`),
    { subject: `$JS.API.CONSUMER.MSG.NEXT.${S}.${name}`, response: 'stream' },
    one(`$JS.ACK.${S}.${name}.>`),
  ];
}

/**
 * What a durable pull consumer of the Run stream needs, and nothing more: the JetStream account
 * info and the stream's info and single-message gets (reads), and the durable `name`'s info, next
 * (`stream` responses) and its acknowledgements (`$JS.ACK.<stream>.<name>.>`, also the "working"
 * heartbeat): what the account of that downstream user ({@link downstreamAccountOf}) imports, and
 * nothing of another durable. Replies come back to the requester's own account. No consumer
 * create, update or delete: the admin provisions the durables ({@link provisionBus}). A create or
 * update request may name a `deliver_subject` (a push consumer), which nats-server delivers to in
 * the stream's account, and may set an `inactive_threshold` that lets the server remove the
 * durable, after which the name could be created again as a push consumer; no permission can look
 * into a request's body. No stream admin, no other consumer, no bucket, no Run subject.
 * @throws RangeError when `name` is no downstream name ({@link downstreamConsumerNames}).
 */
export function consumerImports(space: SubjectSpace, name: string): ConsumerImport[] {
  return [...streamReadApi(space).map(readImport), ...durableImports(space, downstreamUserName(name))];
}

/**
 * What the ops user's reads need (`timeline`, `audit`, `projections rebuild`): the stream reads
 * and nothing else. A whole-log read is a series of batched direct gets (EventLog's snapshot), so
 * ops makes no consumer of any kind: it cannot make one that delivers the stream to a subject of
 * its choosing (another user's inbox, a durable's next-message subject). Every answer goes back
 * into {@link OPS_ACCOUNT}.
 */
export function opsImports(space: SubjectSpace): ConsumerImport[] {
  return streamReadApi(space).map(readImport);
}

/**
 * The permissions of one downstream user ({@link downstreamUserName}), alone in its account
 * ({@link downstreamAccountOf}): it may publish only the stream reads and its own durable's info,
 * next and acks (what {@link consumerImports} imports), and receive replies on its own inbox
 * (`_INBOX_<name>.>`, {@link inboxPrefixOf}). Another downstream user's durable is refused to it (a
 * permissions violation), and is not imported into its account, so no downstream service can move
 * another's position, not even through a reply subject. Its account holds nothing else, so
 * whatever it names as a reply is a subject of its own account.
 * @throws RangeError when `name` is no downstream name ({@link downstreamConsumerNames}).
 */
export function downstreamPermissions(space: SubjectSpace, name: string): UserPermissions {
  const user = downstreamUserName(name);
  const publish = [...streamReadApi(space), ...durableImports(space, user).map((i) => i.subject)];
  return { publish: { allow: publish, deny: [] }, subscribe: { allow: [`${inboxPrefixOf(user)}.>`], deny: [] } };
}

/**
 * Every fixed user's permissions in a subject space. Derived from the event catalogue's owners,
 * {@link SERVICE_CONSUMERS} and {@link BUS_BUCKETS}; `downstream`, the names of downstream durable
 * consumers (default {@link DEFAULT_DOWNSTREAM_CONSUMERS}), are refused to the services and ops;
 * `admin` may do everything. The downstream users' own: {@link downstreamPermissions}.
 * @throws RangeError when a downstream name is not one ({@link downstreamConsumerNames}).
 */
export function busPermissions(space: SubjectSpace, downstream: readonly string[] = DEFAULT_DOWNSTREAM_CONSUMERS): Record<BusUser, UserPermissions> {
  const S = space.stream;
  const allDurables = BUS_SERVICES.flatMap((s) => durableNamesOf(space, s));
  // the downstream services' durables live in this account too (created through the imports):
  // no service and not ops may pull from them, take them over or delete them (a deleted one
  // would start its downstream service again at the stream's first event); the admin may
  const downstreamNames = downstreamConsumerNames(downstream);
  const result = {} as Record<BusUser, UserPermissions>;
  for (const user of BUS_USERS) {
    if (user === 'admin') {
      result.admin = { publish: { allow: ['>'], deny: [] }, subscribe: { allow: ['>'], deny: [] } };
      continue;
    }
    const own = user === 'ops' ? [] : durableNamesOf(space, user);
    const others = allDurables.filter((d) => !own.includes(d));
    const publish: string[] = [];
    const subscribe: string[] = [inboxSubscription(user)];
    if (user !== 'ops') for (const token of runSubjectTokensOf(user)) publish.push(`${space.prefix}.run.*.${token}.*`);
    if (user === 'runtime') publish.push(`${space.prefix}.live.*.delta`);
    // a replica tells a Run's lease holder at once that the Run was woken (core NATS, never stored)
    if (user === 'runtime') publish.push(runtimeNudgeFilter(space));
    if (user === 'runtime') subscribe.push(runtimeNudgeFilter(space));
    if (user === 'publication') subscribe.push(`${space.prefix}.live.*.delta`);
    // reading the log: stream info and direct gets (whole-log reads are batched direct gets: no
    // consumer); ops exactly its imports (opsImports), which make no consumer of any kind. Nobody
    // but the admin may send a create that names no consumer in its subject
    // (`$JS.API.CONSUMER.CREATE.<stream>`): its body may name any consumer, a downstream's durable
    // or another service's, and the server updates that one (a trial filtered one to nothing)
    publish.push(...streamReadApi(space));
    // observers follow one Run with an ordered consumer (generated name, filter in the subject)
    if (user === 'publication')
      publish.push(
        `$JS.API.CONSUMER.CREATE.${S}.*.${space.prefix}.run.*.>`,
        `$JS.API.CONSUMER.INFO.${S}.*`,
        `$JS.API.CONSUMER.MSG.NEXT.${S}.*`,
        `$JS.API.CONSUMER.DELETE.${S}.*`,
      );
    // its partition consumers (created with several filters: the request names no filter), their
    // info, pulls and acks, and handing a partition's pin over (priority groups: nats-server 2.11+)
    for (const d of own)
      publish.push(
        `$JS.API.CONSUMER.CREATE.${S}.${d}`,
        `$JS.API.CONSUMER.CREATE.${S}.${d}.>`,
        ...(user === 'publication' ? [] : [`$JS.API.CONSUMER.INFO.${S}.${d}`, `$JS.API.CONSUMER.MSG.NEXT.${S}.${d}`]),
        `$JS.API.CONSUMER.UNPIN.${S}.${d}`,
        `$JS.ACK.${S}.${d}.>`,
      );
    for (const [bucket, spec] of Object.entries(BUS_BUCKETS) as [BusBucket, (typeof BUS_BUCKETS)[BusBucket]][]) {
      const writes = (spec.writers as readonly string[]).includes(user);
      if (!writes && !(spec.readers as readonly string[]).includes(user)) continue;
      const name = bucketName(space, bucket);
      publish.push(...bucketApi(spec.kind === 'kv' ? `KV_${name}` : `OBJ_${name}`));
      // a process writes only its own service's membership keys (`<service>.<instance>`)
      if (writes) publish.push(spec.kind === 'obj' ? `$O.${name}.>` : bucket === 'heartbeats' ? `$KV.${name}.${user}.>` : `$KV.${name}.>`);
      // the object store purges the chunks of an object it replaces (its own stream only)
      if (writes && spec.kind === 'obj') publish.push(`$JS.API.STREAM.PURGE.OBJ_${name}`);
    }
    const deny = [
      '$JS.API.STREAM.CREATE.>',
      '$JS.API.STREAM.UPDATE.>',
      '$JS.API.STREAM.DELETE.>',
      '$JS.API.STREAM.MSG.DELETE.>',
      `$JS.API.STREAM.PURGE.${S}`,
      '$JS.API.CONSUMER.DURABLE.CREATE.>',
      ...[...allDurables, ...downstreamNames].map((d) => `$JS.API.CONSUMER.DELETE.${S}.${d}`),
      ...[...others, ...downstreamNames].flatMap((d) => [
        `$JS.API.CONSUMER.CREATE.${S}.${d}`,
        `$JS.API.CONSUMER.CREATE.${S}.${d}.>`,
        `$JS.API.CONSUMER.MSG.NEXT.${S}.${d}`,
        `$JS.API.CONSUMER.UNPIN.${S}.${d}`,
      ]),
    ];
    result[user] = { publish: { allow: publish, deny }, subscribe: { allow: subscribe, deny: [] } };
  }
  return result;
}

/** The environment variable holding a user's password in the deployed nats-server (`RUNPLANE_NATS_PASSWORD_<USER>`). */
export const passwordVariable = (user: BusUser): string => `RUNPLANE_NATS_PASSWORD_${user.toUpperCase()}`;

/**
 * The passwords a rendered configuration holds: each fixed user's, and each downstream user's by
 * its durable name (every name of the rendered `downstream` list must have one).
 */
export type NatsPasswords = Record<BusUser, string> & { downstream: Readonly<Record<string, string>> };

/** The `docs nats-auth` options that render `space` again: none for the deployment's ({@link DEPLOYED_SPACE}). */
function spaceOptions(space: SubjectSpace): string {
  return [
    space.stream !== DEPLOYED_SPACE.stream ? ` --stream ${space.stream}` : '',
    space.prefix !== DEPLOYED_SPACE.prefix ? ` --prefix ${space.prefix}` : '',
    space.partitions !== DEPLOYED_SPACE.partitions ? ` --partitions ${space.partitions}` : '',
  ].join('');
}

/**
 * Renders the nats-server `accounts` block for a subject space: {@link SERVICES_ACCOUNT} (JetStream
 * on) with the services and `admin`, exporting only the subjects of {@link consumerImports} to each
 * downstream account and of {@link opsImports} to {@link OPS_ACCOUNT}; one account per name of
 * `downstream` ({@link downstreamAccountOf}, no JetStream) with its one user
 * ({@link downstreamPermissions}), and {@link OPS_ACCOUNT} (no JetStream) with `ops`, each importing them. The fixed users have their
 * {@link busPermissions}. `passwords` gives each user's password, or `'env'` to reference
 * `$RUNPLANE_NATS_PASSWORD_<USER>` ({@link passwordVariable}, {@link downstreamPasswordVariable};
 * resolved by nats-server from its environment: the deployed file holds no secret). A connection
 * without a user is refused. `downstream`: the names of downstream durable consumers (default
 * {@link DEFAULT_DOWNSTREAM_CONSUMERS}).
 * @throws RangeError when a downstream name is not one ({@link downstreamConsumerNames}), two names
 * have one password variable, or a name has no password in `passwords`.
 */
export function renderNatsAuthorization(
  space: SubjectSpace,
  passwords: NatsPasswords | 'env',
  downstream: readonly string[] = DEFAULT_DOWNSTREAM_CONSUMERS,
): string {
  const q = (s: string) => JSON.stringify(s);
  const list = (items: string[], indent: string) => (items.length ? `[\n${items.map((i) => `${indent}  ${q(i)}`).join('\n')}\n${indent}]` : '[]');
  const names = downstreamConsumerNames(downstream);
  const variables = new Set(names.map(downstreamPasswordVariable));
  if (variables.size !== names.length) throw new RangeError(`downstream names ${names.join(', ')}: two of them have one password variable`);
  const perms = busPermissions(space, names);
  const userBlock = (name: string, p: UserPermissions, pass: string) =>
    [
      `        {`,
      `          user: ${q(name)}`,
      `          password: ${pass}`,
      `          permissions: {`,
      `            publish: { allow: ${list(p.publish.allow, '            ')}, deny: ${list(p.publish.deny, '            ')} }`,
      `            subscribe: { allow: ${list(p.subscribe.allow, '            ')} }`,
      `          }`,
      `        }`,
    ].join('\n');
  const user = (u: BusUser) => userBlock(natsUserName(u), perms[u], passwords === 'env' ? `$${passwordVariable(u)}` : q(passwords[u]));
  const downstreamUser = (name: string) => {
    const pass = passwords === 'env' ? `$${downstreamPasswordVariable(name)}` : passwords.downstream[name];
    if (pass === undefined) throw new RangeError(`downstream user ${name} has no password`);
    return userBlock(downstreamUserName(name), downstreamPermissions(space, name), passwords === 'env' ? pass : q(pass));
  };
  // one export per subject, to every account importing it
  const exports = new Map<string, { response: ConsumerImport['response']; accounts: string[] }>();
  const imports: Record<string, ConsumerImport[]> = {
    ...Object.fromEntries(names.map((n) => [downstreamAccountOf(n), consumerImports(space, n)])),
    [OPS_ACCOUNT]: opsImports(space),
  };
  for (const [account, list] of Object.entries(imports))
    for (const i of list) {
      const e = exports.get(i.subject) ?? { response: i.response, accounts: [] };
      e.accounts.push(account);
      exports.set(i.subject, e);
    }
  const exportLines = [...exports].map(
    ([subject, e]) =>
      `        { service: ${q(subject)}, accounts: [${e.accounts.map(q).join(', ')}]${e.response === 'stream' ? ', response: stream' : ''} }`,
  );
  const importOf = (i: ConsumerImport) => `        { service: { account: ${q(SERVICES_ACCOUNT)}, subject: ${q(i.subject)} } }`;
  return [
    `# Runplane NATS accounts and users (K9: only the lifecycle settles; the broker enforces each owner's subjects).`,
    `# GENERATED from libs/eventlog/src/bus.ts for stream ${space.stream}, subject prefix ${space.prefix}, ${space.partitions} partitions:`,
    `#   npm run runplane --silent -- docs nats-auth${spaceOptions(space)} > deploy/nats/accounts.conf`,
    `# Do not edit by hand; a test fails when this file is stale.`,
    `# ${SERVICES_ACCOUNT}: the services and admin (the Run stream and the buckets). One account per downstream`,
    `# durable consumer (DOWNSTREAM_...), its one user allowed only its own durable; ${OPS_ACCOUNT}: the ops user's`,
    `# reads. None has JetStream of its own: they reach the Run stream only through the imports below, and`,
    `# every reply or delivery they ask for stays in their own account.`,
    `accounts {`,
    `  ${SERVICES_ACCOUNT} {`,
    `    jetstream: enabled`,
    `    users = [`,
    BUS_USERS.filter((u) => accountOf(u) === SERVICES_ACCOUNT)
      .map(user)
      .join('\n'),
    `    ]`,
    `    exports = [`,
    exportLines.join('\n'),
    `    ]`,
    `  }`,
    ...names.flatMap((n) => [
      `  ${downstreamAccountOf(n)} {`,
      `    users = [`,
      downstreamUser(n),
      `    ]`,
      `    imports = [`,
      imports[downstreamAccountOf(n)]!.map(importOf).join('\n'),
      `    ]`,
      `  }`,
    ]),
    `  ${OPS_ACCOUNT} {`,
    `    users = [`,
    user('ops'),
    `    ]`,
    `    imports = [`,
    imports[OPS_ACCOUNT]!.map(importOf).join('\n'),
    `    ]`,
    `  }`,
    `}`,
    ``,
  ].join('\n');
}

/** What {@link provisionBus} did to the downstream durables. */
export interface ProvisionReport {
  /** The durables it created (missing before). */
  created: string[];
  /**
   * The durables it put back to their provisioned configuration, each with what differed (a
   * durable provisioned before the priority group, or one changed by hand): their position kept.
   */
  repaired: { name: string; differed: string[] }[];
}

/** The configuration of a provisioned downstream durable (docs/consumers.md "Provisioning"). */
function downstreamDurableConfig(space: SubjectSpace, name: string) {
  return {
    name,
    durable_name: name,
    filter_subject: allRunsFilter(space),
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: 30_000 * 1_000_000,
    max_ack_pending: 1000,
    // none: a durable kept however long its downstream service is away (said explicitly, so an
    // update clears one set by hand: the server would otherwise keep one)
    inactive_threshold: 0,
    priority_groups: [DOWNSTREAM_PRIORITY_GROUP],
    priority_policy: 'overflow' as const,
  };
}

/**
 * What of an existing downstream durable's configuration differs from the provisioned one
 * ({@link downstreamDurableConfig}), by field; empty when nothing does.
 */
export function downstreamDurableDrift(have: Partial<ConsumerConfig>, want: ReturnType<typeof downstreamDurableConfig>): string[] {
  const differed: string[] = [];
  if (have.durable_name !== want.durable_name) differed.push('durable_name');
  if (have.filter_subject !== want.filter_subject || (have.filter_subjects?.length ?? 0) > 0) differed.push('filter');
  if (have.deliver_subject) differed.push('deliver_subject');
  if (have.ack_policy !== want.ack_policy) differed.push('ack_policy');
  if (have.ack_wait !== want.ack_wait) differed.push('ack_wait');
  if (have.max_ack_pending !== want.max_ack_pending) differed.push('max_ack_pending');
  if ((have.inactive_threshold ?? 0) > 0) differed.push('inactive_threshold');
  if (have.priority_groups?.length !== 1 || have.priority_groups[0] !== DOWNSTREAM_PRIORITY_GROUP || have.priority_policy !== want.priority_policy)
    differed.push('priority_groups');
  return differed;
}

/**
 * Creates what the services may not create themselves (the admin's set-up, before any service
 * starts): the Run stream (atomic batches allowed on an existing one that lacks them,
 * `EventLog.enableAtomicBatches`) and every bucket of {@link BUS_BUCKETS}, each only when missing, with
 * `log.replicas` copies (`RUNPLANE_NATS_REPLICAS`: 3 on a 3-node cluster, so one node may be lost).
 * The services then only open them (a bucket's `create` reads the existing one's info first).
 * Also creates each downstream durable consumer of `downstream` (default
 * {@link DEFAULT_DOWNSTREAM_CONSUMERS}) when missing, as a pull consumer of every Run subject from
 * the first event, 30 s ack wait, in the priority group {@link DOWNSTREAM_PRIORITY_GROUP}: the
 * consumer account may use it but not create, change or delete it. An existing one whose
 * configuration differs from that (provisioned before the priority group, or changed by hand: a
 * filter that takes nothing, an inactive threshold that deletes it) is updated back to it in place,
 * its position kept.
 * @param log a log connected as a user allowed to create streams (`admin`).
 * @returns the durables created and repaired.
 * @throws RangeError when a downstream name is not one ({@link downstreamConsumerNames}); Error
 *   naming the durable and what differs when the server refuses to put it back (a push consumer,
 *   another ack policy): the admin deletes it (its position is lost) and provisions again.
 */
export async function provisionBus(log: EventLog, downstream: readonly string[] = DEFAULT_DOWNSTREAM_CONSUMERS): Promise<ProvisionReport> {
  await log.ensureStream();
  const report: ProvisionReport = { created: [], repaired: [] };
  // the consumer account may not create its durables (consumerImports): they are created here,
  // pull consumers (no deliver subject) from the first event (docs/consumers.md)
  for (const name of downstreamConsumerNames(downstream)) {
    const existing = await log.jsm.consumers.info(log.space.stream, name).catch((e: unknown) => {
      if (e instanceof JetStreamApiError && e.status === 404) return null;
      throw e;
    });
    const want = downstreamDurableConfig(log.space, name);
    const differed = existing ? downstreamDurableDrift(existing.config, want) : [];
    if (existing && differed.length === 0) continue;
    // one create-or-update request naming the durable (a create that names none could change another)
    const reply = await log.nc.request(
      `$JS.API.CONSUMER.CREATE.${log.space.stream}.${name}`,
      JSON.stringify({ stream_name: log.space.stream, ...(existing ? { action: 'update' } : {}), config: want }),
      { timeout: 10_000 },
    );
    const body = reply.json<{ error?: { description: string; err_code: number }; config?: Partial<ConsumerConfig> }>();
    if (body.error)
      throw new Error(
        `downstream durable ${name} differs from its provisioned configuration (${differed.join(', ')}) and the server refuses to put it back: ` +
          `${body.error.description} (${body.error.err_code}). Delete it as the admin (its position is lost) and provision again`,
      );
    if (!existing) {
      report.created.push(name);
      continue;
    }
    // a consumer that stopped being durable keeps the inactive threshold the server gave it (it
    // would be deleted after seconds without a pull): made again, from the sequence after its
    // acknowledged floor (what was delivered and not acknowledged after it comes again)
    if (downstreamDurableDrift(body.config ?? {}, want).length > 0) {
      const from = existing.ack_floor.stream_seq + 1;
      await log.jsm.consumers.delete(log.space.stream, name);
      const again = await log.nc.request(
        `$JS.API.CONSUMER.CREATE.${log.space.stream}.${name}`,
        JSON.stringify({ stream_name: log.space.stream, config: { ...want, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from } }),
        { timeout: 10_000 },
      );
      const error = again.json<{ error?: { description: string } }>().error;
      if (error) throw new Error(`downstream durable ${name} could not be made again from sequence ${from}: ${error.description}`);
      differed.push(`made again from sequence ${from}`);
    }
    report.repaired.push({ name, differed });
  }
  // a stream created before atomic batches (or by an older Runplane) gets them now (2.12.1+)
  await log.enableAtomicBatches();
  // and the consumer limit it names (created without one, the server held it to 1,000)
  await log.raiseConsumerLimit();
  const kvm = new Kvm(log.nc);
  const objm = new Objm(log.nc);
  for (const [bucket, spec] of Object.entries(BUS_BUCKETS) as [BusBucket, (typeof BUS_BUCKETS)[BusBucket]][]) {
    // replicated: reads from the leader, like the Run stream's (EventLog.readMessage): a direct get
    // may be answered by a follower behind (the client's own doc: "the possibility of inconsistency
    // during a read"), and leases and claims are decided from what is read
    if (spec.kind === 'kv')
      await kvm.create(bucketName(log.space, bucket), { history: 1, replicas: log.replicas, ...(log.replicas > 1 ? { allow_direct: false } : {}) });
    else await objm.create(bucketName(log.space, bucket), { replicas: log.replicas });
  }
  return report;
}

/** Deletes the Run stream and every bucket of a subject space (test and demo clean-up). */
export async function destroyBus(log: EventLog): Promise<void> {
  for (const [bucket, spec] of Object.entries(BUS_BUCKETS)) {
    await log.jsm.streams.delete(`${spec.kind === 'kv' ? 'KV' : 'OBJ'}_${bucketName(log.space, bucket as BusBucket)}`).catch(() => undefined);
  }
  await log.jsm.streams.delete(log.space.stream).catch(() => undefined);
}
