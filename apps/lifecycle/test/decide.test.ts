import { describe, expect, it } from '@jest/globals';
import { History } from '../../../test/support/history.js';
import { lifecycle, settles, wake } from './lifecycle-spec.js';

type FenceData = Parameters<History['add']>[2] & { fencedSubject: 'runtime' | 'tools' };
/** Recovery's fence, as it writes it: one marker on the tools subject, then one on the runtime subject. */
const fenced = (h: History, data: Omit<FenceData, 'fencedSubject'>) => {
  for (const fencedSubject of ['tools', 'runtime'] as const) h.add('run.fenced', `fence/${fencedSubject}`, { fencedSubject, ...data } as never);
  return h;
};
/** A Run whose one tool call ended `status` (succeeded unless said), then answered in turn 2. */
const answered = (status: 'succeeded' | 'failed' | 'denied' | 'unknown' = 'succeeded') =>
  new History()
    .admitted()
    .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
    .proposed(1, 'a', 'get_holdings')
    .dispatched('a', 'get_holdings')
    .receipt('a', 'get_holdings', status)
    .turn(2, { content: 'Answer.' })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });

const published = (h: History, unanswered?: { part: string; reason: string }[]) =>
  h
    .closed()
    .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
    .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2, ...(unanswered ? { unanswered } : {}) });

/** A Run that makes each call in its own turn (receipt `status`; `denied` calls are never dispatched), answers in the next turn, and publishes the answer. */
const callsThenAnswer = (calls: { id: string; name: string; args?: string; status: 'succeeded' | 'failed' | 'denied' | 'unknown' }[]) => {
  const h = new History().admitted();
  calls.forEach((c, i) => {
    h.turn(i + 1, { calls: [{ id: c.id, name: c.name, ...(c.args ? { args: c.args } : {}) }] }).proposed(i + 1, c.id, c.name, c.args);
    if (c.status !== 'denied') h.dispatched(c.id, c.name);
    h.receipt(c.id, c.name, c.status);
  });
  const answerTurn = calls.length + 1;
  return h
    .turn(answerTurn, { content: 'Answer.' })
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn })
    .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: answerTurn, sha256: 'a'.repeat(64) })
    .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: answerTurn });
};

describe('lifecycle decide: an answer that says what it did not answer settles partial (K9)', () => {
  it('given the answer published with an unanswered list, then it settles partial with that list', () => {
    const gaps = [
      { part: 'holdings of XYZ', reason: 'no holdings file' },
      { part: 'top 10 holdings of SPY', reason: 'only 5 came back' },
    ];
    settles(
      published(answered(), gaps),
      expect.objectContaining({
        outcome: 'partial',
        reason: 'answer committed in 1 passage(s); not answered: holdings of XYZ (no holdings file); top 10 holdings of SPY (only 5 came back)',
        passageIds: ['p0'],
        unanswered: gaps,
      }),
    );
  });

  it('given the answer published with an empty list (or none, as written before the list existed), then it settles completed with an empty list', () => {
    for (const list of [[], undefined]) settles(published(answered(), list), expect.objectContaining({ outcome: 'completed', unanswered: [] }));
  });

  it('given a model error after a passage was committed, then it settles partial keeping the passage and naming the rest of the answer, not failed', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First.', sha256: 'b'.repeat(64) })
      .add('passage.committed', '1/0/v1', { passageId: 'p0', index: 0, version: 1, text: 'First.', sourceTurn: 1, sha256: 'b'.repeat(64) })
      .add('model.turn.failed', 1, { turn: 1, error: { kind: 'connection', status: null, message: 'stream cut' } })
      .add('run.execution.finished', 'finished', { reason: 'model-error', detail: 'turn 1: stream cut', answerTurn: null })
      .closed();
    settles(h, {
      outcome: 'partial',
      reason: 'the model request failed: turn 1: stream cut; the 1 passage(s) committed before it are kept',
      passageIds: ['p0'],
      receipts: [],
      // the failed turn's usage is unknown: not 0 tokens measured
      usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0, unknownUsageTurns: 1 },
      unanswered: [{ part: 'the rest of the answer', reason: 'the model request failed: turn 1: stream cut' }],
      pendingChildRunIds: [],
    });
  });

  it('given a model error before any text was committed, then it settles failed, with nothing unanswered listed', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .add('model.turn.failed', 1, { turn: 1, error: { kind: 'http', status: 500, message: 'boom' } })
      .add('run.execution.finished', 'finished', { reason: 'model-error', detail: 'turn 1: boom', answerTurn: null })
      .closed();
    settles(h, expect.objectContaining({ outcome: 'failed', passageIds: [], unanswered: [] }));
  });

  it('given a turn that completed without a usage chunk, then its tokens are unknown, not 0 measured', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .add('model.turn.completed', 1, { turn: 1, content: 'Answer.', toolCalls: [], finishReason: 'stop', usage: null })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 })
      .closed()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 1, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 1, unanswered: [] });
    settles(
      h,
      expect.objectContaining({
        outcome: 'completed',
        usage: { modelRequests: 1, toolCalls: 0, promptTokens: 0, completionTokens: 0, unknownUsageTurns: 1 },
      }),
    );
  });

  it('given a cancel racing the completion: once the runtime recorded its answer, the cancel does not win; the settlement waits for the answer and follows it, whatever a replica read first (K9)', () => {
    const cancelThenFinished = answered().closed().add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    lifecycle.given(cancelThenFinished).when(wake).thenNothing();
    settles(published(cancelThenFinished), expect.objectContaining({ outcome: 'completed' }));
  });

  it('given a cancel after the answer with an unanswered list was published, then the answer wins: partial, never a second settlement', () => {
    const h = published(answered(), [{ part: 'x', reason: 'y' }]).add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    const first = settles(h, expect.objectContaining({ outcome: 'partial' }));
    lifecycle
      .given(h.add('run.settled', 'settlement', first.data))
      .when(wake)
      .thenNothing();
  });
});

describe('lifecycle decide: what the log says the Run never had is listed, whatever the answer claims (K9)', () => {
  it.each(['failed', 'denied', 'unknown'] as const)(
    'given a call that ended %s and an answer that lists nothing unanswered, then it settles partial listing that result',
    (status) => {
      const settled = settles(published(answered(status), []), expect.objectContaining({ outcome: 'partial' }));
      expect(settled.data.unanswered).toEqual([
        { part: 'the result of get_holdings({}) [a]', reason: expect.stringContaining(`get_holdings ${status}`) },
      ]);
      expect(settled.data.reason).toContain('not answered: the result of get_holdings({}) [a]');
    },
  );

  describe('calls the runtime refused before anything ran (never proposed, no receipt)', () => {
    /** Turn 1 asks for `calls`, of which the runtime proposes none; turn 2 answers as if it had their results. */
    const refused = (calls: { id: string; name: string; args?: string }[], cut?: { toolCallId: string; bytes: number }) => {
      const h = new History().admitted().turn(1, { calls });
      if (cut) {
        // the turn as the runtime records a call whose arguments were over the size limit
        const completed = h.events.at(-1)!.event as { data: { cut?: unknown[] } };
        completed.data.cut = [
          { field: 'arguments', toolCallId: cut.toolCallId, bytes: cut.bytes, limitBytes: 32_768, keptCharacters: 100, sha256: 'b'.repeat(64) },
        ];
      }
      return h
        .turn(2, { content: 'DIA holds the thirty Dow stocks.' })
        .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
    };

    it('given get_holdings whose arguments were over the size limit and an answer that lists nothing, then it settles partial naming the call never executed', () => {
      const settled = settles(
        published(refused([{ id: 'big', name: 'get_holdings', args: '{"fund":"DIA","pad":"x"}' }], { toolCallId: 'big', bytes: 40_000 }), []),
        expect.objectContaining({ outcome: 'partial' }),
      );
      expect(settled.data.unanswered).toEqual([
        {
          part: 'the result of get_holdings({"fund":"DIA","pad":"x"}) [big]',
          reason: expect.stringContaining(
            'the call was never executed: its arguments (40000 bytes) were over the size limit of 32768 bytes',
          ) as never,
        },
      ]);
    });

    it('given a sub-agent asked without a question (refused, nothing spawned), then it settles partial naming it', () => {
      const settled = settles(
        published(refused([{ id: 'sub', name: 'spawn_subagent', args: '{"task":"research DIA holdings"}' }]), []),
        expect.objectContaining({ outcome: 'partial' }),
      );
      expect(settled.data.unanswered!.map((u) => u.part)).toEqual(['the result of spawn_subagent({"task":"research DIA holdings"}) [sub]']);
    });

    it('given the refused call later asked again and answered by an identical call, then nothing is listed: completed', () => {
      const h = new History()
        .admitted()
        .turn(1, { calls: [{ id: 'x', name: 'get_holdings', args: '{"fund":"DIA"}' }] })
        .turn(2, { calls: [{ id: 'y', name: 'get_holdings', args: '{"fund":"DIA"}' }] })
        .proposed(2, 'y', 'get_holdings', '{"fund":"DIA"}')
        .dispatched('y', 'get_holdings')
        .receipt('y', 'get_holdings', 'succeeded')
        .turn(3, { content: 'Answer.' })
        .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 3 })
        .closed()
        .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 3, sha256: 'a'.repeat(64) })
        .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 3 });
      settles(h, expect.objectContaining({ outcome: 'completed', unanswered: [] }));
    });

    it('given a question for a human that was opened, then it is no refused call', () => {
      const h = new History()
        .admitted({ tools: ['get_holdings', 'ask_human'] })
        .turn(1, { calls: [{ id: 'w', name: 'ask_human', args: '{"question":"Which fund?"}' }] })
        .waitOpened(1, 'w', 'Which fund?')
        .waitAnswered('w', 'DIA')
        .turn(2, { content: 'Answer.' })
        .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
      settles(published(h, []), expect.objectContaining({ outcome: 'completed', unanswered: [] }));
    });
  });

  it("given the answer's own list and a failed call, then both are listed, the answer's first", () => {
    const gaps = [{ part: 'holdings of XYZ', reason: 'no holdings file' }];
    settles(
      published(answered('failed'), gaps),
      expect.objectContaining({
        outcome: 'partial',
        unanswered: [
          gaps[0],
          { part: 'the result of get_holdings({}) [a]', reason: expect.stringMatching(/^the call failed: failed: get_holdings failed/) },
        ],
      }),
    );
  });

  it("given a failed call whose argument value the answer's own list names, then it is not listed twice", () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings', args: '{"fund":"VGT"}' }] })
      .proposed(1, 'a', 'get_holdings', '{"fund":"VGT"}')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'failed')
      .turn(2, { content: 'Answer.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
    const gaps = [{ part: 'holdings of VGT', reason: 'not covered by the data' }];
    settles(published(h, gaps), expect.objectContaining({ outcome: 'partial', unanswered: gaps }));
  });

  it('given a failed call whose result an identical call obtained (here later; before counts the same), then nothing is listed: completed', () => {
    const h = callsThenAnswer([
      { id: 'a', name: 'get_holdings', args: '{"fund":"SPY"}', status: 'failed' },
      { id: 'b', name: 'get_holdings', args: '{"fund":"SPY"}', status: 'succeeded' },
    ]);
    settles(h, expect.objectContaining({ outcome: 'completed', unanswered: [] }));
  });

  it('given the same call failing twice, then its missing result is listed once; given a call denied after an identical call succeeded, then nothing is listed', () => {
    const twice = callsThenAnswer([
      { id: 'a', name: 'get_holdings', status: 'failed' },
      { id: 'b', name: 'get_holdings', status: 'failed' },
    ]);
    const settled = settles(twice, expect.objectContaining({ outcome: 'partial' }));
    expect(settled.data.unanswered!.map((u) => u.part)).toEqual(['the result of get_holdings({}) [a]']);
    const deniedAfter = callsThenAnswer([
      { id: 'a', name: 'list_funds', status: 'succeeded' },
      { id: 'b', name: 'list_funds', status: 'denied' },
    ]);
    settles(deniedAfter, expect.objectContaining({ outcome: 'completed', unanswered: [] }));
  });

  it('given a failed call and a later success of the same tool with OTHER arguments, then the failed one is still listed', () => {
    const h = callsThenAnswer([
      { id: 'a', name: 'get_holdings', args: '{"fund":"VGT"}', status: 'failed' },
      { id: 'b', name: 'get_holdings', args: '{"fund":"SPY"}', status: 'succeeded' },
    ]);
    settles(
      h,
      expect.objectContaining({
        outcome: 'partial',
        unanswered: [{ part: 'the result of get_holdings({"fund":"VGT"}) [a]', reason: expect.any(String) }],
      }),
    );
  });
});

/** A Run whose turn 1 reply was cut at the length limit, then `after` (turns from 2 on), answered in `answerTurn` and published with `own` listed. */
const cutThen = (after: (h: History) => History, answerTurn: number, own: { part: string; reason: string }[] = []) =>
  after(new History().admitted().turn(1, { content: 'The top holdings of SPY are', finishReason: 'length' }))
    .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn })
    .closed()
    .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: answerTurn, sha256: 'a'.repeat(64) })
    .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: answerTurn, unanswered: own });
const unfinished = [{ part: 'research not finished', reason: 'ordinary research stopped (model-request-limit: 3 of 4 model requests used)' }];
/** The runtime's one-way move into finalization-only, as it records it. */
const finalizing = (h: History) =>
  h.add('run.finalization.started', 'finalization', { reason: 'model-request-limit', detail: '3 of 4 model requests used', unfinished });

describe('lifecycle decide: a reply cut at the length limit and never made whole is listed, whatever the answer claims (K9)', () => {
  it('given turn 1 cut at the length limit and its retry answering whole, then the retry covers it: completed', () => {
    settles(
      cutThen((h) => h.turn(2, { content: 'Answer.' }, { retryOf: 1 }), 2),
      expect.objectContaining({ outcome: 'completed', unanswered: [] }),
    );
  });

  it('given turn 1 cut, then a whole research turn with tool calls and an answer, then it is covered: completed', () => {
    const h = cutThen(
      (x) =>
        x
          .turn(2, { calls: [{ id: 'a', name: 'list_funds' }] }, { retryOf: 1 })
          .proposed(2, 'a', 'list_funds')
          .dispatched('a', 'list_funds')
          .receipt('a', 'list_funds', 'succeeded')
          .turn(3, { content: 'Answer.' }),
      3,
    );
    settles(h, expect.objectContaining({ outcome: 'completed' }));
  });

  it('given turn 1 cut and cut again in its retry, then only a finalization answer: both cuts and the finalization ending are listed, partial', () => {
    const h = cutThen(
      (x) =>
        finalizing(x.turn(2, { content: 'The top', finishReason: 'length' }, { retryOf: 1 })).turn(
          3,
          { content: 'Answer.' },
          { purpose: 'finalization' },
        ),
      3,
    );
    const settled = settles(h, expect.objectContaining({ outcome: 'partial' }));
    expect(settled.data.unanswered).toEqual([
      {
        part: 'the reply of model turn 1',
        reason: expect.stringMatching(/^it was cut at the length limit \(27 character\(s\) of text kept\) and no later research turn was whole/),
      },
      { part: 'the reply of model turn 2', reason: expect.stringContaining('cut at the length limit') },
      {
        part: 'research not finished',
        reason: expect.stringContaining('the Run answered in finalization-only (model-request-limit: 3 of 4 model requests used)'),
      },
    ]);
    expect(settled.data.reason).toContain('not answered: the reply of model turn 1 (it was cut at the length limit');
  });

  it("given a cut turn the answer's own list names (model turn 1), then it is not listed twice", () => {
    const own = [{ part: 'the reply of model turn 1', reason: 'cut' }, ...unfinished];
    const h = cutThen((x) => finalizing(x).turn(2, { content: 'Answer.' }, { purpose: 'finalization' }), 2, own);
    settles(h, expect.objectContaining({ outcome: 'partial', unanswered: own }));
  });

  it("given a cut turn whose number only begins another turn's (model turn 10 named, turn 1 cut), then turn 1 is still listed", () => {
    const own = [{ part: 'the reply of model turn 10', reason: 'cut' }, ...unfinished];
    const h = cutThen((x) => finalizing(x).turn(2, { content: 'Answer.' }, { purpose: 'finalization' }), 2, own);
    const settled = settles(h, expect.objectContaining({ outcome: 'partial' }));
    expect(settled.data.unanswered!.map((u) => u.part)).toEqual(['the reply of model turn 10', 'research not finished', 'the reply of model turn 1']);
  });
});

describe('lifecycle decide: an answer written in finalization-only is partial, whatever the answer lists (K9)', () => {
  const finalAnswer = (own: { part: string; reason: string }[]) =>
    published(
      finalizing(new History().admitted().turn(1, { content: 'Some material.' }))
        .turn(2, { content: 'Answer.' }, { purpose: 'finalization' })
        .add('run.execution.finished', 'finished', { reason: 'answered', detail: 'finalization answer in turn 2', answerTurn: 2 }),
      own,
    );

  it('given a finalization answer published with an empty list (the text claims it is complete), then the unfinished scope the runtime recorded is listed: partial', () => {
    settles(
      finalAnswer([]),
      expect.objectContaining({
        outcome: 'partial',
        unanswered: [
          {
            part: 'research not finished',
            reason: expect.stringMatching(/^ordinary research stopped .*; the Run answered in finalization-only/),
          },
        ],
      }),
    );
  });

  it("given a finalization answer whose list carries the runtime's unfinished part (as publication writes it), then it is not listed twice", () => {
    const own = [
      { part: 'holdings of XYZ', reason: 'not reached' },
      { part: 'Research not finished ', reason: 'copied' },
    ];
    settles(finalAnswer(own), expect.objectContaining({ outcome: 'partial', unanswered: own }));
  });

  it('given the Run moved into finalization-only but its finalization turn was no answer, then it settles failed as before, with no list', () => {
    const h = finalizing(new History().admitted().turn(1, { content: '' }))
      .turn(2, { content: '' }, { purpose: 'finalization' })
      .add('run.execution.finished', 'finished', { reason: 'empty-output', detail: 'finalization turn 2 returned no text', answerTurn: null })
      .closed();
    settles(h, expect.objectContaining({ outcome: 'failed', unanswered: [] }));
  });
});

describe('lifecycle decide: exactly one honest settlement (K9)', () => {
  it('given the runtime stopped with an answer not yet published, then it waits', () => {
    lifecycle.given(answered()).when(wake).thenNothing();
  });

  it('given a passage committed by an earlier turn (cut, then retried) besides the answer, then the reason counts the answer and says the other is kept', () => {
    const h = answered()
      .closed()
      .add('passage.committed', 'cut/v1', { passageId: 'pc', index: 0, version: 1, text: 'Cut.', sourceTurn: 1, sha256: 'c'.repeat(64) })
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 });
    settles(
      h,
      expect.objectContaining({
        outcome: 'completed',
        reason: 'answer committed in 1 passage(s); 1 earlier committed passage(s) kept, not part of the answer',
        passageIds: ['pc', 'p0'],
      }),
    );
  });

  it('given the answer published, then it settles completed with passages, receipts and usage', () => {
    const h = answered()
      .closed()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 });
    const settled = settles(h, {
      outcome: 'completed',
      reason: 'answer committed in 1 passage(s)',
      passageIds: ['p0'],
      receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'succeeded' }],
      usage: { modelRequests: 2, toolCalls: 1, promptTokens: 20, completionTokens: 10, unknownUsageTurns: 0 },
      unanswered: [],
      pendingChildRunIds: [],
    });
    expect(settled.owner).toBe('lifecycle');
  });

  it('given an empty-output stop, then it settles failed with the reason', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: '' })
      .add('run.execution.finished', 'finished', { reason: 'empty-output', detail: 'turn 1 returned no text', answerTurn: null })
      .closed();
    settles(h, expect.objectContaining({ outcome: 'failed', reason: expect.stringMatching(/empty reply/) }));
  });

  it('given research stopped token-limit because the money left pays for no request (nothing used), then it settles failed saying the budget left no room, not that tokens were used', () => {
    const detail = 'money budget: 0 of 1 micro-USD used; the next request (~900 input tokens and at least 256 output tokens) does not fit';
    const h = new History().admitted().add('run.execution.finished', 'finished', { reason: 'token-limit', detail, answerTurn: null }).closed();
    const settled = settles(h, expect.objectContaining({ outcome: 'failed', reason: expect.stringContaining(detail) }));
    expect(settled.data.reason).toMatch(/^the Run had no answer when its token or money budget left no room for another model request: money budget/);
    expect(settled.data.reason).not.toMatch(/used its token budget/);
  });

  it('given a settlement already recorded, then it never settles again', () => {
    const h = new History().admitted().add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null }).closed();
    const first = settles(h, expect.objectContaining({ outcome: 'failed' }));
    h.add('run.settled', 'settlement', first.data);
    lifecycle.given(h).when(wake).thenNothing();
  });

  it('given a fenced execution that never stopped on its own, then it settles interrupted with the reason and what is uncertain, keeping receipts and usage (K10)', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'succeeded')
      .add('model.turn.requested', 2, { turn: 2, model: 'm' });
    fenced(h, {
      epoch: 1,
      holder: { service: 'runtime', instance: 'i-1' },
      reason: 'lease-expired',
      detail: 'no renewal',
      uncertain: [{ kind: 'model-turn', turn: 2 }],
    });
    settles(h, {
      outcome: 'interrupted',
      reason: 'the runtime was lost (its lease expired): no renewal; outcome unknown: model turn 2',
      passageIds: [],
      receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'succeeded' }],
      // turn 2 was in flight when the runtime was lost: its usage is unknown, not 0 tokens
      usage: { modelRequests: 2, toolCalls: 1, promptTokens: 10, completionTokens: 5, unknownUsageTurns: 1 },
      unanswered: [],
      pendingChildRunIds: [],
    });
  });

  it('given a cancel intent and the execution fenced, then it settles canceled, keeping what was committed (K4); given the answer already published, then completed', () => {
    const h = fenced(
      new History()
        .admitted()
        .add('model.turn.requested', 1, { turn: 1, model: 'm' })
        .add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: 'enough' }),
      { epoch: 1, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
    );
    settles(h, expect.objectContaining({ outcome: 'canceled', reason: 'canceled by ana: enough' }));
    const published = answered()
      .closed()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 })
      .add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    settles(published, expect.objectContaining({ outcome: 'completed' }));
  });

  it('given an execution fenced at its deadline after committing a passage, then it settles partial saying the deadline passed (and when) while nobody executed it, keeping passages, receipts and usage (K9)', () => {
    const h = new History()
      .admitted({ deadlineAt: '2026-01-01T00:00:10.000Z' })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'succeeded')
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Part.', sourceTurn: 1, sha256: 'a'.repeat(64) });
    fenced(h, {
      epoch: 0,
      holder: null,
      reason: 'deadline',
      detail: 'deadline 2026-01-01T00:00:10.000Z passed (no runtime took the Run)',
      uncertain: [],
    });
    settles(h, {
      outcome: 'partial',
      reason:
        'the deadline passed while nobody executed the Run to its end: deadline 2026-01-01T00:00:10.000Z passed (no runtime took the Run); the 1 passage(s) committed before it are kept',
      passageIds: ['p0'],
      receipts: [{ toolCallId: 'a', name: 'get_holdings', status: 'succeeded' }],
      usage: { modelRequests: 1, toolCalls: 1, promptTokens: 10, completionTokens: 5, unknownUsageTurns: 0 },
      unanswered: [
        {
          part: 'the rest of the answer',
          reason: 'the deadline passed while nobody executed the Run to its end: deadline 2026-01-01T00:00:10.000Z passed (no runtime took the Run)',
        },
      ],
      pendingChildRunIds: [],
    });
  });

  it('given a Run fenced at its deadline after its cancel was requested, then the cancel wins (canceled)', () => {
    const h = fenced(new History().admitted().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null }), {
      epoch: 0,
      holder: null,
      reason: 'deadline',
      detail: 'x',
      uncertain: [],
    });
    settles(h, expect.objectContaining({ outcome: 'canceled', reason: 'canceled by ana' }));
  });

  it('given the answer published and the execution closed by itself (the runtime subject ends in its finish, every proposed call receipted), then it settles with no fence at all (recovery off the happy path)', () => {
    const h = answered()
      .add('passage.committed', '0/v1', { passageId: 'p0', index: 0, version: 1, text: 'Answer.', sourceTurn: 2, sha256: 'a'.repeat(64) })
      .add('answer.published', 'answer', { passageIds: ['p0'], characters: 7, sourceTurn: 2 });
    expect(h.facts.closesItself).toBe(true);
    expect(h.facts.closed).toEqual({ runtime: false, tools: false });
    settles(h, expect.objectContaining({ outcome: 'completed', passageIds: ['p0'] }));
    // a stop without an answer (here: the deadline, every call receipted) settles on the finish alone, woken by it
    const stopped = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .receipt('a', 'get_holdings', 'succeeded')
      .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'deadline passed', answerTurn: null });
    settles(stopped, expect.objectContaining({ outcome: 'failed' }));
  });

  it('given the execution finished with a tool call proposed or dispatched without a receipt, then it waits for both fences of recovery (or only the tools one: waits), whatever comes later on the tools subject', () => {
    const inFlight = (dispatched: boolean) => {
      const h = new History()
        .admitted()
        .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
        .proposed(1, 'a', 'get_holdings');
      if (dispatched) h.dispatched('a', 'get_holdings');
      return h.add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null });
    };
    for (const dispatched of [false, true]) {
      lifecycle.given(inFlight(dispatched)).when(wake).thenNothing();
      // a receipt after the finish does not make it close itself: recovery decided from the finish (and fences)
      lifecycle
        .given(inFlight(dispatched).receipt('a', 'get_holdings', 'denied'))
        .when(wake)
        .thenNothing();
      const toolsOnly = inFlight(dispatched).add('run.fenced', 'settling/tools', {
        fencedSubject: 'tools',
        epoch: 1,
        holder: null,
        reason: 'settling',
        detail: 'x',
        uncertain: [],
      });
      lifecycle.given(toolsOnly).when(wake).thenNothing();
      settles(inFlight(dispatched).closed(), expect.objectContaining({ outcome: 'failed' }));
    }
  });

  it('given a fenced execution (a fault), then the tools subject at rest is not enough: it settles only once both executor subjects end in a fence, as before', () => {
    const h = new History()
      .admitted()
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .fenced('lease-expired', 1, { holder: null, detail: 'x', subjects: ['runtime'] });
    lifecycle.given(h).when(wake).thenNothing();
    settles(h.fenced('lease-expired', 1, { holder: null, detail: 'x', subjects: ['tools'] }), expect.objectContaining({ outcome: 'interrupted' }));
  });

  it('given a tools event after the fence on its subject (a subject reopened), then it waits; a late observation after the fence does not reopen it', () => {
    const base = () =>
      new History()
        .admitted()
        .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
        .proposed(1, 'a', 'get_holdings')
        .dispatched('a', 'get_holdings')
        .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null })
        .closed();
    lifecycle
      .given(base().receipt('a', 'get_holdings', 'succeeded'))
      .when(wake)
      .thenNothing();
    settles(
      base().add('tool.call.late_observed', 'a', {
        toolCallId: 'a',
        name: 'get_holdings',
        status: 'succeeded',
        result: {},
        durationMs: 1,
        executor: 'x',
      }),
      expect.objectContaining({ outcome: 'failed' }),
    );
  });

  it('given a paragraph streamed but not yet committed as a passage when the execution was fenced, then it waits for publication; once committed, it settles interrupted keeping that passage', () => {
    const streamed = () =>
      new History()
        .admitted()
        .add('model.turn.requested', 1, { turn: 1, model: 'm' })
        .add('model.output.paragraph', '1/0', { turn: 1, index: 0, text: 'First.', sha256: 'b'.repeat(64) });
    const fence = { epoch: 1, holder: null, reason: 'lease-expired', detail: 'no renewal', uncertain: [{ kind: 'model-turn', turn: 1 }] } as const;
    lifecycle
      .given(fenced(streamed(), { ...fence, uncertain: [...fence.uncertain] }))
      .when(wake)
      .thenNothing();
    const committed = fenced(streamed(), { ...fence, uncertain: [...fence.uncertain] }).add('passage.committed', '1/0/v1', {
      passageId: 'p0',
      index: 0,
      version: 1,
      text: 'First.',
      sourceTurn: 1,
      sha256: 'b'.repeat(64),
    });
    settles(committed, expect.objectContaining({ outcome: 'interrupted', passageIds: ['p0'] }));
  });
});
