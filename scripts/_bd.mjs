import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, headers } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
const port = 14000 + Math.floor(Math.random() * 1000);
const dir = mkdtempSync(join(tmpdir(), 'bd-'));
const srv = spawn('.cache/nats-server/2.15.1/nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', dir], { stdio: 'ignore' });
await new Promise((r) => setTimeout(r, 700));
const nc = await connect({ servers: `127.0.0.1:${port}` });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
await jsm.streams.add({ name: 'S', subjects: ['t.run.>', 'other.>'], allow_direct: true });
const N = Number(process.argv[2] ?? 20000);
const payload = new TextEncoder().encode(JSON.stringify({ type: 'x', data: 'y'.repeat(400) }));
let p = [];
for (let i = 0; i < N; i++) {
  const h = headers(); h.set('Rp-Sig', `sig-${i}`);
  p.push(js.publish(i % 10 === 0 ? `other.${i}` : `t.run.r${i % 97}.runtime.${i % 8}`, payload, { headers: h }));
  if (p.length >= 500) { await Promise.all(p); p = []; }
}
await Promise.all(p);
const last = (await jsm.streams.info('S')).state.last_seq;
for (const round of [1,2]) {
// 1. batch direct get
var t = performance.now(); var c0 = process.cpuUsage();
var seq = 1, n = 0, firstHdr = null, order = true, prev = 0, requests = 0, eob = null;
while (seq <= last) {
  const it = await jsm.direct.getBatch('S', { seq, batch: 1000, next_by_subj: 't.run.>' });
  requests++;
  let got = 0;
  for await (const m of it) { got++; n++; if (m.seq <= prev) order = false; prev = m.seq; seq = m.seq + 1; firstHdr ??= [m.subject, m.header.get('Rp-Sig'), m.lastSequence, m.pending]; }
  if (got === 0) break;
}
var cpu1 = process.cpuUsage(c0);
console.log('direct batch:', n, 'msgs', (performance.now() - t).toFixed(0), 'ms wall', ((cpu1.user + cpu1.system) / 1000).toFixed(0), 'ms cpu', 'requests', requests, 'order', order, 'first', firstHdr);
// 2. ephemeral consumer fetch
t = performance.now(); c0 = process.cpuUsage();
var info = await jsm.consumers.add('S', { filter_subject: 't.run.>', ack_policy: AckPolicy.None, deliver_policy: DeliverPolicy.All, mem_storage: true, inactive_threshold: 60e9 });
var consumer = await js.consumers.get('S', info.name);
var remaining = info.num_pending, m2 = 0;
while (remaining > 0) { const b = await consumer.fetch({ max_messages: Math.min(remaining, 512), expires: 5000 }); for await (const m of b) { remaining--; m2++; } }
var cpu2 = process.cpuUsage(c0);
console.log('consumer fetch:', m2, 'msgs', (performance.now() - t).toFixed(0), 'ms wall', ((cpu2.user + cpu2.system) / 1000).toFixed(0), 'ms cpu');
}
await nc.close(); srv.kill();
