/**
 * The webhook notifier end to end: the built notifier process (apps/webhook-notifier/dist/main.js)
 * follows settlements appended by a real event log on the suite's nats-server and POSTs them to a
 * local receiver that fails one first attempt (500), lets one time out, answers one too late and
 * holds one unanswered (through a delivery whose retries are spent: it comes again, unacknowledged)
 * until the notifier is killed. Every settlement arrives at least once, signed as
 * Standard Webhooks says, copies carry the same webhook-id and body, and a settlement in flight when
 * the notifier dies, or appended while it is down, arrives after it starts again with the same name.
 */
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createWriteStream, mkdirSync, readFileSync, type WriteStream } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { makeEvent } from '@runplane/contracts';
import { repoRoot, spawnReady, type ManagedProcess } from '@runplane/devstack';
import { EventLog, runSubject } from '@runplane/eventlog';
import { SettlementNotification } from '@runplane/app-webhook-notifier';
import { SHARED_NATS, suiteNatsEnv } from '../../../test/support/nats-server.js';
import { admittedEvent } from '../../../test/support/events.js';

const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_WH_${tag}`, prefix: `twh${tag}` };
const consumerName = `downstream-wh-${tag}`;
const secret = `whsec_${randomBytes(32).toString('base64')}`;
const TIMEOUT_MS = 700;
const logDir = join(repoRoot(), '.runplane', 'test-logs', `webhook-notifier-${tag}`);
mkdirSync(logDir, { recursive: true });
const logFile = join(logDir, 'notifier.log');

/** What the receiver does with a Run's first attempt (then with every later one: 200). */
type Role = 'fail' | 'hang' | 'late' | 'hold' | 'ok';
/** How the receiver answered one request: a status in time, never ('hang', or 'held' until the notifier died), or 200 after the notifier's timeout ('late'). */
type Answer = 200 | 500 | 'hang' | 'late' | 'held';
interface Received {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  runId: string;
  answer: Answer;
  phase: number;
}

let log: EventLog;
let receiver: Server;
let receiverUrl: string;
let logStream: WriteStream;
const received: Received[] = [];
/** 1 until the first notifier is killed, then 2 (the held settlement is answered from then on). */
let phase = 1;
const roles = new Map<string, Role>();
const notifiers: ManagedProcess[] = [];

const ctx = (runId: string) => ({ runId, conversationId: `conv${tag}`, correlationId: 'm1', causationId: null });
const settlement = (runId: string) =>
  makeEvent(
    'run.settled',
    ctx(runId),
    'settle',
    {
      outcome: 'partial',
      reason: 'the deadline came',
      passageIds: ['p1'],
      receipts: [{ toolCallId: 't1', name: 'list_funds', status: 'unknown' }],
      usage: { modelRequests: 2, toolCalls: 1, promptTokens: 100, completionTokens: 50 },
      unanswered: [{ part: 'the coverage gaps', reason: 'not researched before the deadline' }],
    },
    new Date(),
  );
const admitted = (runId: string) => admittedEvent(runId);

/** The Standard Webhooks signature, computed here from the spec: base64 HMAC-SHA256 of `id.timestamp.body` under the secret's bytes. */
function validSignature(r: Received): boolean {
  const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
  const expected = Buffer.from(`v1,${createHmac('sha256', key).update(`${r.id}.${r.timestamp}.${r.body}`).digest('base64')}`);
  return r.signature.split(' ').some((s) => s.length === expected.length && timingSafeEqual(Buffer.from(s), expected));
}

function receive(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = Buffer.concat(chunks).toString('utf8');
    const id = String(req.headers['webhook-id']);
    const runId = (JSON.parse(body) as { data: { runId: string } }).data.runId;
    const first = !received.some((r) => r.id === id);
    const role = roles.get(runId) ?? 'ok';
    let answer: Answer = 200;
    if (role === 'hold' && phase === 1) answer = 'held';
    else if (first && role === 'fail') answer = 500;
    else if (first && role === 'hang') answer = 'hang';
    else if (first && role === 'late') answer = 'late';
    received.push({
      id,
      timestamp: String(req.headers['webhook-timestamp']),
      signature: String(req.headers['webhook-signature']),
      body,
      runId,
      answer,
      phase,
    });
    if (answer === 200 || answer === 500) res.writeHead(answer).end();
    // answered after the notifier gave up: the receiver took it, the notifier sends it again
    else if (answer === 'late') setTimeout(() => res.writeHead(200).end(), TIMEOUT_MS * 3);
    // 'hang' and 'held' are never answered (their sockets are closed at the end)
  });
}

async function until(pred: () => boolean | Promise<boolean>, what: string, timeoutMs = 40_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}; received: ${JSON.stringify(received.map((r) => [r.runId, r.answer]))}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const delivered = (runId: string) => received.some((r) => r.runId === runId && r.answer === 200);

async function startNotifier(): Promise<ManagedProcess> {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    // the suite's user on the shared server, over TLS: it may use the durable of any name
    ...suiteNatsEnv(),
    RUNPLANE_STREAM: space.stream,
    RUNPLANE_SUBJECT_PREFIX: space.prefix,
    WEBHOOK_URL: receiverUrl,
    WEBHOOK_SECRET: secret,
    WEBHOOK_CONSUMER_NAME: consumerName,
    WEBHOOK_TIMEOUT_MS: String(TIMEOUT_MS),
    WEBHOOK_RETRIES: '2',
    WEBHOOK_MIN_BACKOFF_MS: '100',
    WEBHOOK_MAX_BACKOFF_MS: '400',
    // a settlement a killed notifier held comes again after this
    WEBHOOK_ACK_WAIT_MS: '2000',
  };
  const p = await spawnReady('webhook-notifier', join(repoRoot(), 'apps/webhook-notifier/dist/main.js'), [], env, /ready on ([\w-]+)/, logStream);
  notifiers.push(p);
  return p;
}

beforeAll(async () => {
  logStream = createWriteStream(logFile);
  log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'admin' });
  receiver = createServer(receive);
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const address = receiver.address();
  receiverUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/hooks/runplane`;
});

afterAll(async () => {
  for (const p of notifiers) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
  receiver?.closeAllConnections();
  await new Promise((r) => receiver?.close(r));
  await log?.jsm.consumers.delete(space.stream, consumerName).catch(() => undefined);
  await log?.destroyStream();
  await log?.close();
  logStream?.end();
});

it('delivers every settlement at least once, signed, copies with the same webhook-id, nothing lost across a crash of the notifier', async () => {
  const before = ['fail', 'hang', 'late', 'hold', 'ok', 'ok', 'ok', 'ok'] as const;
  const runsBefore = before.map((role, i) => {
    const runId = `r${i}${role}${tag}`;
    roles.set(runId, role);
    return runId;
  });
  const runsWhileDown = Array.from({ length: 4 }, (_, i) => `down${i}${tag}`);
  for (const runId of runsBefore) {
    await log.append(admitted(runId), 0);
    await log.append(settlement(runId), 0);
  }
  // a second settlement of a settled Run, appended on top of its first (a compromised lifecycle's
  // forgery, K9): a fact of the log, but never notified as a second outcome
  const twice = runsBefore[4]!;
  const firstSettlement = await log.lastOf(twice, 'lifecycle');
  const secondSettlement = makeEvent(
    'run.settled',
    ctx(twice),
    'forged-second',
    { ...settlement(twice).data, outcome: 'failed', reason: 'a forged second settlement' },
    new Date(),
  );
  const secondStored = await log.append(secondSettlement, firstSettlement!.seq);
  // a settlement published around the event log (no checked expectation): no fact, never notified
  const forgedRun = `forged${tag}`;
  const forged = await log.js.publish(runSubject(log.space, forgedRun, 'lifecycle'), JSON.stringify(settlement(forgedRun)));

  const first = await startNotifier();
  await until(() => runsBefore.filter((r) => roles.get(r) !== 'hold').every(delivered), 'every settlement but the held one');
  // a delivery that gave up (1 + WEBHOOK_RETRIES attempts) left the settlement unacknowledged: it came again
  await until(() => received.filter((r) => roles.get(r.runId) === 'hold').length > 3, 'the held settlement delivered a second time');
  // the notifier dies with the held settlement unanswered (not acknowledged)
  const exited = new Promise((r) => first.child.once('exit', r));
  first.child.kill('SIGKILL');
  await exited;
  for (const runId of runsWhileDown) await log.append(settlement(runId), 0);
  phase = 2;

  const second = await startNotifier();
  const all = [...runsBefore, ...runsWhileDown];
  await until(() => all.every(delivered), 'every settlement after the restart');
  // acknowledged only once the receiver answered: nothing left for the durable consumer
  await until(async () => {
    const info = await log.jsm.consumers.info(space.stream, consumerName);
    return info.num_pending === 0 && info.num_ack_pending === 0;
  }, 'every settlement acknowledged');
  await second.stop();
  expect(second.child.exitCode).toBe(0);

  // every request: the settlement's event id as webhook-id, a fresh timestamp, a valid signature
  const ids = new Map(all.map((runId) => [runId, settlement(runId).eventId]));
  for (const r of received) {
    expect(r.id).toBe(ids.get(r.runId));
    expect(Math.abs(Number(r.timestamp) - Date.now() / 1000)).toBeLessThan(120);
    expect(validSignature(r)).toBe(true);
    expect(() =>
      new Webhook(secret).verify(r.body, { 'webhook-id': r.id, 'webhook-timestamp': r.timestamp, 'webhook-signature': r.signature }),
    ).not.toThrow();
    const body = SettlementNotification.parse(JSON.parse(r.body));
    expect(body.data).toMatchObject({ eventId: r.id, runId: r.runId, outcome: 'partial', conversationId: `conv${tag}` });
  }
  // a copy carries the same webhook-id and the same body
  for (const runId of all) {
    const copies = received.filter((r) => r.runId === runId);
    expect(new Set(copies.map((r) => r.body)).size).toBe(1);
  }
  const answers = (role: Role) => received.filter((r) => roles.get(r.runId) === role).map((r) => r.answer);
  expect(answers('fail').slice(0, 2)).toEqual([500, 200]);
  expect(answers('hang').slice(0, 2)).toEqual(['hang', 200]);
  expect(answers('late').slice(0, 2)).toEqual(['late', 200]);
  // in flight when the notifier died, delivered by the next one
  const held = received.filter((r) => roles.get(r.runId) === 'hold');
  expect(held.filter((r) => r.phase === 1).every((r) => r.answer === 'held')).toBe(true);
  expect(held.some((r) => r.phase === 2 && r.answer === 200)).toBe(true);
  expect(received.filter((r) => runsWhileDown.includes(r.runId)).every((r) => r.phase === 2)).toBe(true);
  // the forgeries reached no receiver, and the notifier said why
  expect(received.some((r) => r.runId === forgedRun)).toBe(false);
  expect(received.filter((r) => r.runId === twice).map((r) => r.id)).toEqual([settlement(twice).eventId]);
  expect(received.some((r) => r.id === secondSettlement.eventId)).toBe(false);
  await new Promise((r) => logStream.write('', r));
  const lines = readFileSync(logFile, 'utf8').split('\n');
  expect(
    lines.some(
      (l) =>
        l.includes('a second settlement of the Run') &&
        l.includes(`"seq":${secondStored.seq}`) &&
        l.includes(`"firstSettlementSeq":${firstSettlement!.seq}`),
    ),
  ).toBe(true);
  expect(lines.some((l) => l.includes('not a fact of the log') && l.includes(`"seq":${forged.seq}`) && l.includes('unverified-event'))).toBe(true);
});
