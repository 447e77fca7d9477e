/**
 * A member that stalled does not take a live one for gone when it resumes (partitions.ts
 * `recomputeOnceTaken`): the beats written while it was frozen reach it one after another, the
 * oldest first, and it judges the members only once it has taken them all. Against the suite's real
 * NATS server: one member beats in this process, the other in a process of its own that is frozen
 * with SIGSTOP for three TTLs and continued. Before the fix the continued member logged itself the
 * only member, owning every partition, with the live one as stale (and its transport unpinned the
 * live one's partitions).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { destroyBus, EventLog, HeartbeatStore, PartitionOwnership } from '@runplane/eventlog';
import { SHARED_NATS } from '../../../test/support/nats-server.js';
import { waitFor } from '../../../test/support/wait.js';

const tag = randomBytes(4).toString('hex');
const TTL = 900;
const space = { stream: `RPTEST_STALL_${tag}`, prefix: `tstall${tag}`, partitions: 4 };
let log: EventLog;
let here: PartitionOwnership;
let child: ChildProcess | undefined;
/** What the member in the other process said, one object per line. */
const said: { ready?: string; partitions?: number[]; members?: number; stale?: string[] }[] = [];

beforeAll(async () => {
  log = await EventLog.connect({ ...SHARED_NATS, ...space, name: 'stalled-member' });
  await HeartbeatStore.open(log);
  here = await PartitionOwnership.start(log, 'lifecycle', 'main-thread', TTL);
  child = spawn(process.execPath, [fileURLToPath(new URL('./member-process.mjs', import.meta.url))], {
    env: { ...process.env, RUNPLANE_TEST_MEMBER: JSON.stringify({ ...SHARED_NATS, ...space, service: 'lifecycle', ttlMs: TTL }) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let buffered = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => {
    buffered += d;
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    for (const line of lines) if (line.trim()) said.push(JSON.parse(line) as (typeof said)[number]);
  });
  await waitFor('the other member ready', () => said.some((s) => s.ready), 20_000);
  await waitFor(
    'the partitions shared',
    () => here.partitions().length === 2 && said.findLast((s) => s.partitions)?.partitions?.length === 2,
    10_000,
  );
}, 60_000);
afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGCONT');
    child.kill('SIGTERM');
    await new Promise((r) => child!.once('exit', r));
  }
  await here?.stop();
  if (log) {
    await destroyBus(log);
    await log.close();
  }
});

describe('a member continued after a freeze', () => {
  it('given the other member frozen for three TTLs while this one beats, when it continues, then it never takes this one for gone: no change of its own to every partition', async () => {
    const before = said.length;
    child!.kill('SIGSTOP');
    // this member takes every partition once the frozen one's beat is stale
    await waitFor('the frozen member taken for gone here', () => here.partitions().length === 4, 10_000);
    await new Promise((r) => setTimeout(r, 3 * TTL));
    child!.kill('SIGCONT');
    // the continued member beats again: the partitions are shared again
    await waitFor('the partitions shared again', () => here.partitions().length === 2, 10_000);
    await new Promise((r) => setTimeout(r, 2 * TTL)); // anything the continued member says late is said by now
    const after = said.slice(before);
    expect(after.filter((s) => s.members === 1 || (s.stale ?? []).includes(here.instance))).toEqual([]);
    expect(after.every((s) => s.partitions === undefined || s.partitions.length === 2)).toBe(true);
  }, 60_000);
});
