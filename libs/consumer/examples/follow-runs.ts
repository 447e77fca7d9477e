// Follows every Run from a downstream service (docs/consumers.md). Run it with the environment of
// its durable's own user (NATS_URL, NATS_USER=downstream-1, its NATS_PASSWORD, RUNPLANE_STREAM,
// RUNPLANE_SUBJECT_PREFIX; `runplane up` prints one line per durable):
//   node libs/consumer/examples/follow-runs.ts          (Node 24 runs the TypeScript as it is)
import { MemoryProcessedStore, processedOnce, RunConsumer, runStreamOptionsFromEnv } from '@runplane/consumer';

// The connection takes the user's own inbox prefix (_INBOX_downstream-1, inboxPrefixOf): the
// broker refuses this user `_INBOX.>`, where other users' replies would be (a client of your own sets it too).
const consumer = await RunConsumer.connect({
  ...runStreamOptionsFromEnv(),
  name: process.env.RUNPLANE_CONSUMER_NAME ?? process.env.NATS_USER ?? 'downstream-1', // the user's own durable; resumes where it acknowledged
  owners: ['admission', 'lifecycle'], // run.admitted and run.settled stand on these owners' subjects
  onInvalid: (m) => console.error(`not a fact, skipped: ${m.subject} #${m.seq} (${m.anomaly})`),
});
const seen = new MemoryProcessedStore(); // delivery is at least once: a copy has the same eventId
consumer.on('run.admitted', (event) => console.log(`admitted ${event.runId}: ${event.data.message.content}`));
consumer.on(
  'run.settled',
  processedOnce(seen, (event, meta) => console.log(`settled ${event.runId} ${event.data.outcome} (seq ${meta.seq}, delivery ${meta.deliveryCount})`)),
);
await consumer.start(); // a handler that throws leaves its event unacknowledged: it comes again
process.once('SIGINT', () => void consumer.close());
process.once('SIGTERM', () => void consumer.close());
