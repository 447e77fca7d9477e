/**
 * The claims sweep lists the bucket without leaving consumers behind (K5: a sweep that fails stops
 * judging expired claims). `kv.keys()` created a consumer on every call and left it on the server
 * when the bucket was empty: at the 5 s sweep about 60 stood; at 100 ms the bucket reached the
 * server's consumer cap within two minutes and every sweep failed ("maximum consumers limit
 * reached", a new-user trial). On the suite's nats-server.
 *
 * Given the claims bucket, empty and then holding claims, when it is listed many times, then every
 * claim is listed, and the bucket's stream has no consumer.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog } from '@runplane/eventlog';
import { ClaimStore } from '../src/claims.js';
import { SHARED_NATS } from '../../../test/support/nats-server.js';

const tag = randomBytes(4).toString('hex');
const runId = `cc${tag}`;
let log: EventLog;
let claims: ClaimStore;

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, stream: `RPTEST_CC_${tag}`, prefix: `tcc${tag}` });
  claims = await ClaimStore.open(log, 60_000);
}, 60_000);
afterAll(async () => {
  await claims?.destroy();
  await log?.destroyStream();
  await log?.close();
});

/** Every claim key the sweep's listing yields. */
async function listed(): Promise<string[]> {
  const keys: string[] = [];
  for await (const c of claims.all()) keys.push(c.key);
  return keys.sort();
}

/** The consumers standing on the claims bucket's stream. */
async function consumers(): Promise<number> {
  let n = 0;
  for await (const _ of log.jsm.consumers.list(`KV_${ClaimStore.bucketFor(log)}`)) n++;
  return n;
}

describe('the claims sweep leaves no consumer (K5)', () => {
  it('given the claims bucket empty, then holding claims, when it is listed 20 times each, then every claim is listed and no consumer stands', async () => {
    for (let i = 0; i < 20; i++) expect(await listed()).toEqual([]);
    expect(await consumers()).toBe(0);

    await claims.take(runId, 'a');
    await claims.take(runId, 'b');
    const released = await claims.take(runId, 'c');
    await claims.release(released.key, released.revision);
    for (let i = 0; i < 20; i++) expect(await listed()).toEqual([ClaimStore.keyOf(runId, 'a'), ClaimStore.keyOf(runId, 'b')]);
    expect(await consumers()).toBe(0);
  });
});
