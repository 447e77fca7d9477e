import { describe, expect, it } from '@jest/globals';
import { buildMessages, toolDefinitions } from '../src/messages.js';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { sha256Hex } from '@runplane/contracts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const wake = { type: 'Wake', model: 'm' } as const;
const ended = (turn: number, result: ModelTurnResult) => ({ type: 'ModelTurnEnded', turn, result }) as const;
const reply = (content: string, extra: Partial<Extract<ModelTurnResult, { ok: true }>['turn']> = {}): ModelTurnResult => ({
  ok: true,
  turn: { content, toolCalls: [], finishReason: 'stop', usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5 }, ...extra },
});
const requested = (turn: number) => ({ type: 'model.turn.requested', data: { turn, model: 'm' } }) as const;
const finished = (reason: string, answerTurn: number | null = null) =>
  ({ type: 'run.execution.finished', data: { reason, detail: expect.any(String), answerTurn } }) as never;

/** Turn 1 called `list_funds` (a) and `get_holdings` (b), both proposed, neither dispatched. */
const twoCallsProposed = () =>
  new History()
    .admitted()
    .turn(1, {
      calls: [
        { id: 'a', name: 'list_funds' },
        { id: 'b', name: 'get_holdings' },
      ],
    })
    .proposed(1, 'a', 'list_funds')
    .proposed(1, 'b', 'get_holdings');

describe('runtime decide, Wake: the next step comes from the folded log alone', () => {
  it('given nothing admitted, when woken, then nothing', () => {
    runtime.given(new History()).when(wake).thenNothing();
  });

  it('given an admitted Run, when woken, then it requests turn 1', () => {
    runtime
      .given(new History().admitted())
      .when(wake)
      .then([requested(1)]);
  });

  it('given a turn requested but not completed, when woken again, then nothing (never calls the model twice for one turn)', () => {
    runtime
      .given(new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' }))
      .when(wake)
      .thenNothing();
  });

  it('given a completed turn whose tool calls were not all proposed (crash), then it proposes the missing ones', () => {
    const h = new History()
      .admitted()
      .turn(1, {
        calls: [
          { id: 'a', name: 'list_funds' },
          { id: 'b', name: 'get_holdings' },
        ],
      })
      .proposed(1, 'a', 'list_funds');
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'tool.call.proposed', data: { toolCallId: 'b', name: 'get_holdings', argumentsText: '{}', turn: 1 } }]);
  });

  it('given proposals without receipts, then it waits; given every receipt (even failed), then it requests the next turn (K8)', () => {
    const h = twoCallsProposed();
    h.dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded');
    runtime.given(h).when(wake).thenNothing();
    h.receipt('b', 'get_holdings', 'failed');
    runtime
      .given(h)
      .when(wake)
      .then([requested(2)]);
  });

  it('given a completed final text turn without a stop recorded (crash), then it finishes answered with that turn', () => {
    runtime
      .given(new History().admitted().turn(1, { content: 'The answer.' }))
      .when(wake)
      .then([finished('answered', 1)]);
  });

  it.each([
    ['an empty reply', { content: '   ' }, 'empty-output'],
    ['a length-truncated reply', { content: 'Half an ans', finishReason: 'length' }, 'truncated-output'],
    [
      'a reply stopped by a content filter',
      { content: 'SPY and QQQ share 88 holdings, and the', finishReason: 'content_filter' },
      'incomplete-output',
    ],
    ['a reply of zero-width characters only', { content: '\u200B\u200D \uFEFF' }, 'empty-output'],
  ])('given %s, then it is not an answer: a new turn retries it, and when the budget is spent it finishes without one (K7, K9)', (_n, r, reason) => {
    runtime
      .given(new History().admitted().turn(1, r))
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm', retryOf: 1 } }]);
    runtime
      .given(new History().admitted({ maxModelRequests: 1 }).turn(1, r))
      .when(wake)
      .then([finished('model-request-limit')]);
    expect(reason).toBeTruthy();
  });

  it('given a failed turn (HTTP 500), then a new turn retries it (charged: it is a turn of its own); a 400 is not retried (model-error)', () => {
    const failed = (status: number) =>
      new History()
        .admitted()
        .add('model.turn.requested', 1, { turn: 1, model: 'm' })
        .add('model.turn.failed', 1, { turn: 1, error: { kind: 'http', status, message: 'boom' } });
    runtime
      .given(failed(500))
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm', retryOf: 1 } }]);
    runtime
      .given(failed(400))
      .when(wake)
      .then([finished('model-error')]);
  });

  it('given the model-request limit used up, then it finishes instead of calling again', () => {
    const h = new History()
      .admitted({ maxModelRequests: 1 })
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded');
    runtime
      .given(h)
      .when(wake)
      .then([finished('model-request-limit')]);
  });

  it('given the deadline passed, then it finishes with deadline (the clock is the one passed in)', () => {
    const h = new History().admitted({ deadlineAt: '2026-06-01T00:00:00.000Z' });
    runtime
      .given(h)
      .when(wake, new Date('2026-06-01T00:00:00.000Z'))
      .then([finished('deadline')]);
    runtime
      .given(h)
      .when(wake, new Date('2026-05-31T23:59:59.999Z'))
      .then([requested(1)]);
  });

  it('given a finished Run, then nothing more happens', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: 'x' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    runtime.given(h).when(wake).thenNothing();
  });
});

describe("runtime decide, ModelTurnEnded: the model's reply is recorded exactly once", () => {
  const inFlight = () => new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' });

  it('given turn 1 in flight, when it ends with text, then the turn is completed and execution finishes answered', () => {
    runtime
      .given(inFlight())
      .when(ended(1, reply('The answer.')))
      .then([
        {
          type: 'model.turn.completed',
          data: {
            turn: 1,
            content: 'The answer.',
            toolCalls: [],
            finishReason: 'stop',
            usage: { promptTokens: 3, completionTokens: 2, totalTokens: 5 },
          },
        },
        finished('answered', 1),
      ]);
  });

  it('given turn 1 in flight, when it ends with tool calls, then the turn and one proposal per call are recorded', () => {
    const calls = [
      { toolCallId: 't1-0-a', name: 'list_funds', argumentsText: '{}' },
      { toolCallId: 't1-1-b', name: 'get_holdings', argumentsText: '{"fund":"SPY"}' },
    ];
    const events = runtime
      .given(inFlight())
      .when(ended(1, reply('', { toolCalls: calls, finishReason: 'tool_calls' })))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ turn: 1, toolCalls: calls }) },
        { type: 'tool.call.proposed', data: { ...calls[0]!, turn: 1 } },
        { type: 'tool.call.proposed', data: { ...calls[1]!, turn: 1 } },
      ]);
    expect(events.every((e) => e.owner === 'runtime')).toBe(true);
  });

  it('given turn 1 in flight, when the request timed out, then the failure is recorded with its backoff and nothing stops (the next wake retries within budget)', () => {
    runtime
      .given(inFlight())
      .when(ended(1, { ok: false, error: { kind: 'timeout', status: null, message: 'timed out' } }))
      .then([
        {
          type: 'model.turn.failed',
          data: expect.objectContaining({
            turn: 1,
            error: { kind: 'timeout', status: null, message: 'timed out' },
            retry: expect.objectContaining({ failuresInARow: 1 }),
          }),
        },
      ]);
  });

  it('given turn 1 in flight, when the request is refused with 401, then the failure is recorded and execution stops with model-error (no retry can fix it)', () => {
    runtime
      .given(inFlight())
      .when(ended(1, { ok: false, error: { kind: 'http', status: 401, message: 'bad key' } }))
      .then([{ type: 'model.turn.failed', data: { turn: 1, error: { kind: 'http', status: 401, message: 'bad key' } } }, finished('model-error')]);
  });

  it('given turn 1 in flight, when it ends cut at the length limit, then it is recorded and never taken as an answer (K9)', () => {
    runtime
      .given(inFlight())
      .when(ended(1, reply('Half', { finishReason: 'length' })))
      .then([{ type: 'model.turn.completed', data: expect.objectContaining({ finishReason: 'length' }) }]);
  });

  it('given turn 1 in flight, when it ends cut at the length limit with tool calls, then none is proposed, even one that looks complete (K5, K9)', () => {
    const calls = [{ toolCallId: 't1-0-a', name: 'get_holdings', argumentsText: '{"fund":"SPY"}' }];
    runtime
      .given(inFlight())
      .when(ended(1, reply('', { toolCalls: calls, finishReason: 'length' })))
      .then([{ type: 'model.turn.completed', data: expect.objectContaining({ toolCalls: calls, finishReason: 'length' }) }]);
  });

  it('given a length-cut turn with tool calls recorded and no proposal, when woken, then its calls are not proposed: the turn is retried', () => {
    runtime
      .given(new History().admitted().turn(1, { content: '', calls: [{ id: 't1-0-a', name: 'list_funds' }], finishReason: 'length' }))
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm', retryOf: 1 } }]);
  });

  it('given turn 1 already completed, when its end is reported again, then nothing (recorded once)', () => {
    runtime
      .given(new History().admitted().turn(1, { content: 'A' }))
      .when(ended(1, reply('A')))
      .thenNothing();
  });

  it('given turn 2 in flight, when turn 1 is reported, then nothing', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded');
    h.add('model.turn.requested', 2, { turn: 2, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, reply('late')))
      .thenNothing();
  });

  it('emits events stamped with the decision clock', () => {
    const at = new Date('2026-03-04T05:06:07.000Z');
    const [e] = runtime
      .given(inFlight())
      .when(ended(1, reply('x')), at)
      .then([expect.anything() as never, expect.anything() as never]);
    expect(e!.occurredAt).toBe(at.toISOString());
  });
});

describe('runtime decide, ParagraphsStreamed: text is recorded while the turn streams', () => {
  const streamed = (turn: number, paragraphs: { index: number; text: string }[]) => ({ type: 'ParagraphsStreamed', turn, paragraphs }) as const;
  const paragraph = (turn: number, index: number, text: string) =>
    ({ type: 'model.output.paragraph', data: { turn, index, text, sha256: sha256Hex(text) } }) as const;
  const inFlight = () => new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' });

  it('given turn 1 in flight, when two paragraphs finished, then each is recorded once, in order, with its digest', () => {
    runtime
      .given(inFlight())
      .when(
        streamed(1, [
          { index: 0, text: 'One.' },
          { index: 1, text: 'Two.' },
        ]),
      )
      .then([paragraph(1, 0, 'One.'), paragraph(1, 1, 'Two.')]);
  });

  it('given paragraph 0 already recorded, when it is reported again with paragraph 1, then only paragraph 1 is recorded', () => {
    const h = inFlight().add('model.output.paragraph', '1/0', paragraph(1, 0, 'One.').data);
    runtime
      .given(h)
      .when(
        streamed(1, [
          { index: 0, text: 'One.' },
          { index: 1, text: 'Two.' },
        ]),
      )
      .then([paragraph(1, 1, 'Two.')]);
  });

  const progressed = (turn: number, text: string, paragraphs: { index: number; text: string }[] = []) =>
    ({ type: 'ParagraphsStreamed', turn, paragraphs, progress: { characters: text.length, sha256: sha256Hex(text) } }) as const;
  const progressEvent = (turn: number, text: string) =>
    ({ type: 'model.output.progress', data: { turn, characters: text.length, sha256: sha256Hex(text) } }) as const;

  it('given turn 1 in flight, when text streamed inside an unfinished paragraph, then its progress is recorded (K7)', () => {
    runtime
      .given(inFlight())
      .when(progressed(1, 'A long paragraph still'))
      .then([progressEvent(1, 'A long paragraph still')]);
  });

  it('given progress recorded up to 22 characters, when the same or less is reported again, then nothing; when more, then the new progress', () => {
    const h = inFlight().add('model.output.progress', '1/progress/22', progressEvent(1, 'A long paragraph still').data);
    runtime.given(h).when(progressed(1, 'A long paragraph still')).thenNothing();
    runtime.given(h).when(progressed(1, 'A long')).thenNothing();
    runtime
      .given(h)
      .when(progressed(1, 'A long paragraph still streaming'))
      .then([progressEvent(1, 'A long paragraph still streaming')]);
  });

  it('given turn 1 in flight, when a paragraph finished and progress came together, then the paragraph, then the progress', () => {
    runtime
      .given(inFlight())
      .when(progressed(1, 'One.\n\nTwo and more', [{ index: 0, text: 'One.' }]))
      .then([paragraph(1, 0, 'One.'), progressEvent(1, 'One.\n\nTwo and more')]);
  });

  it('given the turn already recorded, another turn in flight, or a cancel, when progress is reported, then nothing', () => {
    runtime
      .given(new History().admitted().turn(1, { content: 'Long text' }))
      .when(progressed(1, 'Long text'))
      .thenNothing();
    runtime.given(inFlight()).when(progressed(2, 'Long text')).thenNothing();
    runtime
      .given(inFlight().add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null }))
      .when(progressed(1, 'Long text'))
      .thenNothing();
  });

  it('given the turn already recorded, another turn in flight, a cancel, or a fence, then nothing', () => {
    const p = [{ index: 0, text: 'One.' }];
    runtime
      .given(new History().admitted().turn(1, { content: 'One.\n\nTwo.' }))
      .when(streamed(1, p))
      .thenNothing();
    runtime.given(inFlight()).when(streamed(2, p)).thenNothing();
    runtime
      .given(inFlight().add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null }))
      .when(streamed(1, p))
      .thenNothing();
    const fencedRun = inFlight().fenced('lease-expired', 1, { holder: null, detail: 'x', subjects: ['runtime'] });
    runtime.given(fencedRun).when(streamed(1, p)).thenNothing();
  });
});

describe('model view of a Run', () => {
  it('shows receipts as the model should read them: results, failures, and unknown as unknown (K5)', () => {
    const h = twoCallsProposed();
    h.dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded', { funds: [] })
      .dispatched('b', 'get_holdings')
      .receipt('b', 'get_holdings', 'unknown');
    const messages = buildMessages(h.facts, new Map([['a', { funds: [] }]]));
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'tool']);
    expect(JSON.parse(messages[3]!.content as string)).toEqual({ status: 'succeeded', result: { funds: [] } });
    expect(JSON.parse(messages[4]!.content as string)).toMatchObject({ status: 'unknown' });
  });

  it('offers only granted tools, with JSON Schema parameters from the zod contract', () => {
    const defs = toolDefinitions(['compare_holdings']);
    expect(defs).toHaveLength(1);
    expect(defs[0]!.type === 'function' && defs[0]!.function.name).toBe('compare_holdings');
    const params = defs[0]!.type === 'function' ? (defs[0]!.function.parameters as { required: string[] }) : { required: [] };
    expect(params.required).toEqual(['fundA', 'fundB']);
  });
});
