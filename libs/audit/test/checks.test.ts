/**
 * The audit's checks, given/when/then: given a Run's history (test/support/history.ts, as the log
 * would hold it), when one violation is added, then the audit names that check and the event; a
 * history without one audits clean (K1-K11 from events alone).
 */
import { describe, expect, it } from '@jest/globals';
import { auditRuns, type AuditReport, type CheckId } from '@runplane/audit';
import { effectKey, sha256Hex, type StoredEvent } from '@runplane/contracts';
import { History } from '../../../test/support/history.js';

const answer = 'SPY holds 503 names.';
const passage = { passageId: 'p-1', index: 0, version: 1, text: answer, sourceTurn: 2, sha256: sha256Hex(answer) };

/** A Run that researched with one tool call, answered, closed itself and settled completed. */
function cleanRun(runId = 'run-1'): History {
  return new History(runId)
    .admitted()
    .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
    .proposed(1, 'a', 'list_funds')
    .dispatched('a', 'list_funds')
    .receipt('a', 'list_funds', 'succeeded')
    .turn(2, { content: answer })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 })
    .add('passage.committed', 'p-1/v1', passage)
    .add('answer.published', 'answer', { passageIds: ['p-1'], characters: answer.length, sourceTurn: 2, unanswered: [] })
    .add('run.settled', 'settlement', {
      outcome: 'completed',
      reason: 'answered',
      passageIds: ['p-1'],
      receipts: [{ toolCallId: 'a', name: 'list_funds', status: 'succeeded' }],
      usage: { modelRequests: 2, toolCalls: 1, promptTokens: 20, completionTokens: 10 },
      unanswered: [],
    });
}

const audit = (...histories: History[]): AuditReport => auditRuns({ runs: new Map(histories.map((h) => [h.runId, h.events])) });
/** The checks the audit found broken on `runId`, with the sequences it blamed. */
const broken = (report: AuditReport, runId = 'run-1'): { id: CheckId; seqs: (number | null)[] }[] =>
  report.runs
    .find((r) => r.runId === runId)!
    .checks.filter((c) => c.status === 'broken')
    .map((c) => ({ id: c.id, seqs: c.violations.map((v) => v.seq) }));
/** Sets the writer (service, epoch) of the last event added, as the event log stamps it. */
const writtenBy = (h: History, epoch: number, service = 'runtime') => {
  const last = h.events[h.events.length - 1]!;
  last.event = { ...last.event, writer: { service, instance: `i-${epoch}`, epoch } };
  return h;
};

describe('audit: a clean Run', () => {
  it('holds every check that applies, and says which do not apply', () => {
    const report = audit(cleanRun());
    expect(report.summary).toMatchObject({ runs: 1, clean: 1, broken: 0, open: 0 });
    const run = report.runs[0]!;
    expect(run.outcome).toBe('completed');
    const status = Object.fromEntries(run.checks.map((c) => [c.id, c.status]));
    expect(status).toMatchObject({
      'admission-once': 'held',
      'settlement-once': 'held',
      'settlement-references': 'held',
      'settlement-honest': 'held',
      'writer-fenced': 'held',
      'dispatch-once': 'held',
      'budget-inside-grant': 'held',
      'subject-chains': 'held',
      'stored-verified': 'held',
      links: 'not-applicable',
      'wake-once': 'not-applicable',
      'child-carved': 'not-applicable',
      'results-established': 'held',
    });
  });

  it('an open Run (not settled yet) is no violation', () => {
    const h = new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] });
    const report = audit(h);
    expect(report.summary).toMatchObject({ clean: 1, open: 1 });
  });
});

describe('audit K1: one admission per message id', () => {
  it('a second admission of the Run is named', () => {
    const h = new History().admitted();
    h.add('run.admitted', 'admission-again', h.events[0]!.event.data as never);
    expect(broken(audit(h))).toEqual([{ id: 'admission-once', seqs: [2] }]);
  });
  it('an admission whose content does not match its digest is named', () => {
    const h = new History().admitted();
    const first = h.events[0]!.event as Extract<StoredEvent['event'], { type: 'run.admitted' }>;
    h.events[0] = { ...h.events[0]!, event: { ...first, data: { ...first.data, message: { ...first.data.message, content: 'Something else' } } } };
    expect(broken(audit(h))).toEqual([{ id: 'admission-once', seqs: [1] }]);
  });
  it('the same message id admitted in two Runs is named on both', () => {
    const a = new History('run-a').admitted();
    const b = new History('run-b').admitted();
    const ev = b.events[0]!.event as Extract<StoredEvent['event'], { type: 'run.admitted' }>;
    b.events[0] = { ...b.events[0]!, event: { ...ev, data: { ...ev.data, message: { ...ev.data.message, messageId: 'msg-run-a' } } } };
    const report = audit(a, b);
    expect(broken(report, 'run-a').map((c) => c.id)).toEqual(['admission-once']);
    expect(broken(report, 'run-b').map((c) => c.id)).toEqual(['admission-once']);
  });
});

describe('audit K11: what the back-links cannot show', () => {
  it('a Run whose admission is not in the log (erased) breaks K1 at its first event', () => {
    const h = cleanRun();
    h.events.shift();
    expect(broken(audit(h)).find((c) => c.id === 'admission-once')).toEqual({ id: 'admission-once', seqs: [2] });
  });
  it('messages erased from the stream make a report of clean Runs unclean, and are listed', () => {
    const runs = new Map([['run-1', cleanRun().events]]);
    expect(auditRuns({ runs }).clean).toBe(true);
    const report = auditRuns({ runs, erased: { count: 2, seqs: [40, 41] } });
    expect(report.summary).toMatchObject({ clean: 1, broken: 0, erased: { count: 2, seqs: [40, 41] } });
    expect(report.clean).toBe(false);
  });
});

describe('audit K9: one settlement, after closure, naming what exists, honestly', () => {
  it('a forged second settlement is named at its sequence', () => {
    const h = cleanRun();
    h.add('run.settled', 'settlement-2', {
      outcome: 'failed',
      reason: 'forged',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    });
    const report = audit(h);
    expect(broken(report)).toEqual([{ id: 'settlement-once', seqs: [h.seq] }]);
    expect(report.runs[0]!.outcome).toBe('completed'); // the first settlement counts
  });
  it('a settlement while the executors were still open (no finish, no fences) is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .settled('interrupted');
    expect(broken(audit(h))).toEqual([{ id: 'settlement-once', seqs: [h.seq] }]);
  });
  it('after both fences the same settlement holds', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .fenced('lease-expired')
      .settled('interrupted');
    expect(broken(audit(h))).toEqual([]);
  });
  it('a settlement naming a passage never committed, or a receipt status its receipt does not say, is named', () => {
    const h = cleanRun();
    const last = h.events[h.events.length - 1]!;
    const settled = last.event as Extract<StoredEvent['event'], { type: 'run.settled' }>;
    last.event = {
      ...settled,
      data: { ...settled.data, passageIds: ['p-1', 'p-erased'], receipts: [{ toolCallId: 'a', name: 'list_funds', status: 'failed' }] },
    };
    const found = broken(audit(h));
    expect(found).toEqual([{ id: 'settlement-references', seqs: [h.seq, h.seq] }]);
  });
  it('`completed` without a published answer, and `partial` with nothing unanswered, are named', () => {
    const noAnswer = new History()
      .admitted()
      .turn(1, { content: 'x' })
      .add('run.execution.finished', 'f', { reason: 'answered', detail: '', answerTurn: 1 });
    noAnswer.settled('completed');
    expect(broken(audit(noAnswer))).toEqual([{ id: 'settlement-honest', seqs: [noAnswer.seq] }]);
    const partial = new History()
      .admitted()
      .turn(1, { content: 'x' })
      .add('run.execution.finished', 'f', { reason: 'answered', detail: '', answerTurn: 1 });
    partial.add('run.settled', 'settlement', {
      outcome: 'partial',
      reason: 'r',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
      unanswered: [],
    });
    expect(broken(audit(partial))).toEqual([{ id: 'settlement-honest', seqs: [partial.seq] }]);
  });
});

describe("audit K9: a completed answer rests on no result the Run never had (the lifecycle's rule, unestablishedResults)", () => {
  /** A Run whose one get_holdings call ended `status` (and, with `retried`, an identical call succeeded), answered and settled as given. */
  function answeredAfter(
    status: 'failed' | 'denied' | 'unknown',
    settlement: { outcome: 'completed' | 'partial'; unanswered: { part: string; reason: string }[] },
    retried = false,
  ): History {
    const args = '{"fund":"VGT"}';
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings', args }] })
      .proposed(1, 'a', 'get_holdings', args)
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', status);
    if (retried)
      h.turn(2, { calls: [{ id: 'b', name: 'get_holdings', args }] })
        .proposed(2, 'b', 'get_holdings', args)
        .dispatched('b', 'get_holdings')
        .receipt('b', 'get_holdings', 'succeeded');
    return h
      .turn(3, { content: answer })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 3 })
      .add('passage.committed', 'p-1/v1', { ...passage, sourceTurn: 3 })
      .add('answer.published', 'answer', { passageIds: ['p-1'], characters: answer.length, sourceTurn: 3, unanswered: [] })
      .add('run.settled', 'settlement', {
        outcome: settlement.outcome,
        reason: 'answered',
        passageIds: ['p-1'],
        receipts: [],
        usage: { modelRequests: 2, toolCalls: 1, promptTokens: 20, completionTokens: 10 },
        unanswered: settlement.unanswered,
      });
  }
  const status = (report: AuditReport) => report.runs[0]!.checks.find((c) => c.id === 'results-established')!;

  it.each(['failed', 'denied', 'unknown'] as const)(
    'settled completed though a call %s and was never answered: named at the settlement',
    (receipt) => {
      const h = answeredAfter(receipt, { outcome: 'completed', unanswered: [] });
      const report = audit(h);
      expect(broken(report)).toEqual([{ id: 'results-established', seqs: [h.seq] }]);
      expect(status(report).violations[0]!.message).toMatch(
        /settled completed, but the log holds the result of get_holdings\(\{"fund":"VGT"\}\) \[a\]/,
      );
    },
  );
  it('settled partial naming the call (as the lifecycle lists it) holds; partial naming something else is named', () => {
    const listed = { part: 'the result of get_holdings({"fund":"VGT"}) [a]', reason: 'the call failed' };
    const held = audit(answeredAfter('failed', { outcome: 'partial', unanswered: [listed] }));
    expect(broken(held)).toEqual([]);
    expect(status(held).status).toBe('held');
    const h = answeredAfter('failed', { outcome: 'partial', unanswered: [{ part: 'the bond funds', reason: 'out of scope' }] });
    expect(broken(audit(h))).toEqual([{ id: 'results-established', seqs: [h.seq] }]);
  });
  it('a failed call answered by an identical call that succeeded lets the answer settle completed', () => {
    const report = audit(answeredAfter('failed', { outcome: 'completed', unanswered: [] }, true));
    expect(broken(report)).toEqual([]);
    expect(status(report).status).toBe('held');
  });
  it('a clean Run holds it', () => {
    expect(status(audit(cleanRun())).status).toBe('held');
  });
});

describe('audit K6: no executor append after a fence, the settlement, or under a closed epoch', () => {
  it('an append on the tools subject after recovery fenced it is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
    h.fenced('lease-expired').receipt('a', 'list_funds', 'succeeded');
    expect(broken(audit(h))).toEqual([{ id: 'writer-fenced', seqs: [h.seq] }]);
  });
  it('a late observation after the fence is the one fact allowed', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
    h.receipt('a', 'list_funds', 'unknown').fenced('lease-expired');
    h.add('tool.call.late_observed', 'a', { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: {}, durationMs: 1, executor: 'x' });
    expect(broken(audit(h))).toEqual([]);
  });
  it('a runtime append after the settlement (a reopened Run) is named', () => {
    const h = cleanRun();
    h.add('model.turn.requested', 3, { turn: 3, model: 'scripted' });
    expect(broken(audit(h))).toEqual([{ id: 'writer-fenced', seqs: [h.seq] }]);
  });
  it('a runtime event under an epoch a later grant superseded is named; under the current epoch it holds', () => {
    const h = new History().admitted();
    writtenBy(h.add('lease.granted', 1, { epoch: 1, holder: { service: 'runtime', instance: 'i-1' }, ttlMs: 1000 }), 1);
    writtenBy(h.add('model.turn.requested', 1, { turn: 1, model: 'scripted' }), 1);
    writtenBy(h.add('lease.granted', 2, { epoch: 2, holder: { service: 'runtime', instance: 'i-2' }, ttlMs: 1000 }), 2);
    writtenBy(h.add('model.turn.requested', 2, { turn: 2, model: 'scripted' }), 2);
    expect(broken(audit(h))).toEqual([]);
    writtenBy(h.add('model.turn.requested', 3, { turn: 3, model: 'scripted' }), 1);
    expect(broken(audit(h))).toEqual([{ id: 'writer-fenced', seqs: [h.seq] }]);
  });
});

describe('audit K5: at most one dispatch, never of an unknown effect', () => {
  it('a second dispatch of a call is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
    h.add('tool.call.dispatched', 'a-again', { toolCallId: 'a', name: 'list_funds' });
    expect(broken(audit(h))).toEqual([{ id: 'dispatch-once', seqs: [h.seq] }]);
  });
  it('a dispatch after an unknown receipt, and a second receipt, are named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds');
    h.receipt('a', 'list_funds', 'unknown');
    h.add('tool.call.dispatched', 'a-again', { toolCallId: 'a', name: 'list_funds' });
    const redispatch = h.seq;
    h.add('tool.call.receipt', 'a-again', { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: {}, durationMs: 1 });
    expect(broken(audit(h))).toEqual([{ id: 'dispatch-once', seqs: [redispatch, redispatch, h.seq] }]);
  });
  it("a continuation's dispatch of its parent's carried unknown effect is named", () => {
    const h = new History().admitted();
    h.add('context.carried', 'context', {
      historyRunIds: [],
      parentRunId: 'run-0',
      items: [],
      dropped: [],
      unknownEffects: [{ runId: 'run-0', toolCallId: 'x', name: 'get_holdings', effectKey: effectKey('get_holdings', '{"fund":"SPY"}') }],
    });
    h.turn(1, { calls: [{ id: 'b', name: 'get_holdings', args: '{ "fund": "SPY" }' }] })
      .proposed(1, 'b', 'get_holdings', '{ "fund": "SPY" }')
      .dispatched('b', 'get_holdings');
    expect(broken(audit(h))).toEqual([{ id: 'dispatch-once', seqs: [h.seq] }]);
  });
});

describe('audit K7: charges inside the grant', () => {
  it('more model requests than the limit, and a request after the deadline, are named', () => {
    const h = new History()
      .admitted({ maxModelRequests: 1, deadlineAt: '2025-12-31T23:00:03.500Z' })
      .turn(1, { content: '' })
      .turn(2, { content: 'x' });
    const found = broken(audit(h));
    expect(found).toEqual([{ id: 'budget-inside-grant', seqs: [4, null] }]);
  });
  it('a model request whose input token reservation does not fit in what was left is named at the request; one that fits holds', () => {
    /** Two turns under an input token limit of 100; the second reserves `estimate` after the first measured 10 prompt tokens. */
    const withEstimate = (estimate: number) => {
      const h = new History().admitted({ limits: { maxInputTokens: 100 } }).turn(1, { content: '' });
      h.add('model.turn.requested', 2, { turn: 2, model: 'scripted', inputTokensEstimate: estimate });
      return h;
    };
    const over = withEstimate(91);
    const report = audit(over);
    expect(broken(report)).toEqual([{ id: 'budget-inside-grant', seqs: [over.seq] }]);
    expect(report.runs[0]!.checks.find((c) => c.id === 'budget-inside-grant')!.violations[0]!.message).toMatch(
      /model turn 2 requested with ~91 input tokens estimated while 10 were used, over the input token limit of 100/,
    );
    expect(broken(audit(withEstimate(90)))).toEqual([]);
  });
  it('under a money limit, a request whose money reservation does not fit in what was left, or that carries no price, is named at the request; one that fits holds', () => {
    const price = { currency: 'USD', inputMicrosPerMTok: 1_000_000, outputMicrosPerMTok: 2_000_000 };
    /** A money limit of 1,000 micro-USD; turn 1 measured 300 (100 in + 100 out); turn 2 reserves `reserved`. */
    const withReservation = (reserved: number | null) => {
      const h = new History().admitted({ limits: { maxCost: { micros: 1_000, currency: 'USD' } } });
      h.add('model.turn.requested', 1, {
        turn: 1,
        model: 'scripted',
        maxTokens: 100,
        inputTokensEstimate: 100,
        price: { ...price, reservedMicros: 300 },
      });
      h.add('model.turn.completed', 1, {
        turn: 1,
        content: '',
        toolCalls: [],
        finishReason: 'stop',
        usage: { promptTokens: 100, completionTokens: 100, totalTokens: 200 },
        cost: { currency: 'USD', measuredMicros: 300, unknownMaxMicros: 0 },
      });
      h.add('model.turn.requested', 2, {
        turn: 2,
        model: 'scripted',
        ...(reserved === null ? {} : { price: { ...price, reservedMicros: reserved } }),
      });
      return h;
    };
    const over = withReservation(701);
    const report = audit(over);
    expect(broken(report)).toEqual([{ id: 'budget-inside-grant', seqs: [over.seq] }]);
    expect(report.runs[0]!.checks.find((c) => c.id === 'budget-inside-grant')!.violations[0]!.message).toMatch(
      /model turn 2 requested reserving 701 micro-USD while 300 were used, over the money limit of 1000/,
    );
    const unpriced = withReservation(null);
    expect(broken(audit(unpriced))).toEqual([{ id: 'budget-inside-grant', seqs: [unpriced.seq] }]);
    expect(broken(audit(withReservation(700)))).toEqual([]);
  });
  it('a child given more than its parent had left is named; a child admitted with other limits than requested is named on the parent', () => {
    const parent = new History('run-p').admitted({ maxModelRequests: 4 }).turn(1, { content: '' });
    parent.childRequested(1, 'c', 'a sub-question', { maxModelRequests: 5 });
    // named where it was carved, and in the ledger at the end (1 used + 5 carved > 4)
    expect(broken(audit(parent), 'run-p')).toEqual([
      { id: 'budget-inside-grant', seqs: [null] },
      { id: 'child-carved', seqs: [parent.seq] },
    ]);

    const ok = new History('run-p')
      .admitted({ maxModelRequests: 8 })
      .turn(1, { content: '' })
      .childRequested(1, 'c', 'a sub-question', { maxModelRequests: 3 });
    const childRunId = (ok.events[ok.events.length - 1]!.event.data as { childRunId: string }).childRunId;
    const child = new History(childRunId);
    child.seq = ok.seq;
    child.admitted({ maxModelRequests: 7, tools: ['list_funds'] });
    const ev = child.events[0]!.event as Extract<StoredEvent['event'], { type: 'run.admitted' }>;
    child.events[0] = { ...child.events[0]!, event: { ...ev, data: { ...ev.data, link: { parentRunId: 'run-p', relation: 'child' } } } };
    const report = audit(ok, child);
    expect(broken(report, 'run-p')).toEqual([{ id: 'child-carved', seqs: [child.seq] }]);
    expect(broken(report, childRunId)).toEqual([]);
  });
});

describe('audit K3: linked Runs', () => {
  const linked = (parent: History, relation: 'continuation' | 'clarification', extra: object = {}) => {
    const h = new History('run-c');
    h.seq = parent.seq;
    h.admitted();
    const ev = h.events[0]!.event as Extract<StoredEvent['event'], { type: 'run.admitted' }>;
    h.events[0] = { ...h.events[0]!, event: { ...ev, data: { ...ev.data, link: { parentRunId: parent.runId, relation }, ...extra } } };
    return h;
  };
  it('a continuation of a settled, completed parent holds', () => {
    const parent = cleanRun('run-p');
    const report = audit(parent, linked(parent, 'continuation'));
    expect(broken(report, 'run-c')).toEqual([]);
    expect(report.runs.find((r) => r.runId === 'run-c')!.checks.find((c) => c.id === 'links')!.status).toBe('held');
  });
  it('a continuation of a parent still running, or settled failed, or not in the log, is named', () => {
    const running = new History('run-p').admitted().turn(1, { content: '' });
    expect(broken(audit(running, linked(running, 'continuation')), 'run-c')).toEqual([{ id: 'links', seqs: [running.seq + 1] }]);
    const failed = new History('run-p').admitted().turn(1, { content: '' }).fenced('deadline').settled('failed');
    expect(broken(audit(failed, linked(failed, 'continuation')), 'run-c')).toEqual([{ id: 'links', seqs: [failed.seq + 1] }]);
    expect(broken(audit(linked(failed, 'continuation')), 'run-c')).toEqual([{ id: 'links', seqs: [failed.seq + 1] }]);
  });
  it("a continuation of another principal's Run under the same conversation id is named (conversation ids are per principal)", () => {
    const parent = cleanRun('run-p');
    const ev = parent.events[0]!.event as Extract<StoredEvent['event'], { type: 'run.admitted' }>;
    parent.events[0] = { ...parent.events[0]!, event: { ...ev, data: { ...ev.data, principal: 'alice' } } };
    expect(broken(audit(parent, linked(parent, 'continuation', { principal: 'bob' })), 'run-c')).toEqual([{ id: 'links', seqs: [parent.seq + 1] }]);
    expect(broken(audit(parent, linked(parent, 'continuation', { principal: 'alice' })), 'run-c')).toEqual([]);
  });
  it('an answer to a clarification the parent never asked is named', () => {
    const parent = cleanRun('run-p');
    const h = linked(parent, 'clarification', { clarification: { clarificationId: 'never-asked', question: 'q', originalRequest: 'r' } });
    expect(broken(audit(parent, h), 'run-c')).toEqual([{ id: 'links', seqs: [parent.seq + 1] }]);
  });
});

describe('audit K10: a wake accepted once', () => {
  it('a wait answered twice, or after it expired, is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'w', name: 'ask_human' }] })
      .waitOpened(1, 'w', 'Which fund?', '2100-01-01T00:00:00.000Z');
    h.waitAnswered('w', 'SPY');
    expect(broken(audit(h))).toEqual([]);
    h.add('wait.answered', 'again', {
      waitId: (h.events[h.events.length - 1]!.event.data as { waitId: string }).waitId,
      toolCallId: 'w',
      answer: 'QQQ',
      answeredBy: 'mallory',
      requestId: 'r',
    });
    expect(broken(audit(h))).toEqual([{ id: 'wake-once', seqs: [h.seq] }]);

    const late = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'w', name: 'ask_human' }] })
      .waitOpened(1, 'w', 'Which fund?', '2025-12-31T23:00:04.000Z');
    late.waitAnswered('w', 'SPY');
    expect(broken(audit(late))).toEqual([{ id: 'wake-once', seqs: [late.seq] }]);
  });
});

describe('audit K9: the settled answer is not changed after the settlement', () => {
  const forged = 'FORGED: SPY and QQQ hold nothing in common.';
  it('given a settled Run, when a new version of its passage is committed after the settlement, then that commit is named', () => {
    const h = cleanRun().add('passage.committed', 'p-1/v2', { ...passage, version: 2, text: forged, sha256: sha256Hex(forged) });
    expect(broken(audit(h))).toEqual([{ id: 'settlement-references', seqs: [h.seq] }]);
  });

  it('given a settled Run, when an answer is published after the settlement, then it is named', () => {
    const h = cleanRun().add('answer.published', 'answer-again', { passageIds: ['p-1'], characters: answer.length, sourceTurn: 2, unanswered: [] });
    expect(broken(audit(h))).toEqual([{ id: 'settlement-references', seqs: [h.seq] }]);
  });

  it('given a passage whose sha256 is not the digest of its text, then it is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: answer })
      .add('passage.committed', 'p-1/v1', { ...passage, sha256: '0'.repeat(64) });
    expect(broken(audit(h))).toEqual([{ id: 'settlement-references', seqs: [h.seq] }]);
  });
});

describe('audit K4: only an explicit cancel cancels, and a recorded cancel does', () => {
  const cancel = (h: History) => h.add('run.cancel.requested', 'cancel', { requestedBy: 'alice', reason: null });
  const status = (report: AuditReport, id: CheckId) => report.runs[0]!.checks.find((c) => c.id === id)!.status;

  it('given a cancel request, when recovery fences `canceled` and the lifecycle settles `canceled`, then the check holds', () => {
    const h = cancel(new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }))
      .fenced('canceled')
      .settled('canceled');
    expect(broken(audit(h))).toEqual([]);
    expect(status(audit(h), 'cancel-explicit')).toBe('held');
  });

  it('given no cancel request, when a fence says `canceled` and the Run settles `canceled` (a disconnect taken for a cancel), then each is named', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .fenced('canceled');
    const fences = [h.seq - 1, h.seq];
    h.settled('canceled');
    expect(broken(audit(h))).toEqual([{ id: 'cancel-explicit', seqs: [...fences, h.seq] }]);
  });

  it('given a cancel request, when the Run settles `interrupted` after a lost lease, then the settlement is named', () => {
    const h = cancel(new History().admitted().turn(1, { calls: [{ id: 'a', name: 'list_funds' }] }))
      .fenced('lease-expired')
      .settled('interrupted');
    expect(broken(audit(h))).toEqual([{ id: 'cancel-explicit', seqs: [h.seq] }]);
  });

  it('given a cancel requested after the runtime stopped with its answer, when the answer settles `completed`, then the check holds', () => {
    const h = cleanRun();
    const settlement = h.events.pop()!;
    cancel(h);
    h.events.push({ ...settlement, seq: h.seq + 1 });
    expect(broken(audit(h))).toEqual([]);
  });
});

describe('audit K8: a failed or denied tool call stops only itself', () => {
  const failedCall = () =>
    new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'failed', null);
  const status = (report: AuditReport) => report.runs[0]!.checks.find((c) => c.id === 'failure-local')!.status;

  it('given a failed receipt, when the next model turn is requested, then the check holds', () => {
    const h = failedCall().turn(2, { content: 'The file could not be read.' });
    expect(broken(audit(h))).toEqual([]);
    expect(status(audit(h))).toBe('held');
  });

  it('given a failed receipt, when the execution stops at once for no limit of its own, then the stop is named', () => {
    const h = failedCall().add('run.execution.finished', 'finished', { reason: 'empty-output', detail: '', answerTurn: null });
    expect(broken(audit(h))).toEqual([{ id: 'failure-local', seqs: [h.seq] }]);
  });

  it('given a failed receipt, when the execution stops at its model-request limit, then the check holds', () => {
    const h = failedCall().add('run.execution.finished', 'finished', { reason: 'model-request-limit', detail: '', answerTurn: null });
    expect(broken(audit(h))).toEqual([]);
  });

  it('a Run with no failed or denied call does not apply', () => {
    expect(status(audit(cleanRun()))).toBe('not-applicable');
  });
});

describe('audit K11: the log whole and verified', () => {
  /** Stamps each event's back-link as the event log does: the previous stored message on its subject. */
  const linkedChain = (h: History): StoredEvent[] => {
    const last = new Map<string, number>();
    return h.events.map((s) => {
      const prevSeq = last.get(s.subject) ?? 0;
      last.set(s.subject, s.seq);
      return { ...s, event: { ...s.event, prevSeq } };
    });
  };
  it('an erased passage (a stored event missing from its subject) is named at the event after it', () => {
    const h = cleanRun();
    const events = linkedChain(h);
    expect(auditRuns({ runs: new Map([['run-1', events]]) }).summary.broken).toBe(0);
    const passageAt = events.findIndex((e) => e.event.type === 'passage.committed');
    const erased = events.filter((_, i) => i !== passageAt);
    const report = auditRuns({ runs: new Map([['run-1', erased]]) });
    const answerSeq = events.find((e) => e.event.type === 'answer.published')!.seq;
    expect(broken(report)).toEqual([
      { id: 'settlement-references', seqs: [answerSeq, h.seq] },
      { id: 'subject-chains', seqs: [answerSeq] },
    ]);
  });
  it('a copy of a stored event, stored again later on its subject (a replay), is reported at the copy', () => {
    const events = cleanRun().events;
    const published = events.find((e) => e.event.type === 'answer.published')!;
    const lastSeq = events[events.length - 1]!.seq;
    const copy: StoredEvent = { ...published, seq: lastSeq + 1, event: { ...published.event } };
    const report = auditRuns({ runs: new Map([['run-1', [...events, copy]]]) });
    expect(broken(report)).toEqual([{ id: 'stored-verified', seqs: [lastSeq + 1] }]);
    expect(report.runs[0]!.checks.find((c) => c.id === 'stored-verified')!.violations[0]!.message).toMatch(/a copy of event .* stored again/);
  });

  it('a message on the Run that is not a verified event is reported', () => {
    const report = auditRuns({
      runs: new Map([['run-1', cleanRun().events]]),
      anomalies: [{ seq: 99, subject: 'rp.run.run-1.lifecycle.3', runId: 'run-1', message: 'not a valid event' }],
    });
    expect(broken(report)).toEqual([{ id: 'stored-verified', seqs: [99] }]);
    expect(report.summary.anomalies).toBe(1);
  });
});
