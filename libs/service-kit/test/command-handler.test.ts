/**
 * The one command handler (read, fold, decide, append conditionally, re-decide on conflict),
 * against the real JetStream: two writers racing on one Run, kept folds brought up to date with
 * only the new events, and an owner that may not append another owner's facts (K6).
 */
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { randomBytes } from 'node:crypto';
import { contextFrom, makeEvent, sha256Hex, type RunEvent } from '@runplane/contracts';
import { AppendConflict, EventLog, runStreamConfig, runSubject } from '@runplane/eventlog';
import { lastTurn, type RunFacts } from '@runplane/run-facts';
import { RunCommandHandler, runReads } from '../src/command-handler.js';
import { countDirectGets } from '../../../test/support/direct-gets.js';
import { forgedSettlement } from '../../../test/support/events.js';
import { SHARED_NATS_URL, SUITE_NATS } from '../../../test/support/nats-server.js';

const natsUrl = SHARED_NATS_URL;
const tag = randomBytes(4).toString('hex');
const space = { stream: `RPTEST_CH_${tag}`, prefix: `tch${tag}` };
let a: EventLog;
let b: EventLog;

const admit = (runId: string) =>
  makeEvent(
    'run.admitted',
    { runId, conversationId: 'c1', correlationId: 'm1', causationId: null },
    'admission',
    {
      message: { messageId: 'm1', clientMessageId: 'cm1', content: 'q', contentSha256: sha256Hex('q') },
      grant: { tools: ['list_funds'], model: 'm' },
      limits: { maxModelRequests: 5, maxToolCalls: 2, deadlineAt: '2100-01-01T00:00:00.000Z' },
    },
    new Date(0),
  );

/** A small runtime-like decider: request the next turn unless one is in flight. */
const requestNext = (facts: RunFacts, now: Date): RunEvent[] => {
  const last = lastTurn(facts);
  if (!facts.admitted || (last && !last.completed)) return [];
  const turn = facts.turns.length + 1;
  return [makeEvent('model.turn.requested', contextFrom(facts.lastEvent!), turn, { turn, model: 'm' }, now)];
};

beforeAll(async () => {
  // atomic batches also on this one-replica stream (by default only on a replicated one)
  a = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-a', atomicBatches: 'always' });
  b = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-b', atomicBatches: 'always' });
});
afterAll(async () => {
  await a.destroyStream();
  await a.close();
  await b.close();
});

describe('RunCommandHandler', () => {
  it('given two writers deciding the same step at once, then exactly one appends it and the other, re-reading, decides nothing (K6)', async () => {
    const runId = `race${tag}`;
    await a.append(admit(runId), 0);
    const results = await Promise.all([
      new RunCommandHandler(a, 'runtime').handle(runId, requestNext),
      new RunCommandHandler(b, 'runtime').handle(runId, requestNext),
    ]);
    const appended = results.flatMap((r) => r.appended);
    expect(appended.map((e) => e.event.type)).toEqual(['model.turn.requested']);
    const events = await a.readRun(runId);
    expect(events.filter((e) => e.event.type === 'model.turn.requested')).toHaveLength(1);
  });

  it('keeps a fold between commands and brings it up to date with only the new events', async () => {
    const runId = `fold${tag}`;
    await a.append(admit(runId), 0);
    const handler = new RunCommandHandler(a, 'runtime', () => new Date(1_000));
    await handler.handle(runId, requestNext);
    // another writer completes the turn meanwhile
    const facts = await new RunCommandHandler(b, 'runtime').folds.read(runId);
    await b.append(
      makeEvent(
        'model.turn.completed',
        contextFrom(facts.lastEvent!),
        1,
        { turn: 1, content: '', toolCalls: [], finishReason: 'stop', usage: null },
        new Date(2_000),
      ),
      facts.lastSeqByOwner.runtime,
    );
    const gets = countDirectGets(a);
    try {
      const { appended, facts: seen } = await handler.handle(runId, requestNext);
      expect(seen.turns[0]?.completed).not.toBeNull();
      expect(appended.map((e) => e.event.type)).toEqual(['model.turn.requested']);
      expect(appended[0]!.event.occurredAt).toBe(new Date(1_000).toISOString());
      expect(gets.count).toBe(6); // one last_by_subj per owner subject; the new event is its subject's last
    } finally {
      gets.restore();
    }
  });

  it('refuses a decided event of another owner before appending anything', async () => {
    const runId = `owner${tag}`;
    await a.append(admit(runId), 0);
    const settle = (facts: RunFacts, now: Date): RunEvent[] => [forgedSettlement(contextFrom(facts.lastEvent!), now)];
    await expect(new RunCommandHandler(a, 'runtime').handle(runId, settle)).rejects.toThrow(/runtime may not append run.settled/);
    expect((await a.readRun(runId)).map((e) => e.event.type)).toEqual(['run.admitted']);
  });

  it('given a message on its subject that is not an event, then the next decision still appends (expecting it), and does not loop on conflicts', async () => {
    const runId = `garbage${tag}`;
    await a.append(admit(runId), 0);
    await a.js.publish(runSubject(a.space, runId, 'runtime'), 'garbage{not json');
    const previous = a.onInvalid;
    a.onInvalid = () => undefined;
    try {
      const { appended } = await new RunCommandHandler(a, 'runtime').handle(runId, requestNext);
      expect(appended.map((e) => e.event.type)).toEqual(['model.turn.requested']);
    } finally {
      a.onInvalid = previous;
    }
  });

  it('given a fence recovery wrote on the runtime subject, then a stale runtime writer is refused by the log itself and, re-reading, decides nothing (K6)', async () => {
    const runId = `fence${tag}`;
    await a.append(admit(runId), 0);
    const stale = new RunCommandHandler(a, 'runtime');
    await stale.handle(runId, requestNext, { epoch: 1 });
    const staleFacts = await stale.folds.read(runId); // the holder's view, kept
    // recovery (another writer) fences the execution on the runtime and tools subjects
    const fence = (facts: RunFacts, now: Date): RunEvent[] =>
      facts.fenced
        ? []
        : (['runtime', 'tools'] as const).map((fencedSubject) =>
            makeEvent(
              'run.fenced',
              contextFrom(facts.lastEvent!),
              `fence/1/${fencedSubject}`,
              { fencedSubject, epoch: 1, holder: a.writer, reason: 'lease-expired', detail: 'test', uncertain: [{ kind: 'model-turn', turn: 1 }] },
              now,
            ),
          );
    await new RunCommandHandler(b, 'recovery').handle(runId, fence);
    // the stale holder's direct append, expecting what it last saw on its subject, fails at the log
    const completed = makeEvent(
      'model.turn.completed',
      contextFrom(staleFacts.lastEvent!),
      1,
      { turn: 1, content: 'late', toolCalls: [], finishReason: 'stop', usage: null },
      new Date(),
    );
    await expect(a.append(completed, staleFacts.lastSeqByOwner.runtime)).rejects.toBeInstanceOf(AppendConflict);
    // and through the handler, a decider that respects the fence appends nothing after re-reading
    const recordTurn = (facts: RunFacts): RunEvent[] => (facts.fenced ? [] : [completed]);
    expect((await stale.handle(runId, recordTurn, { epoch: 1 })).appended).toEqual([]);
    const types = (await a.readRun(runId)).map((e) => `${e.event.type}@${e.subject.split('.')[3]}`);
    expect(types).toEqual(['run.admitted@admission', 'model.turn.requested@runtime', 'run.fenced@runtime', 'run.fenced@tools']);
    expect((await a.readRun(runId)).find((e) => e.event.type === 'model.turn.requested')!.event.writer!.epoch).toBe(1);
  });
  /**
   * A decision of two fences (runtime, tools) whose tools expectation goes stale before it is
   * appended, and a retry that fails: what `onAppended` reported and what the log holds.
   */
  async function fencesThenConflict(log: EventLog, other: EventLog, runId: string): Promise<{ reported: string[]; types: string[] }> {
    await log.append(admit(runId), 0);
    const fenceOn = (facts: RunFacts, fencedSubject: 'runtime' | 'tools', now: Date) =>
      makeEvent(
        'run.fenced',
        contextFrom(facts.lastEvent!),
        `fence/1/${fencedSubject}`,
        { fencedSubject, epoch: 1, holder: log.writer, reason: 'lease-expired', detail: 'test', uncertain: [] },
        now,
      );
    let attempt = 0;
    const decideFences = (facts: RunFacts, now: Date): RunEvent[] =>
      ++attempt === 1 ? [fenceOn(facts, 'runtime', now), fenceOn(facts, 'tools', now)] : [fenceOn(facts, 'tools', now)];
    const reported: string[] = [];
    const handler = new RunCommandHandler(log, 'recovery');
    await expect(
      handler.handle(runId, decideFences, {
        onAppended: (stored) => reported.push(`${stored.event.type}@${stored.subject.split('.')[3]}`),
        beforeAppend: async (events) => {
          if (attempt === 1) {
            // another writer moves the tools subject on: the decision's tools expectation is stale
            const facts = await new RunCommandHandler(other, 'tools').folds.read(runId);
            await other.append(
              makeEvent('tool.call.dispatched', contextFrom(facts.lastEvent!), 'x', { toolCallId: 'x', name: 'list_funds' }, new Date()),
              facts.lastSeqByOwner.tools ?? 0,
            );
          } else if (events.length) throw new Error('the retry fails');
        },
      }),
    ).rejects.toThrow('the retry fails');
    const types = (await log.readRun(runId)).map((e) => `${e.event.type}@${e.subject.split('.')[3]}`);
    return { reported, types };
  }

  it('given a decision whose expectation on one of its subjects is stale, then none of its events is stored (one atomic batch), and onAppended reports nothing', async () => {
    expect(a.atomicBatches).toBe(true);
    const { reported, types } = await fencesThenConflict(a, b, `part${tag}`);
    expect(reported).toEqual([]);
    expect(types).toEqual(['run.admitted@admission', 'tool.call.dispatched@tools']);
  });

  it('without atomic batches (a stream without allow_atomic): given a decision appended in part before a conflict, and the retry then failing, then onAppended has reported what was stored', async () => {
    const plainSpace = { stream: `RPTEST_CHP_${tag}`, prefix: `tchp${tag}` };
    const config = runStreamConfig({ ...plainSpace, partitions: 8 }, { replicas: 1, duplicateWindowMs: 120_000 });
    delete (config as { allow_atomic?: boolean }).allow_atomic;
    await a.jsm.streams.add(config);
    const p = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...plainSpace, name: 'plain-a', atomicBatches: 'always' });
    const q = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...plainSpace, name: 'plain-b' });
    p.onSequentialBatches = () => undefined;
    try {
      expect(p.atomicBatches).toBe(false);
      const { reported, types } = await fencesThenConflict(p, q, `part${tag}`);
      expect(reported).toEqual(['run.fenced@runtime']);
      expect(types).toEqual(['run.admitted@admission', 'tool.call.dispatched@tools', 'run.fenced@runtime']);
    } finally {
      await p.destroyStream();
      await p.close();
      await q.close();
    }
  });

  it('appends a decision of several events in one request, reports each in order, and remembers them: the next read fetches nothing new', async () => {
    const runId = `batch${tag}`;
    await a.append(admit(runId), 0);
    const handler = new RunCommandHandler(a, 'runtime');
    await handler.handle(runId, requestNext);
    const three = (facts: RunFacts, now: Date): RunEvent[] =>
      facts.turns.length > 1
        ? []
        : [
            makeEvent(
              'model.turn.completed',
              contextFrom(facts.lastEvent!),
              1,
              { turn: 1, content: '', toolCalls: [], finishReason: 'stop', usage: null },
              now,
            ),
            ...[2, 3].map((turn) => makeEvent('model.turn.requested', contextFrom(facts.lastEvent!), turn, { turn, model: 'm' }, now)),
          ];
    const reported: number[] = [];
    const commits: string[] = [];
    const request = a.nc.request.bind(a.nc);
    a.nc.request = (...args: Parameters<typeof request>) => {
      if (args[0].startsWith(`${space.prefix}.run.`)) commits.push(args[0]);
      return request(...args);
    };
    let appended;
    try {
      ({ appended } = await handler.handle(runId, three, { epoch: 3, onAppended: (stored) => reported.push(stored.seq) }));
    } finally {
      a.nc.request = request;
    }
    expect(commits).toHaveLength(1);
    expect(appended.map((e) => e.event.type)).toEqual(['model.turn.completed', 'model.turn.requested', 'model.turn.requested']);
    expect(reported).toEqual(appended.map((e) => e.seq));
    expect(appended.map((e) => e.event.prevSeq)).toEqual([appended[0]!.seq - 1, appended[0]!.seq, appended[1]!.seq]);
    expect(appended.every((e) => e.event.writer?.epoch === 3)).toBe(true);
    expect((await a.readRun(runId)).slice(2)).toEqual(appended);
    const gets = countDirectGets(a);
    try {
      const facts = await handler.folds.read(runId);
      expect(facts.turns.map((t) => t.turn)).toEqual([1, 2, 3]);
      expect(gets.count).toBe(6); // one last_by_subj per owner subject: the batch was remembered
    } finally {
      gets.restore();
    }
  });
});

/**
 * Folds kept from whole-Run deliveries (no read of the log on the hot path): the consumer tells `log.deliveries` of each
 * delivery and runs the handler in its scope, exactly as `DurableConsumer` does for a `wholeRuns`
 * consumer; here the deliveries are the stored events themselves, handed over in stream order.
 */
describe('RunFolds kept from deliveries', () => {
  /** Completes turn `turn` on the runtime subject as another writer would (not delivered unless the test says so). */
  const complete = async (log: EventLog, facts: RunFacts, turn: number) =>
    (
      await log.append(
        makeEvent(
          'model.turn.completed',
          contextFrom(facts.lastEvent!),
          turn,
          { turn, content: '', toolCalls: [], finishReason: 'stop', usage: null },
          new Date(2_000),
        ),
        facts.lastSeqByOwner.runtime,
      )
    ).stored;

  it('given every event of the Run delivered in order, when a decision is taken on a delivery, then it reads nothing from the log and sees the delivered event', async () => {
    const runId = `kept${tag}`;
    // a connection of its own: the folds of the other tests' handlers on `a` observe its deliveries too
    const own = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-own', atomicBatches: 'always' });
    const admitted = (await own.append(admit(runId), 0)).stored;
    const handler = new RunCommandHandler(own, 'runtime', () => new Date(1_000));
    const gets = countDirectGets(own);
    try {
      let logReads = runReads.log;
      const first = await own.deliveries.handle(admitted, () => handler.handle(runId, requestNext));
      expect(first.appended.map((e) => e.event.type)).toEqual(['model.turn.requested']);
      expect(gets.count).toBe(1); // the fold started at run.admitted, the Run's last message (one get says so)
      expect(runReads.log - logReads).toBe(0);
      // another writer completes the turn; it is delivered (with the request it follows) in stream order
      const completed = await complete(b, first.facts.lastEvent ? await new RunCommandHandler(b, 'runtime').folds.read(runId) : first.facts, 1);
      gets.reset();
      logReads = runReads.log;
      await own.deliveries.handle(first.appended[0]!, async () => undefined);
      const next = await own.deliveries.handle(completed, () => handler.handle(runId, requestNext));
      expect(next.facts.turns[0]?.completed).not.toBeNull();
      expect(next.appended.map((e) => e.event.type)).toEqual(['model.turn.requested']);
      expect(gets.count).toBe(0);
      expect(runReads.log - logReads).toBe(0);
    } finally {
      gets.restore();
      await own.close();
    }
  });

  it('given a Run that parks on a question for a human (its wait.opened delivered), then its fold is dropped, and the decision on its wake reads the log once and sees the answer (K10)', async () => {
    const runId = `park${tag}`;
    const own = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-park', atomicBatches: 'always' });
    const handler = new RunCommandHandler(own, 'runtime', () => new Date(1_000));
    try {
      const admitted = (await own.append(admit(runId), 0)).stored;
      const first = await own.deliveries.handle(admitted, () => handler.handle(runId, requestNext));
      expect(handler.folds.size).toBe(1);
      // the turn asks a human: another writer completes it and opens the wait, both delivered here
      const completed = await complete(b, await new RunCommandHandler(b, 'runtime').folds.read(runId), 1);
      const afterCompletion = await new RunCommandHandler(b, 'runtime').folds.read(runId);
      const opened = (
        await b.append(
          makeEvent(
            'wait.opened',
            contextFrom(afterCompletion.lastEvent!),
            'w1',
            { waitId: 'w1', toolCallId: 'c1', turn: 1, question: 'Which share class?', expiresAt: new Date(3_600_000).toISOString() },
            new Date(2_500),
          ),
          afterCompletion.lastSeqByOwner.runtime,
        )
      ).stored;
      await own.deliveries.handle(first.appended[0]!, async () => undefined);
      await own.deliveries.handle(completed, async () => undefined);
      expect(handler.folds.size).toBe(1);
      await own.deliveries.handle(opened, async () => undefined);
      expect(handler.folds.size).toBe(0); // parked: nothing kept for it (before: kept until 2,000 others pushed it out)
      // the human answers (admission's subject); its delivery's decision reads the log, once, and is not kept while parked no more
      const parked = await new RunCommandHandler(b, 'admission').folds.read(runId);
      const answered = (
        await b.append(
          makeEvent(
            'wait.answered',
            contextFrom(parked.lastEvent!),
            'w1-answer',
            { waitId: 'w1', toolCallId: 'c1', answer: 'The ETF.', answeredBy: 'u', requestId: 'req-1' },
            new Date(3_000),
          ),
          parked.lastSeqByOwner.admission,
        )
      ).stored;
      const logReads = runReads.log;
      const woken = await own.deliveries.handle(answered, () => handler.folds.read(runId));
      expect(runReads.log - logReads).toBe(1);
      expect(woken.waits.get('w1')?.answer).not.toBeNull();
      expect(handler.folds.size).toBe(1); // no longer parked: kept again
    } finally {
      await own.close();
    }
  });

  it("given run.admitted delivered while it is the Run's last message to a service that does not decide on it, then its first decision, on a later delivery, reads nothing from the log", async () => {
    const runId = `first${tag}`;
    const own = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-own2', atomicBatches: 'always' });
    const admitted = (await own.append(admit(runId), 0)).stored;
    const handler = new RunCommandHandler(own, 'runtime', () => new Date(1_000));
    const gets = countDirectGets(own);
    try {
      await own.deliveries.handle(admitted, async () => undefined); // nothing decided on it
      expect(gets.count).toBe(1); // the Run's last message: how far the Run was when its fold started
      const requested = (await b.append(requestNext(await new RunCommandHandler(b, 'runtime').folds.read(runId), new Date(1_000))[0]!, 0)).stored;
      gets.reset();
      const logReads = runReads.log;
      const facts = await own.deliveries.handle(requested, () => handler.folds.read(runId));
      expect(facts.turns.map((t) => t.turn)).toEqual([1]);
      expect(runReads.log - logReads).toBe(0);
      expect(gets.count).toBe(0);
    } finally {
      gets.restore();
      await own.close();
    }
  });

  it('given the Run went on before its run.admitted was delivered here (another service was quicker), then a decision on an event stored before that delivery reads the log, and one on an event stored after it is taken from the kept fold', async () => {
    const runId = `quick${tag}`;
    const own = await EventLog.connect({ ...SUITE_NATS, natsUrl, ...space, name: 'writer-own3', atomicBatches: 'always' });
    try {
      const admitted = (await own.append(admit(runId), 0)).stored;
      const other = new RunCommandHandler(b, 'runtime', () => new Date(1_000));
      const [requested] = (await other.handle(runId, requestNext)).appended; // before run.admitted reaches `own`
      const handler = new RunCommandHandler(own, 'runtime', () => new Date(1_000));
      await own.deliveries.handle(admitted, async () => undefined);
      let logReads = runReads.log;
      const atRequest = await own.deliveries.handle(requested!, () => handler.folds.read(runId)); // stored before the fold started
      expect(atRequest.turns.map((t) => t.turn)).toEqual([1]);
      expect(runReads.log - logReads).toBe(1);
      const completed = await complete(b, await other.folds.read(runId), 1);
      logReads = runReads.log;
      const atCompletion = await own.deliveries.handle(completed, () => handler.folds.read(runId)); // stored after
      expect(atCompletion.turns[0]?.completed).not.toBeNull();
      expect(runReads.log - logReads).toBe(0);
    } finally {
      await own.close();
    }
  });

  it('given a delivery that does not follow on from the kept fold (a gap), then the decision reads the log and sees the missed event', async () => {
    const runId = `gap${tag}`;
    const admitted = (await a.append(admit(runId), 0)).stored;
    const handler = new RunCommandHandler(a, 'runtime', () => new Date(1_000));
    const first = await a.deliveries.handle(admitted, () => handler.handle(runId, requestNext));
    // two events appended by another writer: the first is never delivered here
    const other = new RunCommandHandler(b, 'runtime');
    await complete(b, await other.folds.read(runId), 1);
    const second = await b.append(
      makeEvent('model.turn.requested', contextFrom(first.facts.lastEvent!), 2, { turn: 2, model: 'm' }, new Date(3_000)),
      (await other.folds.read(runId)).lastSeqByOwner.runtime,
    );
    const gets = countDirectGets(a);
    try {
      const seen = await a.deliveries.handle(second.stored, () => handler.folds.read(runId));
      expect(gets.count).toBeGreaterThan(0);
      expect(seen.turns.map((t) => [t.turn, t.completed !== null])).toEqual([
        [1, true],
        [2, false],
      ]);
    } finally {
      gets.restore();
    }
  });

  it('given a kept fold, when the Run is read outside a delivery (an HTTP request, a timer), then it is read from the log as of now', async () => {
    const runId = `outside${tag}`;
    const admitted = (await a.append(admit(runId), 0)).stored;
    const handler = new RunCommandHandler(a, 'runtime', () => new Date(1_000));
    await a.deliveries.handle(admitted, () => handler.handle(runId, requestNext));
    await complete(b, await new RunCommandHandler(b, 'runtime').folds.read(runId), 1); // not delivered
    const facts = await handler.folds.read(runId);
    expect(facts.turns[0]?.completed).not.toBeNull();
  });

  it('given a kept fold behind on its own subject (another writer appended, not delivered yet), then the append conflicts, the log is read, and the decision is taken again from it (K6)', async () => {
    const runId = `behind${tag}`;
    const admitted = (await a.append(admit(runId), 0)).stored;
    const handler = new RunCommandHandler(a, 'runtime', () => new Date(1_000));
    const first = await a.deliveries.handle(admitted, () => handler.handle(runId, requestNext));
    await complete(b, await new RunCommandHandler(b, 'runtime').folds.read(runId), 1); // not delivered yet
    // a delivery of the request (known already): the kept fold is current as far as the deliveries
    // go; a decision that appends from it (the next turn's number) expects the runtime subject as
    // the fold knows it, and the log refuses it
    const nextTurn = (facts: RunFacts, now: Date): RunEvent[] => {
      const turn = facts.turns.length + 1;
      return [makeEvent('model.turn.requested', contextFrom(facts.lastEvent!), turn, { turn, model: 'm' }, now)];
    };
    const decidedFrom: boolean[] = [];
    const next = await a.deliveries.handle(first.appended[0]!, () =>
      handler.handle(runId, (facts, now) => {
        decidedFrom.push(facts.turns[0]?.completed !== null);
        return nextTurn(facts, now);
      }),
    );
    expect(decidedFrom).toEqual([false, true]); // the kept fold, then the log after the conflict
    expect(next.appended.map((e) => e.event.type === 'model.turn.requested' && e.event.data.turn)).toEqual([2]);
    const requests = (await a.readRun(runId)).filter((e) => e.event.type === 'model.turn.requested');
    expect(requests.map((e) => e.event.type === 'model.turn.requested' && e.event.data.turn)).toEqual([1, 2]);
  });

  it('given run.admitted delivered again after the Run went on (a new consumer replays the log), then a decision on it is not taken from the fold started there: the Run is read from the log', async () => {
    const runId = `late${tag}`;
    const admitted = (await a.append(admit(runId), 0)).stored;
    await new RunCommandHandler(b, 'runtime').handle(runId, requestNext); // the Run went on elsewhere
    const handler = new RunCommandHandler(a, 'runtime');
    const logReads = runReads.log;
    const facts = await a.deliveries.handle(admitted, () => handler.folds.read(runId));
    expect(runReads.log - logReads).toBe(1);
    expect(facts.turns).toHaveLength(1);
  });
});
