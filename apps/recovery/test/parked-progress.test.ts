/**
 * Recovery's no-progress checks of parked Runs (K7, K10), on a real nats-server: a Run parked on a
 * human is read once and not again however long it waits (its clock does not run while it is
 * parked); its wake re-arms the check, and a woken Run that stays silent is fenced `no-progress`.
 * A wake that lands while the check is reading the log, or a partition that comes back to the
 * replica, re-arms it too. The pure schedule ({@link nextProgressCheck}) is tested given/when/then.
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { EventLog, LeaseStore, partitionOf, type OwnershipChange, type PartitionOwnership } from '@runplane/eventlog';
import { RunCommandHandler } from '@runplane/service-kit/command-handler';
import { foldRun } from '@runplane/run-facts';
import { nextProgressCheck } from '@runplane/app-recovery';
import { subjectTokenOf, type Owner } from '@runplane/contracts';
import { DeadlineStore } from '../src/deadlines.js';
import { DeadlineWatcher } from '../src/deadline-watcher.service.js';
import { History } from '../../../test/support/history.js';
import { describeEachNatsServer, natsServersUnderTest, SUITE_NATS } from '../../../test/support/nats-server.js';

const servers = await natsServersUnderTest();
const tag = randomBytes(4).toString('hex');
const holder = { service: 'runtime', instance: `runtime-${tag}` };
const DEADLINE = '2100-01-01T00:00:00.000Z';
const SWEEP_MS = 50;

/** A Run (times from 2025-12-31T23:00:01Z, 1 s apart) with a 1 s no-progress limit, parked on a question for a human that expires in 2100. */
const parkedRun = (runId: string) =>
  new History(runId, `conv-${runId}`)
    .admitted({ noProgressSeconds: 1, tools: ['ask_human'], deadlineAt: DEADLINE })
    .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 60_000 })
    .add('model.turn.requested', 1, { turn: 1, model: 'scripted' })
    .add('model.turn.completed', 1, { turn: 1, content: '', toolCalls: [], finishReason: 'tool_calls', usage: null })
    .waitOpened(1, 'q', 'Which fund?', DEADLINE);

describe('nextProgressCheck (when recovery reads a Run again for its no-progress clock, K7)', () => {
  const now = Date.parse('2025-12-31T23:00:30.000Z');
  it('given a Run still making progress, then at its last progress plus the limit', () => {
    const h = parkedRun('r').events.slice(0, 3);
    expect(nextProgressCheck(foldRun('r', h), Date.parse('2025-12-31T23:00:01.500Z'))).toBe(Date.parse('2025-12-31T23:00:02.000Z'));
    const longer = new History().admitted({ noProgressSeconds: 60 }).add('model.turn.requested', 1, { turn: 1, model: 'scripted' });
    expect(nextProgressCheck(foldRun('run-1', longer.events), now)).toBe(Date.parse('2025-12-31T23:01:01.000Z'));
  });
  it('given a silent Run past its limit (the fence decided nothing), then now: the next sweep', () => {
    expect(nextProgressCheck(foldRun('r', parkedRun('r').events.slice(0, 3)), now)).toBe(now);
  });
  it('given a Run parked on a human or on a child, then never until its wake, however long ago its last progress', () => {
    expect(nextProgressCheck(parkedRun('r').facts, now)).toBe(Infinity);
    const child = new History()
      .admitted({ noProgressSeconds: 1, tools: ['spawn_subagent'] })
      .turn(1, { calls: [{ id: 'c1', name: 'spawn_subagent' }] })
      .childRequested(1, 'c1', 'What does QQQ hold?');
    expect(nextProgressCheck(child.facts, now)).toBe(Infinity);
  });
  it('given the wake recorded, then at the wake plus the limit (the answer is progress)', () => {
    const woken = parkedRun('r').waitAnswered('q', 'SPY'); // 23:00:06
    expect(nextProgressCheck(woken.facts, Date.parse('2025-12-31T23:00:06.500Z'))).toBe(Date.parse('2025-12-31T23:00:07.000Z'));
  });
  it('given a finished, fenced or settled Run, or one without a limit, then never', () => {
    expect(nextProgressCheck(parkedRun('r').closed().facts, now)).toBe(Infinity);
    expect(nextProgressCheck(new History().admitted().facts, now)).toBe(Infinity);
  });
});

describeEachNatsServer(servers, (server) => {
  let log: EventLog;
  let leases: LeaseStore;
  let store: DeadlineStore;
  let commands: RunCommandHandler;
  /** The no-progress checks of each Run (each reads the Run's log). */
  const reads = new Map<string, number>();
  let sweeps = 0;
  /** Called after a check's read, before the watcher sees its facts. */
  let afterRead: (runId: string) => void = () => undefined;
  const watchers: DeadlineWatcher[] = [];

  beforeAll(async () => {
    log = await EventLog.connect({ ...SUITE_NATS, natsUrl: server.url, stream: `RPTEST_PP_${tag}`, prefix: `tpp${tag}` });
    leases = await LeaseStore.open(log);
    store = await DeadlineStore.open(log);
    commands = new RunCommandHandler(log, 'recovery');
    const handle = commands.handle.bind(commands);
    commands.handle = async (runId, decide, opts) => {
      const result = await handle(runId, decide, opts);
      afterRead(runId);
      return result;
    };
  });
  afterAll(async () => {
    for (const w of watchers) await w.onApplicationShutdown();
    await leases.destroy();
    await store.destroy();
    await log.destroyStream();
    await log.close();
  });

  /** Starts a watcher (sweeping every 50 ms, counting its sweeps) with `ownership` when given. */
  async function startWatcher(ownership?: PartitionOwnership): Promise<DeadlineWatcher> {
    const w = new DeadlineWatcher(commands, store, { leaseTtlMs: 1_000, sweepMs: SWEEP_MS }, leases, ownership);
    const inside = w as unknown as { sweep: () => Promise<void>; checkProgress: (runId: string) => Promise<void> };
    const sweep = inside.sweep.bind(w);
    inside.sweep = async () => {
      await sweep();
      sweeps++;
    };
    const check = inside.checkProgress.bind(w);
    inside.checkProgress = (runId) => {
      reads.set(runId, (reads.get(runId) ?? 0) + 1);
      return check(runId);
    };
    watchers.push(w);
    await w.onApplicationBootstrap();
    return w;
  }

  /** Appends `h`'s events to the log in order, each expecting its owner subject's last sequence. */
  async function append(h: History, from = 0): Promise<void> {
    const lasts: Partial<Record<Owner, number>> = {};
    const stored = await log.readRun(h.runId);
    for (const s of stored) lasts[subjectTokenOf(s.event)] = s.seq;
    for (const { event } of h.events.slice(from)) {
      const token = subjectTokenOf(event);
      const r = await log.append(event, lasts[token] ?? 0);
      lasts[token] = r.seq;
    }
  }

  async function until(check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
    const end = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > end) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  /** Resolves after `n` more sweeps of every running watcher. */
  const sweepsPass = (n: number) => {
    const target = sweeps + n;
    return until(() => sweeps >= target);
  };
  const fencedReason = async (runId: string) => foldRun(runId, await log.readRun(runId)).fenced?.reason ?? null;

  it('given a Run parked on a human, when its limit passes many times over, then it is read once; its wake re-arms the check and, silent after it, it is fenced no-progress', async () => {
    const w = await startWatcher();
    const runId = `park-${tag}`;
    const h = parkedRun(runId);
    await append(h);
    await w.record(runId, DEADLINE, 0); // due at once: read on the next sweep
    await until(() => (reads.get(runId) ?? 0) >= 1);
    // 40 sweeps of 50 ms: two seconds, twice the 1 s limit (the old schedule read it again after one)
    await sweepsPass(40);
    expect(reads.get(runId)).toBe(1);
    expect(await fencedReason(runId)).toBeNull();

    await append(h.waitAnswered('q', 'SPY'), h.events.length - 1);
    w.woken(runId); // as CancelController does on the delivered wait.answered
    await until(async () => (await fencedReason(runId)) === 'no-progress');
    expect(reads.get(runId)).toBe(2);
    await w.onApplicationShutdown();
  });

  it('given a Run whose park is delivered before its first check, then it is never read while parked; its wake re-arms the check', async () => {
    const w = await startWatcher();
    const runId = `first-${tag}`;
    const h = parkedRun(runId);
    await append(h);
    await w.record(runId, DEADLINE, Date.now() + 500); // first check half a second after "admission"
    w.parked(runId); // as CancelController does on the delivered wait.opened
    await sweepsPass(30); // a second and a half: past the first check and the 1 s limit
    expect(reads.get(runId) ?? 0).toBe(0);
    await append(h.waitAnswered('q', 'SPY'), h.events.length - 1);
    w.woken(runId);
    await until(async () => (await fencedReason(runId)) === 'no-progress');
    expect(reads.get(runId)).toBe(1);
    await w.onApplicationShutdown();
  });

  it('given a park delivered late, after the Run was woken, then it changes nothing: the woken Run is still checked', async () => {
    const w = await startWatcher();
    const runId = `late-${tag}`;
    const h = parkedRun(runId).waitAnswered('q', 'SPY');
    await append(h);
    await w.record(runId, DEADLINE, Date.now() + 60_000);
    w.woken(runId);
    w.parked(runId); // the wait.opened handled after the wake's
    await until(async () => (await fencedReason(runId)) === 'no-progress');
    expect(reads.get(runId)).toBe(1);
    await w.onApplicationShutdown();
  });

  it('given a wake delivered while the check is reading the log (it read the Run still parked), then the Run is read again at the next sweep', async () => {
    const w = await startWatcher();
    const runId = `race-${tag}`;
    const h = parkedRun(runId);
    await append(h);
    let first = true;
    afterRead = (id) => {
      if (id !== runId || !first) return;
      first = false;
      w.woken(runId); // the wake lands after the read, before the watcher sees the parked facts
    };
    await w.record(runId, DEADLINE, 0);
    await until(() => (reads.get(runId) ?? 0) >= 2);
    afterRead = () => undefined;
    await w.onApplicationShutdown();
  });

  it('given a parked Run whose partition leaves this replica and comes back (its wake may have gone to another replica), then it is read once more', async () => {
    const listeners: ((c: OwnershipChange) => void)[] = [];
    let owned = true;
    const ownership = {
      partitionCount: log.space.partitions,
      owns: () => owned,
      onChange: (l: (c: OwnershipChange) => void) => {
        listeners.push(l);
        return () => undefined;
      },
    } as unknown as PartitionOwnership; // a stand-in for the membership bucket: only what the watcher asks of it
    const w = await startWatcher(ownership);
    const runId = `move-${tag}`;
    const p = partitionOf(runId, log.space.partitions);
    await append(parkedRun(runId));
    await w.record(runId, DEADLINE, 0);
    await until(() => (reads.get(runId) ?? 0) >= 1);
    owned = false;
    for (const l of listeners) l({ owned: [], added: [], removed: [p], members: [], stale: [] });
    await sweepsPass(5);
    owned = true;
    for (const l of listeners) l({ owned: [p], added: [p], removed: [], members: [], stale: [] });
    await until(() => (reads.get(runId) ?? 0) >= 2);
    await sweepsPass(5);
    expect(reads.get(runId)).toBe(2);
    await w.onApplicationShutdown();
  });
});
