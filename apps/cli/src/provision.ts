/**
 * `runplane provision`, also the entry of the Kubernetes provisioning Job
 * (`node apps/cli/dist/provision-main.js`): creates what the services may not create themselves,
 * through the one function every set-up uses (libs/eventlog `provisionBus`, which the devstack
 * calls too). Imports only the contracts and the event log, so it runs in the production image,
 * which carries no devstack, PGlite or scripted model.
 */
import { BusConfig, loadConfig } from '@runplane/contracts';
import {
  bucketName,
  BUS_BUCKETS,
  DEFAULT_DOWNSTREAM_CONSUMERS,
  downstreamPasswordVariable,
  downstreamUserName,
  EventLog,
  natsUserName,
  passwordVariable,
  provisionBus,
  type BusBucket,
  type ProvisionReport,
} from '@runplane/eventlog';

/**
 * Creates the Run stream, every KV bucket and the object store of {@link BUS_BUCKETS}, each only
 * when missing, with `RUNPLANE_NATS_REPLICAS` copies (3 on the deployed 3-node cluster); an
 * existing stream without atomic batches gets them. Connects with the bus configuration of `env`
 * (`NATS_URL`, `RUNPLANE_STREAM`, `RUNPLANE_SUBJECT_PREFIX`, `RUNPLANE_PARTITIONS`,
 * `NATS_USER`/`NATS_PASSWORD` of the admin user), and the downstream durable consumers `downstream`
 * (as pull consumers; the names given to `docs nats-auth --downstream`). Writes one line per stream to `out`: its name,
 * replicas and leader; then one line per downstream durable: the NATS user that alone may use it
 * (its own name) and the variable holding that user's password in the deployed nats-server
 * (`RUNPLANE_NATS_PASSWORD_DOWNSTREAM_<N>`: the password is the deployment's, never known here),
 * and whether it was created now or put back to its provisioned configuration (what differed).
 * The first line names the stream and the server. Idempotent: a second run creates and changes
 * nothing. Returns 0.
 * @throws when `NATS_URL` is not set (before anything connects: it never provisions the default
 *   server), the configuration is invalid (naming the setting), NATS is unreachable or the user
 *   may not create streams (then naming the admin user it needs, {@link notAdmin}).
 */
export async function provision(
  env: NodeJS.ProcessEnv = process.env,
  out: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
  downstream: readonly string[] = DEFAULT_DOWNSTREAM_CONSUMERS,
): Promise<number> {
  const bus = loadConfig(BusConfig, env);
  // it creates streams and buckets: never on a server it was not told (a trial's bare `provision`
  // filled the machine's unrelated NATS on the default port and never said where)
  if (!env.NATS_URL?.trim())
    throw new Error(
      `NATS_URL is not set: name the NATS server to provision (it creates the stream, buckets and durable consumers there and never takes the default ${bus.NATS_URL}); \`runplane up\` provisions the local stack itself`,
    );
  out(`provisioning stream ${bus.RUNPLANE_STREAM} on NATS at ${bus.NATS_URL}`);
  let log: EventLog;
  try {
    log = await EventLog.fromEnv('runplane-provision', env);
  } catch (e) {
    throw notAdmin(e, env);
  }
  try {
    let report: ProvisionReport;
    try {
      report = await provisionBus(log, downstream);
    } catch (e) {
      throw notAdmin(e, env);
    }
    const names = [
      bus.RUNPLANE_STREAM,
      ...(Object.keys(BUS_BUCKETS) as BusBucket[]).map((b) => `${BUS_BUCKETS[b].kind === 'kv' ? 'KV' : 'OBJ'}_${bucketName(log.space, b)}`),
    ];
    let single = 0;
    for (const name of names) {
      const info = await log.jsm.streams.info(name);
      if ((info.config.num_replicas ?? 1) < 2) single++;
      out(`${name}: ${info.config.num_replicas} replica(s)${info.cluster?.leader ? `, leader ${info.cluster.leader}` : ''}`);
    }
    // a cluster given one replica each: the loss of the node holding them loses the Runs' facts
    // (a trial provisioned a 3-node cluster with the default RUNPLANE_NATS_REPLICAS=1 and everything sat on one node)
    const cluster = log.nc.info?.cluster;
    if (cluster && single > 0)
      out(
        `warning: NATS at ${bus.NATS_URL} is a cluster (${cluster}), but ${single} of these have 1 replica: the node holding them is a single point of loss. Set RUNPLANE_NATS_REPLICAS=3 before provisioning; an existing stream keeps its replicas (raise them with nats stream edit <name> --replicas 3)`,
      );
    for (const name of downstream) {
      const repaired = report.repaired.find((r) => r.name === name);
      out(
        `downstream durable ${name}: NATS user ${downstreamUserName(name)}, password $${downstreamPasswordVariable(name)} (its own; docs/consumers.md)` +
          (report.created.includes(name) ? '; created' : '') +
          (repaired ? `; put back to its provisioned configuration (${repaired.differed.join(', ')} differed), its position kept` : ''),
      );
    }
  } finally {
    await log.close();
  }
  return 0;
}

/**
 * A NATS permissions or authorization violation during provisioning, told as what it is: only the
 * admin user may create streams, buckets and durable consumers (docs/operations.md "NATS users and
 * permissions"), and a connection without a user, or with a wrong password, is refused outright.
 * @returns an Error naming the admin user and its password variable, with NATS's own message; any
 *   other error unchanged (a thrown non-Error as an Error of its text).
 */
export function notAdmin(e: unknown, env: NodeJS.ProcessEnv): Error {
  const text = String((e as Error)?.message ?? e);
  const denied = /permissions violation/i.test(text);
  if (!denied && !/authorization violation/i.test(text)) return e instanceof Error ? e : new Error(text);
  const admin = natsUserName('admin');
  const user = env.NATS_USER ? `user ${env.NATS_USER}` : 'a connection without NATS_USER';
  const why = denied
    ? `only the NATS admin user may create the stream, buckets and durable consumers, not ${user}`
    : `NATS refused ${user} (no user, or a wrong password); provisioning needs the NATS admin user`;
  return new Error(
    `${why}: run it with NATS_USER=${admin} and its password in NATS_PASSWORD (${passwordVariable('admin')} of the Secret runplane-nats; ` +
      `\`runplane up\` provisions the local stack itself) (NATS said: ${text})`,
    { cause: e },
  );
}
