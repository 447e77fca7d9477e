import { describe, expect, it } from '@jest/globals';
import type { RunEvent, StoredEvent } from '@runplane/contracts';
import { applyStoredEvents, completeUpTo, continuityOf, dumpProjectionRows, getRunView, reprojectRun } from '@runplane/projections';
import { migratedTestDatabase, researchRunEvents } from './fixtures.js';

/** Stored events as the log stamps them: consecutive sequences from `from`, each with its subject's back-link (`prevSeq`). */
function linked(events: RunEvent[], from = 1): StoredEvent[] {
  const last = new Map<string, number>();
  return events.map((e, i) => {
    const subject = `t.run.${e.runId}.${e.owner}`;
    const seq = from + i;
    const stored = { seq, subject, event: { ...e, prevSeq: last.get(subject) ?? 0 } as RunEvent };
    last.set(subject, seq);
    return stored;
  });
}

const runId = 'r1';
// 1 admitted (admission), 2 turn 1 requested, 3 turn 1 completed (runtime), 4-5 proposed (runtime), 6 dispatched (tools)
const [, requested, completed, proposed1, , dispatched] = linked(researchRunEvents(runId));

describe('continuityOf (pure)', () => {
  const at = (lastSeq: number, subjectSeqs: Record<string, number>) => ({ lastSeq, subjectSeqs });

  it('given a subject applied up to the back-link, when the next event of the Run comes, then next', () => {
    expect(continuityOf(at(2, { admission: 1, runtime: 2 }), completed!)).toEqual({ kind: 'next' });
    expect(continuityOf(at(5, { admission: 1, runtime: 5 }), dispatched!)).toEqual({ kind: 'next' }); // a subject's first event
  });

  it('given the subject already applied it (a redelivery), then applied', () => {
    expect(continuityOf(at(3, { admission: 1, runtime: 3 }), completed!)).toEqual({ kind: 'applied' });
    expect(continuityOf(at(3, { admission: 1, runtime: 3 }), requested!)).toEqual({ kind: 'applied' });
  });

  it("given the back-link names a sequence the subject never applied, then a gap 'missing-earlier' naming Run, subject and both sequences", () => {
    expect(continuityOf(at(2, { admission: 1, runtime: 2 }), proposed1!)).toEqual({
      kind: 'gap',
      gap: {
        runId,
        subject: 't.run.r1.runtime',
        seq: 4,
        eventType: 'tool.call.proposed',
        kind: 'missing-earlier',
        expectedPrevSeq: 2,
        seenPrevSeq: 3,
        lastSeq: 2,
      },
    });
  });

  it("given a later event of the Run was applied first, when the passed-over event comes, then a gap 'applied-out-of-order' (never a silent skip)", () => {
    expect(continuityOf(at(6, { admission: 1, runtime: 2, tools: 6 }), completed!)).toMatchObject({
      kind: 'gap',
      gap: { kind: 'applied-out-of-order', seq: 3, expectedPrevSeq: 2, seenPrevSeq: 2, lastSeq: 6 },
    });
  });

  it('given an event without a back-link (appended before prevSeq existed), then the checkpoint decides as before', () => {
    const legacy = { ...completed!, event: { ...completed!.event, prevSeq: undefined } };
    expect(continuityOf(at(2, {}), legacy)).toEqual({ kind: 'next' });
    expect(continuityOf(at(3, {}), legacy)).toEqual({ kind: 'applied' });
  });
});

describe('completeUpTo (pure)', () => {
  it('given no subject moved between the read and the look-up again, then the whole read is complete', () => {
    expect(completeUpTo({ admission: 1, runtime: 9 }, { admission: 1, runtime: 9, tools: 0 }, 9)).toBe(Infinity);
  });

  it('given the runtime moved after its read (and publication shows a later event), then only events up to what the runtime read showed are complete', () => {
    expect(completeUpTo({ admission: 1, runtime: 9, publication: 12 }, { admission: 1, runtime: 11, publication: 12 }, 9)).toBe(9);
  });

  it('given a subject that was empty moved, then what was stored before the read began still counts as complete', () => {
    expect(completeUpTo({ admission: 1, runtime: 0 }, { admission: 1, runtime: 4 }, 3)).toBe(3);
    expect(completeUpTo({ runtime: 5, tools: 7 }, { runtime: 8, tools: 9 }, 2)).toBe(5);
  });
});

describe('applyStoredEvents continuity check and reprojectRun (PostgreSQL)', () => {
  const db = migratedTestDatabase('continuity');

  it("given a batch with two events of one subject's chain after rows an earlier batch wrote (a dispatch and its receipt), then both apply to the stored tool call rows", async () => {
    const a = linked(researchRunEvents('chainA'), 201);
    expect((await applyStoredEvents(db.orm.em, a.slice(0, 5))).map((r) => r.status)).toEqual(a.slice(0, 5).map(() => 'applied'));
    const results = await applyStoredEvents(db.orm.em, a.slice(5, 9)); // dispatched, receipt, dispatched, receipt (tools)
    expect(results.map((r) => r.status)).toEqual(['applied', 'applied', 'applied', 'applied']);
    expect(await getRunView(db.orm, 'chainA')).toMatchObject({ toolCalls: 2, lastSeq: a[8]!.seq });
  });

  it('given a Run whose turn 1 completion is missing from a batch, then it and every later event of the Run are a gap (not applied), another Run of the batch is applied, and the checkpoint stays a stream-order prefix', async () => {
    const a = linked(researchRunEvents('gapA'), 1);
    const b = linked(researchRunEvents('gapB'), 101);
    const batch = [...a.slice(0, 2), ...a.slice(3, 6), ...b.slice(0, 3)];
    const results = await applyStoredEvents(db.orm.em, batch);
    expect(results.map((r) => [r.runId, r.seq, r.status])).toEqual([
      ['gapA', 1, 'applied'],
      ['gapA', 2, 'applied'],
      ['gapA', 4, 'gap'],
      ['gapA', 5, 'gap'],
      ['gapA', 6, 'gap'],
      ['gapB', 101, 'applied'],
      ['gapB', 102, 'applied'],
      ['gapB', 103, 'applied'],
    ]);
    expect(results[2]!.gap).toMatchObject({ runId: 'gapA', kind: 'missing-earlier', expectedPrevSeq: 2, seenPrevSeq: 3 });
    expect(await getRunView(db.orm, 'gapA')).toMatchObject({ lastSeq: 2, modelRequests: 1 });
    expect(await getRunView(db.orm, 'gapB')).toMatchObject({ lastSeq: 103, promptTokens: 120 });

    // the repair: the Run re-projected from its log, twice (idempotent), equals applying it in order
    await reprojectRun(db.orm.em, 'gapA', a);
    const once = await dumpProjectionRows(db.orm);
    expect(await reprojectRun(db.orm.em, 'gapA', a)).toEqual(
      a.map((s) => ({ status: 'applied', runId: 'gapA', seq: s.seq, previousLastSeq: expect.any(Number) })),
    );
    expect(await dumpProjectionRows(db.orm)).toEqual(once);
    expect(await getRunView(db.orm, 'gapA')).toMatchObject({ status: 'settled', lastSeq: a.at(-1)!.seq, promptTokens: 240, unknownUsageTurns: 0 });
    // and the redelivered events are now repeats
    expect((await applyStoredEvents(db.orm.em, a)).every((r) => r.status === 'skipped')).toBe(true);
  });
});
