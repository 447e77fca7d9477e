/**
 * The names downstream services' durable consumers may have: no import beyond this file, so that
 * the CLI's program (`runplane --help`, `runplane token`) can name them without loading NATS and
 * the contracts (package entry `@runplane/eventlog/downstream`; bus.ts re-exports them).
 */
/**
 * The name prefix of downstream services' durable consumers on the Run stream (user `consumer`,
 * docs/event-log.md "For downstream consumers"): Runplane's own durables are `<prefix>-<service>-p<N>`,
 * so a downstream name never meets one of them.
 */
export const DOWNSTREAM_CONSUMER_PREFIX = 'downstream-';

/**
 * The downstream durable consumers a deployment allows by default (deploy/nats/accounts.conf, the
 * local stack): NATS permissions match whole subject tokens, and a consumer's name is one token
 * of the JetStream API subject, so the broker can grant a list of names but not a name prefix.
 * A deployment that wants its own names renders them with
 * `runplane docs nats-auth --downstream <name,...>` (each starting with {@link DOWNSTREAM_CONSUMER_PREFIX}).
 */
export const DEFAULT_DOWNSTREAM_CONSUMERS: readonly string[] = ['downstream-1', 'downstream-2', 'downstream-3', 'downstream-4'];

/**
 * The priority group every downstream durable is provisioned with (policy `overflow`, nats-server
 * 2.11+): each pull must name it (`"group": "downstream"`), and a pull that does not is refused
 * (nats-server: `Bad Request - Priority Group missing`). A push consumer that a user able to create
 * consumers (the publication's observers; ops before its reads became direct gets) aims at a
 * durable's next subject turns each event it delivers into a pull with no group: refused, so it
 * cannot take the durable's messages (docs/consumers.md).
 */
export const DOWNSTREAM_PRIORITY_GROUP = 'downstream';

/**
 * Checks the names of downstream durable consumers: each starts with
 * {@link DOWNSTREAM_CONSUMER_PREFIX}, followed by 1-64 of `A-Z a-z 0-9 _ -` (a JetStream consumer
 * name is one subject token: no `.`, `*`, `>` or white space).
 * @returns the names, without repeats.
 * @throws RangeError naming the first name that is not one.
 */
export function downstreamConsumerNames(names: readonly string[]): string[] {
  const pattern = new RegExp(`^${DOWNSTREAM_CONSUMER_PREFIX}[A-Za-z0-9_-]{1,64}$`);
  for (const name of names) {
    if (!pattern.test(name))
      throw new RangeError(`"${name}" is no downstream consumer name: ${DOWNSTREAM_CONSUMER_PREFIX} and 1-64 of A-Z a-z 0-9 _ -`);
  }
  return [...new Set(names)];
}
