/**
 * A whole-log read (`readAll`: audits, rebuilds, `timeline --all`) through a broker that passes one
 * reply per request. An upgrade trial ran the current CLI as the ops user against a broker
 * configured by an earlier release, whose export of the Run stream's direct gets lacked `response:
 * stream`: each batched direct get came back with its first message only, the read waited out
 * every batch's idle bound and asked again one sequence further, and `audit --run` took 56 s for 11
 * events (`audit --all` never finished), saying nothing. Given such a broker (today's accounts with
 * that one export changed back), when the ops user reads the log, then it gets every event in order,
 * after one stalled batch, and says once how to fix the broker.
 */
import { afterAll, beforeAll, expect, it, jest } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { makeEvent } from '@runplane/contracts';
import { natsAuthConfig, newNatsUsers } from '@runplane/devstack';
import { EventLog } from '@runplane/eventlog';
import { TestNatsServer } from '../../../test/support/nats-server.js';
import { testNatsServerBinary } from '../../../test/support/stack.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_SINGLE_${tag}`, prefix: `tsr${tag}`, partitions: 2 };
const users = newNatsUsers();
/** Each batch of the read waits this long for its next message (production: 5 s). */
const IDLE_MS = 1_000;
const EVENTS = 40;
let server: TestNatsServer;
let admin: EventLog;
let ops: EventLog;

beforeAll(async () => {
  // the export of direct gets as an earlier release configured it: one reply per request
  const config = natsAuthConfig(space, users).replace(
    new RegExp(`(\\{ service: "\\$JS\\.API\\.DIRECT\\.GET\\.${space.stream}(?:\\.[^"]*)?", accounts: \\[[^\\]]*\\]), response: stream \\}`, 'g'),
    '$1 }',
  );
  expect(config).not.toMatch(new RegExp(`DIRECT\\.GET\\.${space.stream}[^\\n]*response: stream`));
  server = await TestNatsServer.start({ bin: testNatsServerBinary(), config, auth: { user: users.admin.user, pass: users.admin.password } });
  admin = await EventLog.connect({ natsUrl: server.url, user: users.admin.user, pass: users.admin.password, ...space, name: 'admin' });
  const ctx = (runId: string) => ({ runId, conversationId: 'c1', correlationId: 'm1', causationId: null });
  for (let i = 0; i < EVENTS; i++)
    await admin.append(makeEvent('model.turn.requested', ctx(`r${i}${tag}`), 1, { turn: 1, model: 'm' }, new Date()), 0);
  ops = await EventLog.connect({ natsUrl: server.url, user: users.ops.user, pass: users.ops.password, ...space, name: 'ops' });
}, 60_000);
afterAll(async () => {
  await ops?.close();
  await admin?.close();
  await server?.cleanup();
});

it('given a broker that passes one reply per direct get, when the ops user reads the whole log, then every event comes in order after one stalled batch, and the read says once how to fix the broker', async () => {
  const said: string[] = [];
  const write = jest.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => (said.push(String(chunk)), true));
  const seqs: number[] = [];
  try {
    // one stalled batch and then one request per event; without the change, a stall per event (40 s)
    for await (const stored of ops.readAll({ fetchExpiresMs: IDLE_MS })) seqs.push(stored.seq);
  } finally {
    write.mockRestore();
  }
  expect(seqs).toEqual(Array.from({ length: EVENTS }, (_, i) => i + 1));
  const lines = said.filter((l) => l.includes('one message per request'));
  expect(lines).toHaveLength(1);
  expect(lines[0]).toContain('response: stream');
  expect(lines[0]).toContain('runplane docs nats-auth');
}, 20_000);
