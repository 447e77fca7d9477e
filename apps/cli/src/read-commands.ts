/**
 * The auditors' read commands (`timeline`, `audit`, `projections rebuild`) as `runplane up` prints
 * them, with every variable each one needs, so a line copied into another terminal runs as
 * printed; and the readable refusal when the credentials given may not read the log.
 */
import { BusConfig } from '@runplane/contracts';
import { natsUserName, passwordVariable } from '@runplane/eventlog';

/** What the reading commands need to find the log (and, for `projections rebuild`, the live projections). */
export interface ReadEnvironment {
  NATS_URL: string;
  /** The CA bundle of a server that requires TLS (a local stack's private CA), when there is one. */
  NATS_CA_FILE?: string;
  /** The deployment's event signing public keys: the reads refuse (and `audit` reports) an event its owner did not sign. */
  RUNPLANE_SIGNING_PUBLIC_KEYS_FILE?: string;
  /** The ops user's credentials: it may read the Run stream (direct gets) and nothing else. */
  NATS_USER: string;
  NATS_PASSWORD: string;
  /** The live projection database `projections rebuild` compares with (its user must be allowed to create databases). */
  DATABASE_URL: string;
  RUNPLANE_STREAM: string;
  RUNPLANE_SUBJECT_PREFIX: string;
  /** The stream's partition count (a decimal string), when known (a read with another count warns that it differs from the stream's). */
  RUNPLANE_PARTITIONS?: string;
}

/** `value` as one shell word: as is when it is plain, else single-quoted. */
export function shellWord(value: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * The three read commands, each a complete shell line: the NATS variables, the stream, subject
 * prefix and partition count (also when they are the defaults: a value exported in the shell the
 * line is pasted into must not take their place), `DATABASE_URL` for the rebuild and the audit
 * (whose `--projections` compares the live projections), then
 * `npm run runplane -- ...`. `<runId>` is the one thing to fill in.
 */
export function readCommands(env: ReadEnvironment): { timeline: string; audit: string; rebuild: string } {
  const vars = (names: (keyof ReadEnvironment)[]) =>
    names
      .filter((n) => env[n] !== undefined)
      .map((n) => `${n}=${shellWord(env[n]!)}`)
      .join(' ');
  const nats = vars([
    'NATS_URL',
    'NATS_CA_FILE',
    'NATS_USER',
    'NATS_PASSWORD',
    'RUNPLANE_SIGNING_PUBLIC_KEYS_FILE',
    'RUNPLANE_STREAM',
    'RUNPLANE_SUBJECT_PREFIX',
    'RUNPLANE_PARTITIONS',
  ]);
  return {
    timeline: `${nats} npm run runplane -- timeline <runId>`,
    // with the live projections' database too, so that `--projections` added to it compares them
    audit: `${nats} ${vars(['DATABASE_URL'])} npm run runplane -- audit --all`,
    rebuild: `${nats} ${vars(['DATABASE_URL'])} npm run runplane -- projections rebuild`,
  };
}

/**
 * Runs a read of the log (`command`: `timeline`, `audit`, `projections rebuild`) and, when the NATS
 * server refuses the user an operation it needs (a "Permissions Violation": credentials not allowed
 * the Run stream's reads), says which server refused whom and which credentials the command needs:
 * the ops user's.
 * Any other error passes through unchanged.
 * @throws Error naming the server, the user and the ops user's password variable.
 */
export async function withReadCredentials<T>(command: string, env: NodeJS.ProcessEnv, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (e) {
    const text = e instanceof Error ? e.message : String(e);
    if (!/permissions violation/i.test(text)) throw e;
    const bus = BusConfig.safeParse(env);
    const server = bus.success ? bus.data.NATS_URL : (env.NATS_URL ?? '(NATS_URL)');
    const stream = bus.success ? bus.data.RUNPLANE_STREAM : (env.RUNPLANE_STREAM ?? '(RUNPLANE_STREAM)');
    const ops = natsUserName('ops');
    throw new Error(
      `${command}: NATS at ${server} refused user ${env.NATS_USER ?? '(none: NATS_USER is not set)'} a read of stream ${stream} (${text}). ` +
        `${command} reads with the ops user's credentials: NATS_USER=${ops} and its password as NATS_PASSWORD ` +
        `(${passwordVariable('ops')} in the deployment's runplane-nats-users; \`runplane up\` prints them); nothing was created`,
      { cause: e },
    );
  }
}
