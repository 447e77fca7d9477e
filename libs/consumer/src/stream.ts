/**
 * A read-only connection to the Run stream for a downstream service: it looks the stream up and
 * never creates, changes or appends anything (K11: reads never append), so it works with the
 * broker's downstream user (`downstream-1`..), which may only read the stream and use its own durable consumers.
 */
import { type NatsConnection } from '@nats-io/transport-node';
import { JetStreamApiError, jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { BusConfig, type RunEvent, type StoredEvent } from '@runplane/contracts';
import {
  allRunsFilter,
  closeConnection,
  connectPatiently,
  DEFAULT_PARTITIONS,
  DeliveryFeed,
  MAX_PARTITIONS,
  natsTlsOptions,
  PARTITIONS_METADATA_KEY,
  readPublicKeySet,
  reconnectingNatsOptions,
  SignatureVerifier,
  verifyStored,
  type ConsumerSource,
  type SubjectSpace,
} from '@runplane/eventlog';

/** Where the Run stream is and who reads it. */
export interface RunStreamOptions {
  /** The NATS server, or every node of a cluster comma-separated (`NATS_URL`). */
  natsUrl: string;
  /**
   * The NATS user and password (`NATS_USER`, `NATS_PASSWORD`): a downstream user (`downstream-1`..) the deployment
   * gives downstream services. The connection takes the user's own inbox prefix (`_INBOX_<user>`,
   * `inboxPrefixOf`): the broker lets a user receive replies only there.
   */
  user?: string;
  password?: string;
  /**
   * PEM CA bundle the server's certificate is verified against (`NATS_CA_FILE`); set, the
   * connection requires TLS (eventlog's `natsTlsOptions`).
   */
  caFile?: string;
  /**
   * The deployment's event signing public keys (`RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`, JSON
   * `{ "<owner>": ["<key>", ...] }`, eventlog's signing.ts): set, a message whose signature is
   * missing, does not verify or is not its event type's owner's is not a fact: terminated and
   * reported (`onInvalid`, anomaly `unsigned-event`, `bad-signature` or `wrong-signer`), never
   * handed to a handler. A bad file stops {@link RunStream.open}, naming the setting.
   */
  publicKeysFile?: string;
  /** The first stream sequence whose events must be signed (`RUNPLANE_SIGNING_REQUIRED_FROM_SEQ`, default 1: every one). */
  signaturesRequiredFromSeq?: number;
  /** The Run stream (`RUNPLANE_STREAM`, default `RUNPLANE`). */
  stream: string;
  /** The subject prefix (`RUNPLANE_SUBJECT_PREFIX`, default `rp`): the stream captures `<prefix>.run.>`. */
  prefix: string;
  /** The connection name the NATS server shows (default `runplane-downstream`). */
  connectionName?: string;
}

/**
 * {@link RunStreamOptions} from the environment: `NATS_URL`, `NATS_USER`, `NATS_PASSWORD`, `NATS_CA_FILE`,
 * `RUNPLANE_SIGNING_PUBLIC_KEYS_FILE`, `RUNPLANE_STREAM`, `RUNPLANE_SUBJECT_PREFIX` (validated by contracts' `BusConfig`, with its defaults).
 * @throws ZodError naming the variable when a value is invalid.
 */
export function runStreamOptionsFromEnv(env: NodeJS.ProcessEnv = process.env): RunStreamOptions {
  const bus = BusConfig.parse(env);
  return {
    natsUrl: bus.NATS_URL,
    stream: bus.RUNPLANE_STREAM,
    prefix: bus.RUNPLANE_SUBJECT_PREFIX,
    ...(bus.NATS_USER ? { user: bus.NATS_USER, password: bus.NATS_PASSWORD ?? '' } : {}),
    ...(bus.NATS_CA_FILE ? { caFile: bus.NATS_CA_FILE } : {}),
    ...(bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE ? { publicKeysFile: bus.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE } : {}),
    signaturesRequiredFromSeq: bus.RUNPLANE_SIGNING_REQUIRED_FROM_SEQ,
  };
}

/** The stream does not exist (or captures other subjects) on the server: nothing was created. */
export class RunStreamUnavailable extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'RunStreamUnavailable';
  }
}

/**
 * An open connection to an existing Run stream: what {@link RunConsumer}s on it share. The
 * partition count comes from the stream itself (metadata `runplane_partitions`), as the event
 * log's, so verification ({@link verifyStored}) maps a Run to the partition its events stand on.
 */
export class RunStream implements ConsumerSource {
  /** Unused by downstream consumers (they never read whole Runs); present for the durable consumer's shape. */
  readonly deliveries = new DeliveryFeed();
  /**
   * Events newer than this library's catalogue are read, not refused (docs/contract/README.md: a
   * new type or enum value is additive): {@link RunConsumer} passes over a new type and hands a new
   * enum value to the handler as stored.
   */
  readonly acceptNewer = true;

  private constructor(
    readonly nc: NatsConnection,
    readonly js: JetStreamClient,
    readonly jsm: JetStreamManager,
    readonly space: SubjectSpace,
    /** The server(s) connected to, for messages. */
    readonly natsUrl: string,
    /** The signature check of every delivered message, when {@link RunStreamOptions.publicKeysFile} is set. */
    readonly signatures: SignatureVerifier | null = null,
  ) {}

  /**
   * Connects (reconnecting for ever after a loss, like the services) and looks the stream up.
   * @throws Error naming the server when it cannot be reached or refuses the user;
   *   {@link RunStreamUnavailable} when the stream does not exist or captures other subjects
   *   (nothing is created).
   */
  static async open(opts: RunStreamOptions): Promise<RunStream> {
    let nc: NatsConnection;
    const tls = natsTlsOptions(opts.natsUrl, opts.caFile); // a bad NATS_CA_FILE stops here, named
    // and so does a bad RUNPLANE_SIGNING_PUBLIC_KEYS_FILE
    const signatures = opts.publicKeysFile ? new SignatureVerifier(readPublicKeySet(opts.publicKeysFile), opts.signaturesRequiredFromSeq) : null;
    try {
      // replies on the user's own inbox (`_INBOX_<user>`), the only one the broker lets it read (docs/consumers.md "Credentials and the name prefix")
      nc = await connectPatiently({
        ...reconnectingNatsOptions(opts.natsUrl, opts.connectionName ?? 'runplane-downstream', opts.user, opts.password),
        ...tls,
      });
    } catch (e) {
      throw new Error(`cannot connect to NATS at ${opts.natsUrl}${opts.user ? ` as ${opts.user}` : ''}: ${(e as Error)?.message ?? String(e)}`, {
        cause: e,
      });
    }
    try {
      const jsm = await jetstreamManager(nc);
      const config = await jsm.streams.info(opts.stream).then(
        (info) => info.config,
        (e: unknown) => {
          if (e instanceof JetStreamApiError && e.status === 404) {
            throw new RunStreamUnavailable(
              `stream ${opts.stream} does not exist on NATS at ${opts.natsUrl}; nothing was created (check RUNPLANE_STREAM)`,
              {
                cause: e,
              },
            );
          }
          // a downstream user may read the deployment's stream only: another name is refused by the
          // broker before it could say the stream does not exist
          const message = String((e as Error)?.message);
          if (/permissions violation/i.test(message) && message.includes(`STREAM.INFO.${opts.stream}"`)) {
            throw new RunStreamUnavailable(
              `stream ${opts.stream} is not one ${opts.user ?? 'this user'} may read on NATS at ${opts.natsUrl} (the broker refused its info: no such stream for this user; check RUNPLANE_STREAM)`,
              { cause: e },
            );
          }
          throw new Error(`reading stream ${opts.stream} on NATS at ${opts.natsUrl}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
        },
      );
      const space: SubjectSpace = { stream: opts.stream, prefix: opts.prefix, partitions: DEFAULT_PARTITIONS };
      const wanted = allRunsFilter(space);
      if (!config.subjects?.includes(wanted)) {
        throw new RunStreamUnavailable(
          `stream ${opts.stream} on NATS at ${opts.natsUrl} captures ${JSON.stringify(config.subjects)}, not ${wanted}: RUNPLANE_STREAM and RUNPLANE_SUBJECT_PREFIX do not belong together`,
        );
      }
      const stored = config.metadata?.[PARTITIONS_METADATA_KEY];
      if (stored !== undefined) {
        const n = Number(stored);
        if (!/^\d+$/.test(stored) || n < 1 || n > MAX_PARTITIONS) {
          throw new RunStreamUnavailable(`stream ${opts.stream} has ${PARTITIONS_METADATA_KEY}=${JSON.stringify(stored)}, not a partition count`);
        }
        space.partitions = n;
      }
      return new RunStream(nc, jetstream(nc), jsm, space, opts.natsUrl, signatures);
    } catch (e) {
      await nc.close().catch(() => undefined);
      throw e;
    }
  }

  /**
   * The events before `event` on its owner's subject of its Run, newest first: its back-link
   * (`prevSeq`) followed with direct gets (which a downstream user may make), each one verified as
   * a delivered message is ({@link verifyStored}, signatures too with the public keys). Ends at the
   * subject's first event, or at a link that does not lead to a fact of that subject (the audit
   * names such a break). For a check such as "is this the Run's first settlement" (K9).
   * @throws the NATS errors of a direct get (the connection lost, the stream gone).
   */
  async *earlierOnSubject(event: RunEvent, subject: string): AsyncGenerator<StoredEvent> {
    let prev = event.prevSeq ?? 0;
    while (prev > 0) {
      const msg = await this.jsm.direct.getMessage(this.space.stream, { seq: prev });
      if (!msg || msg.subject !== subject) return;
      let stored: StoredEvent;
      try {
        stored = verifyStored(msg.seq, msg.subject, msg.data, msg.header, this.space.partitions, this.signatures, this.acceptNewer);
      } catch {
        return;
      }
      if (stored.event.runId !== event.runId) return;
      yield stored;
      prev = stored.event.prevSeq ?? 0;
    }
  }

  /** Downstream consumers read events one by one as delivered: nothing to remember here. */
  noteStored(): void {}

  /**
   * Closes the connection (after what it sent is flushed, bounded: during a NATS outage it closes
   * anyway, so a shutting-down consumer exits). Stop the consumers on it first. Never throws.
   */
  async close(): Promise<void> {
    await closeConnection(this.nc);
  }
}
