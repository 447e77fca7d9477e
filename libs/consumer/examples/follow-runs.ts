// Follows every Run from a downstream service (docs/consumers.md). Run it with the environment of
// its durable's own user (NATS_URL, NATS_USER=downstream-1, its NATS_PASSWORD, RUNPLANE_STREAM,
// RUNPLANE_SUBJECT_PREFIX; `runplane up` prints one line per durable):
//   node libs/consumer/examples/follow-runs.ts          (Node 24 runs the TypeScript as it is)
import { MemoryProcessedStore, processedOnce, RunConsumer, runStreamOptionsFromEnv, type EventMeta, type RunEventOf } from '@runplane/consumer';

// The connection takes the user's own inbox prefix (_INBOX_downstream-1, inboxPrefixOf): the
// broker refuses this user `_INBOX.>`, where other users' replies would be (a client of your own sets it too).
const consumer = await RunConsumer.connect({
  ...runStreamOptionsFromEnv(),
  name: process.env.RUNPLANE_CONSUMER_NAME ?? process.env.NATS_USER ?? 'downstream-1', // the user's own durable; resumes where it acknowledged
  owners: ['admission', 'lifecycle'], // run.admitted and run.settled stand on these owners' subjects
  onInvalid: (m) => console.error(`not a fact, skipped: ${m.subject} #${m.seq} (${m.anomaly})`),
});
const settledRuns = new MemoryProcessedStore(); // at least once, and one settlement per Run (K9): key it by Run
const settled = (event: RunEventOf<'run.settled'>, meta: EventMeta) => console.log(`settled ${event.runId} ${event.data.outcome} (seq ${meta.seq})`);
const skipped = (event: RunEventOf<'run.settled'>, meta: EventMeta) =>
  console.error(`skipped #${meta.seq} of ${event.runId}: a copy, or a second settlement (audit it)`);
consumer.on('run.admitted', (event) => console.log(`admitted ${event.runId}: ${event.data.message.content}`));
consumer.on('run.settled', processedOnce(settledRuns, settled, { key: (event) => event.runId, onSkip: skipped }));
await consumer.start(); // a handler that throws leaves its event unacknowledged: it comes again
process.once('SIGINT', () => void consumer.close());
process.once('SIGTERM', () => void consumer.close());
