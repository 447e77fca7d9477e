/**
 * The heartbeat worker thread (see {@link ProcessHeartbeat} in ./heartbeats.ts): connects to NATS
 * on its own, writes the process's heartbeat key at once and then every `everyMs`, and on `stop`
 * deletes the key and exits. Nothing else runs on this thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Kvm } from '@nats-io/kv';
import { releaseStartupMemory } from '@runplane/kit/memory';
import { beatKey } from './beat.js';
import type { HeartbeatWorkerData } from './heartbeats.js';
import { natsUserOptions } from './inbox.js';
import { natsTlsOptions } from './tls.js';
import { connectPatiently, STALE_CONNECTION_OPTIONS } from './stale-connection.js';

const data = workerData as HeartbeatWorkerData;
const nc = await connectPatiently({
  // one server, or every node of a cluster comma-separated (NATS_URL, contracts' natsServerList)
  servers: data.natsUrl
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean),
  name: `${data.value.service}-heartbeat`,
  maxReconnectAttempts: -1,
  // a hung server (frozen, its connection open) left within seconds, each connection attempt
  // bounded at 5 s (a first one tried again), as the main thread's (stale-connection.ts)
  ...STALE_CONNECTION_OPTIONS,
  noAsyncTraces: true,
  // replies on the user's own inbox, the only one the broker lets it read (per-user reply subjects, ./inbox.ts)
  ...natsUserOptions(data.user, data.pass),
  // TLS as the main thread's connection (NATS_CA_FILE, checked there first)
  ...natsTlsOptions(data.natsUrl, data.caFile),
});
const kv = await new Kvm(nc).open(data.bucket);
const beating = beatKey(kv, data.key, JSON.stringify(data.value), data.everyMs);
void beating.written.then(() => parentPort!.postMessage({ beat: true }));
await beating.tried;
// what connecting left behind goes back to the OS (a few MiB of this thread's isolate; kit memory.ts),
// unless the process was started with RUNPLANE_STARTUP_COLLECTION=false
parentPort!.postMessage({ collected: releaseStartupMemory(data.startupCollection) });
parentPort!.on('message', (m) => {
  if (m !== 'stop') return;
  void beating
    .stop()
    .then(() => nc.close())
    .finally(() => process.exit(0));
});
