// A member of a service's partitions in a process of its own, for tests that freeze one member
// (SIGSTOP) while the test's process keeps beating: joins `service` with a main-thread heartbeat
// (the built @runplane/eventlog) and writes one JSON line to stdout per recomputation that changed
// what it owns (`{ partitions, members, stale }`), after a first `{ ready: instance }` line.
// Settings as JSON in RUNPLANE_TEST_MEMBER: { natsUrl, user, pass, caFile, stream, prefix, partitions, service, ttlMs }.
import { EventLog, PartitionOwnership } from '@runplane/eventlog';

const s = JSON.parse(process.env.RUNPLANE_TEST_MEMBER ?? '{}');
const log = await EventLog.connect({
  natsUrl: s.natsUrl,
  user: s.user,
  pass: s.pass,
  caFile: s.caFile,
  stream: s.stream,
  prefix: s.prefix,
  partitions: s.partitions,
  name: `member-${process.pid}`,
});
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
const ownership = await PartitionOwnership.start(log, s.service, 'main-thread', s.ttlMs, {
  log: (fields) => {
    if ('partitions' in fields) say({ partitions: fields.partitions, members: fields.members, stale: fields.stale ?? [] });
  },
  warn: () => undefined,
});
say({ ready: log.writer.instance });
process.on(
  'SIGTERM',
  () =>
    void ownership
      .stop()
      .then(() => log.close())
      .finally(() => process.exit(0)),
);
