/**
 * The runtime's parking rules (K7, K10): `ask_human` and `spawn_subagent` calls become a durable
 * wait or a child Run instead of a proposal, the Run decides nothing while parked, its wake
 * continues it, the child's grant is carved from what the parent has left, and the model reads
 * the answer or the child's result as the call's result.
 */
import { describe, expect, it } from '@jest/globals';
import { admissionIds, childClientMessageId, waitIdOf } from '@runplane/contracts';
import { buildMessages, toolDefinitions } from '../src/messages.js';
import { decide, type ModelTurnResult } from '../src/decide.js';
import { wakeAwaitsRecovery } from '../src/parking.js';
import { epochSuperseded } from '@runplane/run-facts';
import { NOW, spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const runtime = spec(decide);
const TTL = 60_000;
const wake = { type: 'Wake', model: 'm', waitTtlMs: TTL } as const;
const ALL = ['list_funds', 'get_holdings', 'ask_human', 'spawn_subagent'];
const calls = (...c: { id: string; name: string; args?: unknown }[]) =>
  c.map((x) => ({ toolCallId: x.id, name: x.name, argumentsText: typeof x.args === 'string' ? x.args : JSON.stringify(x.args ?? {}) }));
const ended = (
  turn: number,
  toolCalls: ReturnType<typeof calls>,
): { type: 'ModelTurnEnded'; turn: number; result: ModelTurnResult; waitTtlMs: number } => ({
  type: 'ModelTurnEnded',
  turn,
  waitTtlMs: TTL,
  result: { ok: true, turn: { content: '', toolCalls, finishReason: 'tool_calls', usage: null } },
});
const completed = (turn: number) => ({ type: 'model.turn.completed', data: expect.objectContaining({ turn }) }) as never;
const childIdOf = (h: History, toolCallId: string) => admissionIds(h.conversationId, childClientMessageId(h.runId, toolCallId)).runId;

describe('runtime decide: a question for a human parks the Run (K10)', () => {
  it('given a turn in flight, when it ends with an ordinary call and ask_human, then the call is proposed and a wait opened (never proposed to the tools), expiring after the TTL', () => {
    const h = new History().admitted({ tools: ALL }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, calls({ id: 'a', name: 'list_funds' }, { id: 'q', name: 'ask_human', args: { question: 'Which class?' } })))
      .then([
        completed(1),
        { type: 'tool.call.proposed', data: { toolCallId: 'a', name: 'list_funds', argumentsText: '{}', turn: 1 } },
        {
          type: 'wait.opened',
          data: {
            waitId: waitIdOf(h.runId, 'q'),
            toolCallId: 'q',
            turn: 1,
            question: 'Which class?',
            expiresAt: new Date(NOW.getTime() + TTL).toISOString(),
          },
        },
      ]);
  });

  it('the wait never outlives the Run: its expiry is capped by the deadline', () => {
    const deadlineAt = new Date(NOW.getTime() + 5_000).toISOString();
    const h = new History().admitted({ tools: ALL, deadlineAt }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    const [, opened] = runtime
      .given(h)
      .when(ended(1, calls({ id: 'q', name: 'ask_human', args: { question: 'Which class?' } })))
      .then([completed(1), { type: 'wait.opened', data: expect.objectContaining({ expiresAt: deadlineAt }) }]);
    expect(opened).toBeDefined();
  });

  /** Turn 1 proposed `list_funds` (a) and asked the human "Which class?" (q): the Run is parked on that wait. */
  const parkedOnQuestion = () =>
    new History()
      .admitted({ tools: ALL })
      .turn(1, {
        calls: [
          { id: 'a', name: 'list_funds' },
          { id: 'q', name: 'ask_human', args: '{"question":"Which class?"}' },
        ],
      })
      .proposed(1, 'a', 'list_funds')
      .waitOpened(1, 'q', 'Which class?');

  it('given the wait unanswered (its batch receipts in or not), when woken, then nothing: no model request while parked', () => {
    const h = parkedOnQuestion();
    runtime.given(h).when(wake).thenNothing();
    runtime
      .given(h.dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded'))
      .when(wake)
      .thenNothing();
  });

  it('given the answer recorded (the wake) and every receipt, when woken, then the next turn is requested; without the receipt, it waits for it', () => {
    const base = () => parkedOnQuestion().waitAnswered('q', 'Class A');
    runtime.given(base()).when(wake).thenNothing();
    runtime
      .given(base().dispatched('a', 'list_funds').receipt('a', 'list_funds', 'succeeded'))
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
  });

  it('given a completed turn whose wait was not recorded (a crash between appends), when woken, then the same wait is opened', () => {
    const h = new History().admitted({ tools: ALL }).turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which class?"}' }] });
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'wait.opened', data: expect.objectContaining({ waitId: waitIdOf(h.runId, 'q'), question: 'Which class?' }) }]);
  });

  it('a parking call that cannot park is resolved at once: not granted (denied), bad arguments (failed), a second one in the turn (denied); the Run goes on (K8)', () => {
    const h = new History()
      .admitted({ tools: ['list_funds', 'ask_human'] })
      .turn(1, {
        calls: [
          { id: 's', name: 'spawn_subagent', args: '{"question":"sub"}' },
          { id: 'b', name: 'ask_human', args: '{"question":"  "}' },
          { id: 'q', name: 'ask_human', args: '{"question":"first"}' },
          { id: 'r', name: 'ask_human', args: '{"question":"second"}' },
        ],
      })
      .waitOpened(1, 'q', 'first')
      .waitAnswered('q', 'yes');
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
    const tool = (id: string) => {
      const m = buildMessages(h.facts, new Map()).find((x) => x.role === 'tool' && x.tool_call_id === id);
      return JSON.parse(m!.content as string) as { status: string; error?: { code: string }; result?: unknown };
    };
    expect(tool('s')).toMatchObject({ status: 'denied', error: { code: 'not_granted' } });
    expect(tool('b')).toMatchObject({ status: 'failed', error: { code: 'bad_arguments' } });
    expect(tool('r')).toMatchObject({ status: 'denied', error: { code: 'one_park_per_turn' } });
    expect(tool('q')).toMatchObject({ status: 'succeeded', result: { answer: 'yes', answeredBy: 'ana' } });
  });

  it('the parking tools are offered to the model only when in the grant', () => {
    expect(toolDefinitions(['list_funds']).map((t) => (t as { function: { name: string } }).function.name)).toEqual(['list_funds']);
    expect(toolDefinitions(ALL).map((t) => (t as { function: { name: string } }).function.name)).toEqual(ALL);
  });
});

describe('runtime decide: a child Run is carved from what the parent has left (K7, K10)', () => {
  it('given turn 1 of 8 model requests and one ordinary call of 16, when it spawns a sub-agent, then the child gets 3 requests, 7 tool calls, half the time left, no parking tools', () => {
    const deadlineAt = new Date(NOW.getTime() + 600_000).toISOString();
    const h = new History().admitted({ tools: ALL, deadlineAt }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, calls({ id: 'a', name: 'list_funds' }, { id: 's', name: 'spawn_subagent', args: { question: 'What does DIA hold?' } })))
      .then([
        completed(1),
        { type: 'tool.call.proposed', data: expect.objectContaining({ toolCallId: 'a' }) },
        {
          type: 'child.run.requested',
          data: {
            childRunId: childIdOf(h, 's'),
            clientMessageId: childClientMessageId(h.runId, 's'),
            toolCallId: 's',
            turn: 1,
            question: 'What does DIA hold?',
            grant: { tools: ['list_funds', 'get_holdings'], model: 'scripted' },
            limits: { maxModelRequests: 3, maxToolCalls: 7, deadlineAt: new Date(NOW.getTime() + 300_000).toISOString() },
          },
        },
      ]);
  });

  it('given too few model requests left to carve one and keep one, then the spawn is denied (no_budget_for_child) and nothing parks', () => {
    const h = new History().admitted({ tools: ALL, maxModelRequests: 2 }).add('model.turn.requested', 1, { turn: 1, model: 'm' });
    runtime
      .given(h)
      .when(ended(1, calls({ id: 's', name: 'spawn_subagent', args: { question: 'sub' } })))
      .then([completed(1)]);
    const after = new History()
      .admitted({ tools: ALL, maxModelRequests: 2 })
      .turn(1, { calls: [{ id: 's', name: 'spawn_subagent', args: '{"question":"sub"}' }] });
    const m = buildMessages(after.facts, new Map()).find((x) => x.role === 'tool');
    expect(JSON.parse(m!.content as string)).toMatchObject({ status: 'denied', error: { code: 'no_budget_for_child' } });
  });

  it('given the child pending, when woken, then nothing; given its result (the wake), then the next turn, and the carve counts against the limit', () => {
    const h = new History()
      .admitted({ tools: ALL, maxModelRequests: 5 })
      .turn(1, { calls: [{ id: 's', name: 'spawn_subagent', args: '{"question":"sub"}' }] })
      .childRequested(1, 's', 'sub', { maxModelRequests: 2 });
    runtime.given(h).when(wake).thenNothing();
    const childRunId = childIdOf(h, 's');
    h.childSettled(childRunId, 's', 'completed', 'the child answer');
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 2, model: 'm' } }]);
    const m = buildMessages(h.facts, new Map()).find((x) => x.role === 'tool');
    expect(JSON.parse(m!.content as string)).toEqual({
      status: 'succeeded',
      result: { childRunId, outcome: 'completed', answer: 'the child answer' },
    });
    // 2 turns used + 2 carved = 4 of 5: one more; then 3 + 2 = 5: the limit
    h.turn(2, { calls: [{ id: 'x', name: 'list_funds' }] })
      .proposed(2, 'x', 'list_funds')
      .dispatched('x', 'list_funds')
      .receipt('x', 'list_funds', 'succeeded');
    runtime
      .given(h)
      .when(wake)
      .then([{ type: 'model.turn.requested', data: { turn: 3, model: 'm' } }]);
    h.turn(3, { calls: [{ id: 'y', name: 'list_funds' }] })
      .proposed(3, 'y', 'list_funds')
      .dispatched('y', 'list_funds')
      .receipt('y', 'list_funds', 'succeeded');
    runtime
      .given(h)
      .when(wake)
      .then([
        {
          type: 'run.execution.finished',
          data: { reason: 'model-request-limit', detail: '3 of 5 model requests used (+2 carved for child Runs)', answerTurn: null },
        },
      ]);
  });

  it('a child that did not complete is shown to the model as failed with its outcome and reason', () => {
    const h = new History()
      .admitted({ tools: ALL })
      .turn(1, { calls: [{ id: 's', name: 'spawn_subagent', args: '{"question":"sub"}' }] })
      .childRequested(1, 's', 'sub');
    h.childSettled(childIdOf(h, 's'), 's', 'interrupted');
    const m = buildMessages(h.facts, new Map()).find((x) => x.role === 'tool');
    expect(JSON.parse(m!.content as string)).toMatchObject({ status: 'failed', error: { code: 'child_interrupted' } });
  });
});

describe('a wake whose lease a lost holder still holds after parking (K6, K10)', () => {
  const holder = { service: 'runtime', instance: 'i-1' };
  const parked = () =>
    new History()
      .admitted({ tools: ALL })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
      .waitOpened(1, 'q', 'Which?');
  const held = { state: 'held' };

  it('is held back for recovery while the lease is held or released stopping and the log shows the park at the last turn with the wake recorded', () => {
    const woken = parked().waitAnswered('q', 'A').facts;
    expect(wakeAwaitsRecovery(woken, held)).toBe(true);
    expect(wakeAwaitsRecovery(woken, { state: 'released', reason: 'stopping' })).toBe(true);
  });

  it('is not held back when there is nothing to take yet, the lease is parked, finished or fenced, or the Run continues at a later turn', () => {
    expect(wakeAwaitsRecovery(parked().facts, held)).toBe(false); // not woken: nothing to continue yet
    const woken = parked().waitAnswered('q', 'A');
    expect(wakeAwaitsRecovery(woken.facts, { state: 'released', reason: 'parked' })).toBe(false); // taken at once instead
    expect(wakeAwaitsRecovery(woken.facts, { state: 'released', reason: 'finished' })).toBe(false);
    expect(wakeAwaitsRecovery(woken.facts, { state: 'fenced' })).toBe(false);
    const continued = woken
      .add('lease.granted', 'lease/2', { epoch: 2, holder, ttlMs: 1500 })
      .add('model.turn.requested', 2, { turn: 2, model: 'm' });
    expect(wakeAwaitsRecovery(continued.facts, held)).toBe(false);
  });

  it('a holder whose epoch recovery closed as parked, or that a later grant superseded, writes nothing more', () => {
    const h = parked()
      .waitAnswered('q', 'A')
      .add('lease.parked', 'parked/1', { epoch: 1, holder, reason: 'lease-expired', detail: 'expired', on: 'awaiting_human', woken: true });
    expect(epochSuperseded(h.facts, 1)).toBe(true);
    expect(epochSuperseded(h.facts, 2)).toBe(false);
    expect(epochSuperseded(parked().facts, 1)).toBe(false);
    expect(epochSuperseded(h.add('lease.granted', 'lease/2', { epoch: 2, holder, ttlMs: 1500 }).facts, 1)).toBe(true);
  });
});
