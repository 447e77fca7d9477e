import { describe, expect, it } from '@jest/globals';
import { makeEvent, RunEvent, sha256Hex } from '@runplane/contracts';
import { decodeStored } from '@runplane/eventlog';
import { answerPassages, closedForSettlement, countsAsProgress, evolve, foldRun, noProgressClock, uncommittedParagraphs } from '@runplane/run-facts';
import { History } from '../../../test/support/history.js';

const passage = (id: string, turn: number, index: number, text: string, version = 1) => ({
  passageId: id,
  index,
  version,
  text,
  sourceTurn: turn,
  sha256: sha256Hex(text),
});

describe('the fold: executor subjects closed before a settlement (K6, K9)', () => {
  it('a subject is closed while its last event is a fence; a late observation keeps it closed, any other executor event reopens it', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
    expect(h.facts.closed).toEqual({ runtime: false, tools: false });
    h.closed();
    expect(h.facts.closed).toEqual({ runtime: true, tools: true });
    h.add('tool.call.late_observed', 'a', { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: {}, durationMs: 1, executor: 'x' });
    expect(h.facts.closed).toEqual({ runtime: true, tools: true });
    h.receipt('a', 'list_funds', 'succeeded');
    expect(h.facts.closed).toEqual({ runtime: true, tools: false });
  });
});

describe('the fold: one settlement (K9)', () => {
  it('given a settled Run, when a second settlement is appended (a forger with the lifecycle key), then the first stays its outcome', () => {
    const h = new History().admitted().turn(1, { content: 'A.' }).settled('completed');
    expect(h.facts.settled?.outcome).toBe('completed');
    h.add('run.settled', 'forged', {
      outcome: 'failed',
      reason: 'a second settlement',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    });
    expect(h.events.filter((e) => e.event.type === 'run.settled')).toHaveLength(2);
    expect(h.facts.settled).toMatchObject({ outcome: 'completed', reason: 'settled completed' });
  });
});

describe('the fold: an execution that closes itself (K6, K9; recovery off the happy path)', () => {
  const withCall = () =>
    new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
  it('closes itself when the runtime subject ends in its own finish and every proposed call had its receipt then; no fence is needed for the settlement', () => {
    const h = withCall().receipt('a', 'list_funds', 'succeeded').turn(2, { content: 'A.' });
    expect(h.facts.closesItself).toBe(false);
    h.add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
    expect(h.facts.closesItself).toBe(true);
    expect(h.facts.closed).toEqual({ runtime: false, tools: false });
    expect(closedForSettlement(h.facts)).toBe(true);
    // events on other subjects (publication, a late observation) leave it closed
    h.add('passage.committed', '0/v1', passage('p', 2, 0, 'A.'));
    expect(h.facts.closesItself).toBe(true);
  });

  it('does not close itself with a call proposed or dispatched without a receipt at the finish, even when the receipt comes later: recovery fences it (both fences needed)', () => {
    for (const dispatched of [true, false]) {
      const h = new History()
        .admitted()
        .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
        .proposed(1, 'a', 'list_funds');
      if (dispatched) h.dispatched('a', 'list_funds');
      h.add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null });
      expect(h.facts.closesItself).toBe(false);
      h.receipt('a', 'list_funds', 'denied');
      expect(closedForSettlement(h.facts)).toBe(false);
      h.closed();
      expect(closedForSettlement(h.facts)).toBe(true);
    }
  });

  it('a fence after the finish on the runtime subject ends the self-closure (the fences close it instead); a fence alone on both subjects closes it as before', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: 'A.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    expect(h.facts.closesItself).toBe(true);
    h.closed();
    expect(h.facts.closesItself).toBe(false);
    expect(closedForSettlement(h.facts)).toBe(true);
    const faulted = new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' }).closed();
    expect(closedForSettlement(faulted.facts)).toBe(true);
  });
});

describe('the fold: lease grants, recorded by the runtime now and by recovery in older logs (K6, K11)', () => {
  const ctx = { runId: 'run-1', conversationId: 'conv-1', correlationId: 'msg-1', causationId: null };
  const data = { epoch: 1, holder: { service: 'runtime', instance: 'i-1' }, ttlMs: 1500 };
  it("a grant made now is the runtime's, on the runtime subject", () => {
    const e = makeEvent('lease.granted', ctx, 'lease/1', data, new Date('2026-01-01T00:00:00Z'));
    expect(e.owner).toBe('runtime');
    const stored = decodeStored(2, 'rp.run.run-1.runtime.0', new TextEncoder().encode(JSON.stringify(e)));
    const facts = foldRun('run-1', [...new History().admitted().events, stored]);
    expect(facts.leases).toEqual([data]);
    expect(facts.lastSeqByOwner.runtime).toBe(2);
  });

  it("an older log's grant, written by recovery on the recovery subject, still decodes, verifies against its subject and folds; one with another owner, or on another subject, is refused", () => {
    const old = { ...makeEvent('lease.granted', ctx, 'lease/1', data, new Date('2026-01-01T00:00:00Z')), owner: 'recovery' };
    expect(RunEvent.safeParse(old).success).toBe(true);
    const bytes = new TextEncoder().encode(JSON.stringify(old));
    const stored = decodeStored(2, 'rp.run.run-1.recovery.0', bytes);
    const facts = foldRun('run-1', [...new History().admitted().events, stored]);
    expect(facts.leases).toEqual([data]);
    expect(facts.lastSeqByOwner).toMatchObject({ recovery: 2, runtime: 0 });
    expect(() => decodeStored(2, 'rp.run.run-1.runtime.0', bytes)).toThrow(/do not match the subject/);
    expect(RunEvent.safeParse({ ...old, owner: 'tools' }).success).toBe(false);
  });
});

describe('the fold: passages while the answer streams', () => {
  it('keeps the latest version of a passage, whatever order versions arrive in', () => {
    const h = new History()
      .admitted()
      .add('passage.committed', 'p/v2', passage('p', 1, 0, 'Final.', 2))
      .add('passage.committed', 'p/v1', passage('p', 1, 0, 'Draft.', 1));
    expect(answerPassages(h.facts).map((p) => [p.version, p.text])).toEqual([[2, 'Final.']]);
  });

  it('before the answer is published, the answer view is every committed passage by turn then index; after it, exactly the published ones', () => {
    const h = new History()
      .admitted()
      .add('passage.committed', 't2p0', passage('t2p0', 2, 0, 'Answer.'))
      .add('passage.committed', 't1p0', passage('t1p0', 1, 0, 'Let me look.'));
    expect(answerPassages(h.facts).map((p) => p.passageId)).toEqual(['t1p0', 't2p0']);
    h.add('answer.published', 'answer', { passageIds: ['t2p0'], characters: 7, sourceTurn: 2 });
    expect(answerPassages(h.facts).map((p) => p.passageId)).toEqual(['t2p0']);
  });

  it('names the streamed paragraphs that are not committed passages yet', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'One.', sha256: sha256Hex('One.') })
      .add('model.output.paragraph', '1/1', { turn: 1, index: 1, text: 'Two.', sha256: sha256Hex('Two.') })
      .add('passage.committed', 'p0', passage('p0', 1, 0, 'One.'));
    expect(uncommittedParagraphs(h.facts)).toEqual([{ turn: 1, index: 1 }]);
  });
});

describe('the fold: what counts as progress (K7)', () => {
  it('text still streaming inside an unfinished paragraph (model.output.progress) is progress and is folded per turn; a request is not', () => {
    const h = new History().admitted({ noProgressSeconds: 5 }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const requestedAt = h.facts.lastEvent!.occurredAt;
    expect(countsAsProgress(h.facts.lastEvent!)).toBe(false);
    expect(h.facts.lastProgressAt).not.toBe(requestedAt);
    h.add('model.output.progress', '1/progress/12', { turn: 1, characters: 12, sha256: sha256Hex('A long parag') });
    const mark = h.facts.lastEvent!;
    expect(countsAsProgress(mark)).toBe(true);
    expect(h.facts.lastProgressAt).toBe(mark.occurredAt);
    expect(h.facts.turns[0]!.progressCharacters).toBe(12);
    expect(noProgressClock(h.facts, new Date(Date.parse(mark.occurredAt) + 4_999))!.passed).toBe(false);
    expect(noProgressClock(h.facts, new Date(Date.parse(mark.occurredAt) + 5_000))!.passed).toBe(true);
  });
});

describe('the fold is linear in the Run (K8)', () => {
  it('a turn with 6,000 streamed paragraphs, each committed as a passage, folds in well under a second, and every earlier fold is left as it was', () => {
    const h = new History().admitted();
    h.add('model.turn.requested', 1, { turn: 1, model: 'scripted' });
    const n = 6_000;
    for (let i = 0; i < n; i++) {
      const text = `Paragraph ${i}.`;
      h.add('model.output.paragraph', `1/${i}`, { turn: 1, index: i, text, sha256: sha256Hex(text) });
      h.add('passage.committed', `1/${i}/v1`, passage(`p-${i}`, 1, i, text));
    }
    const halfway = foldRun(h.runId, h.events.slice(0, n));
    const before = { paragraphs: halfway.turns[0]!.paragraphs.length, passages: halfway.passages.size };
    const started = performance.now();
    const facts = foldRun(h.runId, h.events);
    const ms = performance.now() - started;
    expect(facts.turns[0]!.paragraphs.map((p) => p.index)).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(facts.passages.size).toBe(n);
    expect(uncommittedParagraphs(facts)).toEqual([]);
    // copying every collection on every event took seconds here; copy on write takes tens of ms
    expect(ms).toBeLessThan(2_000);
    // pure: folding on from `halfway` did not change it
    const again = evolve(halfway, h.events[n]!);
    expect(again).not.toBe(halfway);
    expect({ paragraphs: halfway.turns[0]!.paragraphs.length, passages: halfway.passages.size }).toEqual(before);
  });
});
