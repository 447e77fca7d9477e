/**
 * The clarification rule (K2) across its owners, given/when/then: the runtime ends a Run whose
 * model asks `ask_clarification` (`clarification.requested`, `run.execution.finished`
 * `clarification-requested`), publication publishes the question as the answer, and the lifecycle
 * settles it `completed` with the clarification pending. Unlike `ask_human` nothing parks.
 */
import { describe, expect, it } from '@jest/globals';
import { clarificationIdOf, effectKey, sha256Hex } from '@runplane/contracts';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { decide as publicationDecide, passageIdFor } from '@runplane/app-publication';
import { decide as lifecycleDecide } from '@runplane/app-lifecycle';
import { decide as toolsDecide } from '@runplane/app-tools';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const TOOLS = ['list_funds', 'get_holdings', 'ask_human', 'spawn_subagent', 'ask_clarification'];
const Q = 'Cumulative or annualized returns?';
const ended = (content: string, toolCalls: { toolCallId: string; name: string; argumentsText: string }[]) =>
  ({
    type: 'ModelTurnEnded',
    turn: 1,
    result: { ok: true, turn: { content, toolCalls, finishReason: 'tool_calls', usage: null } } satisfies ModelTurnResult,
  }) as const;
const ask = { toolCallId: 'k', name: 'ask_clarification', argumentsText: JSON.stringify({ question: Q }) };
const inFlight = (tools = TOOLS) => new History().admitted({ tools }).add('model.turn.requested', 1, { turn: 1, model: 'm' });

describe('runtime decide: ask_clarification ends the Run (K2)', () => {
  it('given a turn in flight, when it ends asking a clarification beside another call, then the question is recorded and execution ends; the other call is not proposed', () => {
    const h = inFlight();
    runtime
      .given(h)
      .when(ended('', [ask, { toolCallId: 'a', name: 'list_funds', argumentsText: '{}' }]))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ turn: 1 }) },
        { type: 'clarification.requested', data: { clarificationId: clarificationIdOf(h.runId, 'k'), toolCallId: 'k', turn: 1, question: Q } },
        {
          type: 'run.execution.finished',
          data: expect.objectContaining({ reason: 'clarification-requested', detail: expect.stringContaining(Q), answerTurn: 1 }),
        },
      ]);
  });

  it('given ask_clarification outside the grant, then it is not a clarification (the model reads not_granted) and the Run goes on', () => {
    runtime
      .given(inFlight(['list_funds']))
      .when(ended('', [ask, { toolCallId: 'a', name: 'list_funds', argumentsText: '{}' }]))
      .then([
        { type: 'model.turn.completed', data: expect.objectContaining({ turn: 1 }) },
        { type: 'tool.call.proposed', data: { toolCallId: 'a', name: 'list_funds', argumentsText: '{}', turn: 1 } },
      ]);
  });

  it('given a crash after the turn was recorded, when woken, then the clarification and then the stop are recorded (once each)', () => {
    const h = new History()
      .admitted({ tools: TOOLS })
      .turn(1, { calls: [{ id: 'k', name: 'ask_clarification', args: JSON.stringify({ question: Q }) }] });
    runtime
      .given(h)
      .when({ type: 'Wake', model: 'm' })
      .then([{ type: 'clarification.requested', data: { clarificationId: clarificationIdOf(h.runId, 'k'), toolCallId: 'k', turn: 1, question: Q } }]);
    h.add('clarification.requested', clarificationIdOf(h.runId, 'k'), {
      clarificationId: clarificationIdOf(h.runId, 'k'),
      toolCallId: 'k',
      turn: 1,
      question: Q,
    });
    runtime
      .given(h)
      .when({ type: 'Wake', model: 'm' })
      .then([{ type: 'run.execution.finished', data: expect.objectContaining({ reason: 'clarification-requested', answerTurn: 1 }) }]);
  });
});

/** A Run that ended asking a clarification in turn 1, after a line of text. */
const asked = () => {
  const h = new History()
    .admitted({ tools: TOOLS })
    .turn(1, { content: 'Before I start:', calls: [{ id: 'k', name: 'ask_clarification', args: JSON.stringify({ question: Q }) }] });
  const clarificationId = clarificationIdOf(h.runId, 'k');
  return h
    .add('clarification.requested', clarificationId, { clarificationId, toolCallId: 'k', turn: 1, question: Q })
    .add('run.execution.finished', 'finished', { reason: 'clarification-requested', detail: 'asked', answerTurn: 1 });
};

describe('publication decide: the question is the answer (K2)', () => {
  it('given a Run that ended asking a clarification, then the turn text and the question are committed and published, nothing unanswered', () => {
    const h = asked();
    spec(publicationDecide)
      .given(h)
      .when({ type: 'Wake' })
      .then([
        {
          type: 'passage.committed',
          data: {
            passageId: passageIdFor(h.runId, 1, 0),
            index: 0,
            version: 1,
            text: 'Before I start:',
            sourceTurn: 1,
            sha256: sha256Hex('Before I start:'),
          },
        },
        {
          type: 'passage.committed',
          data: { passageId: passageIdFor(h.runId, 1, 1), index: 1, version: 1, text: Q, sourceTurn: 1, sha256: sha256Hex(Q) },
        },
        {
          type: 'answer.published',
          data: {
            passageIds: [passageIdFor(h.runId, 1, 0), passageIdFor(h.runId, 1, 1)],
            characters: 'Before I start:'.length + Q.length,
            sourceTurn: 1,
            unanswered: [],
          },
        },
      ]);
  });
});

describe('lifecycle decide: settled completed, the clarification pending (K2)', () => {
  it('given the question published and the executors closed, then completed, and the reason names the pending clarification', () => {
    const h = asked().closed();
    h.add('passage.committed', 'q', { passageId: 'pq', index: 0, version: 1, text: Q, sourceTurn: 1, sha256: sha256Hex(Q) });
    h.add('answer.published', 'answer', { passageIds: ['pq'], characters: Q.length, sourceTurn: 1, unanswered: [] });
    spec(lifecycleDecide)
      .given(h)
      .when({ type: 'Wake' })
      .then([
        {
          type: 'run.settled',
          data: expect.objectContaining({
            outcome: 'completed',
            reason: expect.stringContaining(`clarification pending: ${clarificationIdOf(h.runId, 'k')}`),
            passageIds: ['pq'],
            unanswered: [],
          }),
        },
      ]);
  });

  it('given the question not yet published, then nothing', () => {
    spec(lifecycleDecide).given(asked().closed()).when({ type: 'Wake' }).thenNothing();
  });
});

const tools = spec(toolsDecide);
/** `h` with turn 1 proposing the one call `id` of `name` with `args`, and the tools decider woken on it. */
const wokenOnProposal = (h: History, id: string, name: string, args: string) =>
  tools.given(h.turn(1, { calls: [{ id, name, args }] }).proposed(1, id, name, args)).when({ type: 'Wake' });
/** The tools decider's refusal of call `toolCallId` for `code`: a denied receipt, nothing dispatched. */
const denied = (toolCallId: string, code: string) =>
  ({
    type: 'tool.call.receipt',
    data: expect.objectContaining({ toolCallId, status: 'denied', error: expect.objectContaining({ code }) }),
  }) as const;
/** The tools decider's dispatch of call `toolCallId` of `name`. */
const dispatched = (toolCallId: string, name: string) => ({ type: 'tool.call.dispatched', data: { toolCallId, name } }) as const;

describe('tools decide: a carried unknown effect is not dispatched again (K3, K5)', () => {
  const carrying = () =>
    new History('child-1').admitted({ tools: ['record_effect'] }).add('context.carried', 'context', {
      historyRunIds: [],
      parentRunId: 'parent-1',
      items: [],
      dropped: [],
      unknownEffects: [
        { runId: 'parent-1', toolCallId: 'e1', name: 'record_effect', effectKey: effectKey('record_effect', '{"tag":"x","sleepMs":5}') },
      ],
    });

  it('given a proposal of the same tool with the same arguments (keys in another order), then denied unknown_effect_needs_reconciliation, never dispatched', () => {
    wokenOnProposal(carrying(), 'n1', 'record_effect', '{ "sleepMs": 5, "tag": "x" }').then([denied('n1', 'unknown_effect_needs_reconciliation')]);
  });

  it('given a proposal with other arguments, then it is dispatched as usual', () => {
    wokenOnProposal(carrying(), 'n2', 'record_effect', '{"tag":"other"}').then([dispatched('n2', 'record_effect')]);
  });
});

describe("tools decide: a continuation never re-runs its parent's completed calls (K3)", () => {
  const RESULT = { fund: 'SPY', provenance: 'carried' };
  const carrying = () =>
    new History('child-2').admitted({ tools: ['get_holdings', 'record_effect'] }).add('context.carried', 'context', {
      historyRunIds: [],
      parentRunId: 'parent-2',
      items: [],
      dropped: [],
      unknownEffects: [],
      completedCalls: [
        {
          runId: 'parent-2',
          toolCallId: 'g1',
          name: 'get_holdings',
          effectKey: effectKey('get_holdings', '{"fund":"SPY"}'),
          reusable: true,
          result: RESULT,
        },
        { runId: 'parent-2', toolCallId: 'e1', name: 'record_effect', effectKey: effectKey('record_effect', '{"tag":"x"}'), reusable: false },
      ],
    });

  it("given the same read as the parent's carried one, then a succeeded receipt repeating the parent's result, reusedFrom, nothing dispatched", () => {
    wokenOnProposal(carrying(), 'n1', 'get_holdings', '{ "fund": "SPY" }').then([
      {
        type: 'tool.call.receipt',
        data: expect.objectContaining({
          toolCallId: 'n1',
          status: 'succeeded',
          result: RESULT,
          reusedFrom: { runId: 'parent-2', toolCallId: 'g1' },
        }),
      },
    ]);
  });

  it("given the same effect as the parent's completed one (not carried), then denied already_done_in_parent, never dispatched", () => {
    wokenOnProposal(carrying(), 'n2', 'record_effect', '{"tag":"x"}').then([denied('n2', 'already_done_in_parent')]);
  });

  it('given another read, then it is dispatched as usual', () => {
    wokenOnProposal(carrying(), 'n3', 'get_holdings', '{"fund":"QQQ"}').then([dispatched('n3', 'get_holdings')]);
  });
});
