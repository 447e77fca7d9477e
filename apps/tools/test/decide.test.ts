import { describe, expect, it } from '@jest/globals';
import { decide, INLINE_RESULT_LIMIT, type ToolOutcome } from '@runplane/app-tools';
import { sha256Hex } from '@runplane/contracts';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const tools = spec(decide);
const wake = { type: 'Wake' } as const;
const executed = (toolCallId: string, outcome: ToolOutcome) =>
  ({ type: 'ToolExecuted', toolCallId, outcome, durationMs: 12, resultBucket: 'rp_results' }) as const;
const proposedA = () =>
  new History()
    .admitted()
    .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
    .proposed(1, 'a', 'list_funds');
const dispatchedA = () => proposedA().dispatched('a', 'list_funds');

describe('tools decide, Wake: every proposed call is executed at most once (K5)', () => {
  it('given a new proposal, then it is dispatched', () => {
    tools
      .given(proposedA())
      .when(wake)
      .then([{ type: 'tool.call.dispatched', data: { toolCallId: 'a', name: 'list_funds' } }]);
  });

  it('given a dispatched call whose claim is gone (executor died), then it is marked unknown, never re-run', () => {
    tools
      .given(dispatchedA())
      .when({ type: 'Wake', claims: { a: null } })
      .then([
        {
          type: 'tool.call.receipt',
          data: {
            toolCallId: 'a',
            name: 'list_funds',
            status: 'unknown',
            durationMs: 0,
            effect: 'read-only',
            error: { code: 'executor_lost', message: expect.any(String) as never },
          },
        },
      ]);
  });

  it('given a dispatched call whose claim expired, then it is marked unknown (K5)', () => {
    tools
      .given(dispatchedA())
      .when({ type: 'Wake', claims: { a: { holder: 'tools-1', expiresAt: '2025-12-31T23:59:59.000Z' } } })
      .then([
        {
          type: 'tool.call.receipt',
          data: expect.objectContaining({ status: 'unknown', error: expect.objectContaining({ code: 'executor_lost' }) }),
        },
      ]);
  });

  it('given a dispatched call whose executor holds a live claim, then nothing: it is not declared unknown while alive (K5)', () => {
    tools
      .given(dispatchedA())
      .when({ type: 'Wake', claims: { a: { holder: 'tools-1', expiresAt: '2026-01-01T00:00:05.000Z' } } })
      .thenNothing();
  });

  it('given a dispatched call the adapter did not look up (a redelivered proposal racing the dispatch), then nothing', () => {
    tools.given(dispatchedA()).when(wake).thenNothing();
  });

  describe('the model asks again for a call whose outcome is unknown in this Run (K5)', () => {
    const askedAgain = (name: string, args: string, reconciled = false) => {
      const h = new History()
        .admitted({ tools: ['record_effect', 'get_holdings'] })
        .turn(1, { calls: [{ id: 'e1', name, args }] })
        .proposed(1, 'e1', name, args)
        .dispatched('e1', name)
        .receipt('e1', name, 'unknown');
      if (reconciled) h.reconciled('e1', name);
      return h.turn(2, { calls: [{ id: 'e2', name, args }] }).proposed(2, 'e2', name, args);
    };

    it('given an external effect with the same arguments, then it is denied, never dispatched: its outcome may have taken effect', () => {
      tools
        .given(askedAgain('record_effect', '{"tag":"pay-invoice-42"}'))
        .when(wake)
        .then([
          {
            type: 'tool.call.receipt',
            data: expect.objectContaining({
              toolCallId: 'e2',
              status: 'denied',
              error: {
                code: 'unknown_effect_needs_reconciliation',
                message: expect.stringContaining('[e1] has an unknown outcome in this Run') as never,
              },
            }),
          },
        ]);
    });

    it('given other arguments, then it is dispatched: it is another effect', () => {
      const h = new History()
        .admitted({ tools: ['record_effect'] })
        .turn(1, { calls: [{ id: 'e1', name: 'record_effect', args: '{"tag":"a"}' }] })
        .proposed(1, 'e1', 'record_effect', '{"tag":"a"}')
        .dispatched('e1', 'record_effect')
        .receipt('e1', 'record_effect', 'unknown')
        .turn(2, { calls: [{ id: 'e2', name: 'record_effect', args: '{"tag":"b"}' }] })
        .proposed(2, 'e2', 'record_effect', '{"tag":"b"}');
      tools
        .given(h)
        .when(wake)
        .then([{ type: 'tool.call.dispatched', data: { toolCallId: 'e2', name: 'record_effect' } }]);
    });

    it('given an operator reconciled the first, then the same call is dispatched', () => {
      tools
        .given(askedAgain('record_effect', '{"tag":"pay-invoice-42"}', true))
        .when(wake)
        .then([{ type: 'tool.call.dispatched', data: { toolCallId: 'e2', name: 'record_effect' } }]);
    });

    it('given a read-only tool, then it is dispatched: a read may be asked again', () => {
      tools
        .given(askedAgain('get_holdings', '{"fund":"DIA"}'))
        .when(wake)
        .then([{ type: 'tool.call.dispatched', data: { toolCallId: 'e2', name: 'get_holdings' } }]);
    });
  });

  it('given an unknown external-effect call, then a Wake never dispatches it again, whatever its label', () => {
    const h = new History()
      .admitted({ tools: ['record_effect'] })
      .turn(1, { calls: [{ id: 'e', name: 'record_effect' }] })
      .proposed(1, 'e', 'record_effect')
      .dispatched('e', 'record_effect')
      .receipt('e', 'record_effect', 'unknown');
    tools
      .given(h)
      .when({ type: 'Wake', claims: { e: null } })
      .thenNothing();
  });

  it('given a receipt, then nothing more is owed', () => {
    tools
      .given(dispatchedA().receipt('a', 'list_funds', 'failed'))
      .when(wake)
      .thenNothing();
  });

  it('given a tool outside the grant, then it is denied without dispatch', () => {
    const h = new History()
      .admitted({ tools: ['list_funds'] })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings');
    tools
      .given(h)
      .when(wake)
      .then([
        {
          type: 'tool.call.receipt',
          data: expect.objectContaining({ toolCallId: 'a', status: 'denied', error: expect.objectContaining({ code: 'not_granted' }) }),
        },
      ]);
  });

  it('given arguments that are not JSON, then the call fails without being dispatched (nothing executed)', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings', args: '{"fund":' }] })
      .proposed(1, 'a', 'get_holdings', '{"fund":');
    tools
      .given(h)
      .when(wake)
      .then([
        { type: 'tool.call.receipt', data: expect.objectContaining({ status: 'failed', error: expect.objectContaining({ code: 'bad_arguments' }) }) },
      ]);
  });

  it('given the tool-call limit, then calls past it are denied, earlier ones dispatched', () => {
    const h = new History()
      .admitted({ maxToolCalls: 1 })
      .turn(1, {
        calls: [
          { id: 'a', name: 'list_funds' },
          { id: 'b', name: 'list_funds' },
        ],
      })
      .proposed(1, 'a', 'list_funds')
      .proposed(1, 'b', 'list_funds');
    tools
      .given(h)
      .when(wake)
      .then([
        { type: 'tool.call.dispatched', data: { toolCallId: 'a', name: 'list_funds' } },
        {
          type: 'tool.call.receipt',
          data: expect.objectContaining({ toolCallId: 'b', status: 'denied', error: expect.objectContaining({ code: 'tool_call_limit' }) }),
        },
      ]);
  });

  it('given the deadline passed, then a proposed call is denied, never dispatched (K7: nothing starts past it)', () => {
    const h = new History()
      .admitted({ deadlineAt: '2020-01-01T00:00:00.000Z' })
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds');
    tools
      .given(h)
      .when(wake)
      .then([
        {
          type: 'tool.call.receipt',
          data: expect.objectContaining({ toolCallId: 'a', status: 'denied', error: expect.objectContaining({ code: 'deadline' }) }),
        },
      ]);
  });

  it('given a settled Run, then nothing is dispatched', () => {
    const h = proposedA().settled('failed', 'x');
    tools.given(h).when(wake).thenNothing();
  });
});

describe('tools decide after a fence (K6)', () => {
  const fenced = (h: History) =>
    h.add('run.fenced', 'fence/1/tools', {
      fencedSubject: 'tools',
      epoch: 1,
      holder: { service: 'runtime', instance: 'i-1' },
      reason: 'lease-expired',
      detail: 'x',
      uncertain: [],
    });

  it('given a fenced Run, when a proposal arrives, then nothing is dispatched', () => {
    tools.given(fenced(proposedA())).when(wake).thenNothing();
  });

  it('given a call executing when the fence landed, when its outcome arrives, then the real outcome is still recorded, as a late observation: a fence never cancels an effect in flight, and the fenced subject stays closed', () => {
    const [late] = tools
      .given(fenced(dispatchedA()))
      .when(executed('a', { kind: 'returned', json: '{"funds":[]}' }))
      .then([{ type: 'tool.call.late_observed', data: expect.objectContaining({ toolCallId: 'a', status: 'succeeded', result: { funds: [] } }) }]);
    const h = fenced(dispatchedA());
    h.add('tool.call.late_observed', 'a', late!.data as never);
    expect(h.facts.closed.tools).toBe(true);
  });

  it('given the execution finished on its own (its deadline) with a call proposed but not dispatched, when tools wake, then nothing is dispatched', () => {
    tools
      .given(proposedA().add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null }))
      .when(wake)
      .thenNothing();
  });
});

describe('tools decide, ToolExecuted: one receipt with the real outcome', () => {
  it('given a dispatched call, when it returned a small result, then the receipt carries it inline', () => {
    tools
      .given(dispatchedA())
      .when(executed('a', { kind: 'returned', json: '{"funds":["SPY"]}' }))
      .then([
        {
          type: 'tool.call.receipt',
          data: { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: { funds: ['SPY'] }, durationMs: 12, effect: 'read-only' },
        },
      ]);
  });

  it('given a dispatched call, when it returned a large result, then the receipt refers to it by content digest', () => {
    const json = JSON.stringify({ rows: 'x'.repeat(INLINE_RESULT_LIMIT) });
    const sha = sha256Hex(json);
    tools
      .given(dispatchedA())
      .when(executed('a', { kind: 'returned', json }))
      .then([
        {
          type: 'tool.call.receipt',
          data: {
            toolCallId: 'a',
            name: 'list_funds',
            status: 'succeeded',
            resultRef: { bucket: 'rp_results', key: sha, sha256: sha, bytes: Buffer.byteLength(json) },
            durationMs: 12,
            effect: 'read-only',
          },
        },
      ]);
  });

  it('given a dispatched call, when it outlived its timeout, then its outcome is unknown, not failed and not retried (K5)', () => {
    tools
      .given(dispatchedA())
      .when(executed('a', { kind: 'timed-out', timeoutMs: 2000 }))
      .then([
        { type: 'tool.call.receipt', data: expect.objectContaining({ status: 'unknown', error: expect.objectContaining({ code: 'timeout' }) }) },
      ]);
  });

  it.each<[string, ToolOutcome, string]>([
    ['a known failure', { kind: 'failed', code: 'unknown_fund', message: 'no such fund' }, 'unknown_fund'],
    ['a crash', { kind: 'crashed', message: 'TypeError: x' }, 'tool_error'],
  ])('given a dispatched call, when it ended with %s, then the receipt is failed with the code (K8)', (_n, outcome, code) => {
    tools
      .given(dispatchedA())
      .when(executed('a', outcome))
      .then([{ type: 'tool.call.receipt', data: expect.objectContaining({ status: 'failed', error: expect.objectContaining({ code }) }) }]);
  });

  it('given a call already marked unknown, when its result arrives late, then a late observation is recorded, not a second receipt', () => {
    tools
      .given(dispatchedA().receipt('a', 'list_funds', 'unknown'))
      .when({ ...executed('a', { kind: 'returned', json: '{"funds":[]}' }), executor: 'tools-1' })
      .then([
        {
          type: 'tool.call.late_observed',
          data: { toolCallId: 'a', name: 'list_funds', status: 'succeeded', result: { funds: [] }, durationMs: 12, executor: 'tools-1' },
        },
      ]);
  });

  it('given a late observation already recorded, when the result is reported again, then nothing', () => {
    const h = dispatchedA()
      .receipt('a', 'list_funds', 'unknown')
      .add('tool.call.late_observed', 'a', {
        toolCallId: 'a',
        name: 'list_funds',
        status: 'failed',
        durationMs: 5,
        executor: 'x',
        error: { code: 'c', message: 'm' },
      });
    tools
      .given(h)
      .when(executed('a', { kind: 'returned', json: '{}' }))
      .thenNothing();
  });

  it('given an unknown call in a settled Run, when its result arrives late, then it is still recorded (the one fact after settlement)', () => {
    const h = dispatchedA()
      .receipt('a', 'list_funds', 'unknown')
      .add('run.settled', 'settlement', {
        outcome: 'completed',
        reason: 'answered',
        passageIds: [],
        receipts: [{ toolCallId: 'a', name: 'list_funds', status: 'unknown' }],
        usage: { modelRequests: 2, toolCalls: 1, promptTokens: 0, completionTokens: 0 },
      });
    tools
      .given(h)
      .when(executed('a', { kind: 'failed', code: 'injected_failure', message: 'boom' }))
      .then([
        {
          type: 'tool.call.late_observed',
          data: expect.objectContaining({ status: 'failed', error: { code: 'injected_failure', message: 'boom' } }),
        },
      ]);
    tools
      .given(h)
      .when({ type: 'Wake', claims: { a: null } })
      .thenNothing();
  });

  it('given an unknown call, when the late run also timed out, then nothing (no outcome to observe)', () => {
    tools
      .given(dispatchedA().receipt('a', 'list_funds', 'unknown'))
      .when(executed('a', { kind: 'timed-out', timeoutMs: 1000 }))
      .thenNothing();
  });

  it('given a call that was never dispatched, when an outcome is reported, then nothing', () => {
    tools
      .given(proposedA())
      .when(executed('a', { kind: 'returned', json: '{}' }))
      .thenNothing();
  });

  it("the decided events are the tools owner's", () => {
    const events = tools
      .given(proposedA())
      .when(wake)
      .then([expect.anything() as never]);
    expect(events[0]!.owner).toBe('tools');
  });
});
