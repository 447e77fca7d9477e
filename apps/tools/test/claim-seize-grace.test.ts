/**
 * A claim read as expired is judged again before it is seized (K5, K10): a wake whose reads waited
 * through a NATS outage must not declare a live executor's call unknown on a reading taken before
 * the reconnection. On the suite's nats-server, with the judge's `ConnectionGrace` driven as its
 * client's `reconnect` status drives it (libs/eventlog/test/connection-grace.test.ts follows a real
 * server killed and restarted).
 *
 * Given another executor's claim read as expired, when the judge's connection is back after the
 * reading, then the seize is refused (`ClaimRenewed`) and the claim stays; when no reconnection
 * came between, then the same seize removes it.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventLog, type ConnectionGrace } from '@runplane/eventlog';
import { ClaimRenewed, ClaimStore } from '../src/claims.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
const TTL_MS = 300;
const runId = `cs${tag}`;
let judgeLog: EventLog;
let holderLog: EventLog;
let judge: ClaimStore;
let holder: ClaimStore;
const graceOf = (s: ClaimStore) => (s as unknown as { grace: ConnectionGrace }).grace;

beforeAll(async () => {
  const space = { ...SHARED_NATS, stream: `RPTEST_CS_${tag}`, prefix: `tcs${tag}` };
  judgeLog = await EventLog.connect({ ...space, name: 'judge' });
  holderLog = await EventLog.connect({ ...space, name: 'holder' });
  judge = await ClaimStore.open(judgeLog, TTL_MS);
  holder = await ClaimStore.open(holderLog, TTL_MS);
}, 60_000);
afterAll(async () => {
  await judge?.destroy();
  await judgeLog?.destroyStream();
  await judgeLog?.close();
  await holderLog?.close();
});

/** Another executor's claim on `toolCallId`, read by the judge once it has expired: what a wake decides on. */
async function readExpired(toolCallId: string) {
  await holder.take(runId, toolCallId);
  await sleep(TTL_MS + 100);
  graceOf(judge).reconnected(0);
  const { claims, revisions } = await judge.lookup(runId, [toolCallId]);
  const seen = claims[toolCallId]!;
  expect(judge.expired(ClaimStore.keyOf(runId, toolCallId), seen)).toBe(true);
  return { seen, revision: revisions[toolCallId]! };
}

describe('seizing an expired claim (K5, K10)', () => {
  it('given a claim read as expired, when the judge reconnected after the reading, then the seize is refused and the claim stays', async () => {
    const { seen, revision } = await readExpired('c1');
    graceOf(judge).reconnected(Date.now());
    await expect(judge.seize(runId, 'c1', revision, seen)).rejects.toBeInstanceOf(ClaimRenewed);
    expect(await judge.read(ClaimStore.keyOf(runId, 'c1'))).not.toBeNull();
  });

  it('given a claim read as expired, when no reconnection came since, then the seize removes it', async () => {
    const { seen, revision } = await readExpired('c2');
    await judge.seize(runId, 'c2', revision, seen);
    expect(await judge.read(ClaimStore.keyOf(runId, 'c2'))).toBeNull();
  });
});
