import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-recovery';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const lost = { type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' } as const;

describe('recovery decide: a lost lease fences the execution (K6, K10)', () => {
  it('given a turn in flight and a dispatched call without receipt, when the lease is lost, then both executor subjects are fenced (tools first, runtime last: the lifecycle wakes on it), naming what is uncertain', () => {
    const h = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded')
      .turn(2, { calls: [{ id: 'b', name: 'get_holdings' }] })
      .proposed(2, 'b', 'get_holdings')
      .dispatched('b', 'get_holdings')
      .add('model.turn.requested', 3, { turn: 3, model: 'm' });
    const data = { epoch: 1, holder, reason: 'lease-expired', detail: 'expired' } as const;
    const uncertain = [
      { kind: 'model-turn', turn: 3 },
      { kind: 'tool-call', toolCallId: 'b', name: 'get_holdings' },
    ] as const;
    recovery
      .given(h)
      .when(lost)
      .then([
        { type: 'run.fenced', data: { fencedSubject: 'tools', ...data, uncertain: [...uncertain] } },
        { type: 'run.fenced', data: { fencedSubject: 'runtime', ...data, uncertain: [...uncertain] } },
      ]);
  });

  it('given the execution finished on its own, when the lease is lost, then nothing (nothing to fence)', () => {
    const h = new History()
      .admitted()
      .turn(1, { content: 'A.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    recovery.given(h).when(lost).thenNothing();
  });

  it('given a Run already fenced, when the loss is seen again, then nothing (fenced once)', () => {
    const h = new History()
      .admitted()
      .add('run.fenced', 'fence/1/runtime', { fencedSubject: 'runtime', epoch: 1, holder, reason: 'lease-expired', detail: 'x', uncertain: [] });
    recovery.given(h).when(lost).thenNothing();
  });

  it('recovery records no lease grant: the trigger does not exist any more (the runtime records its own with its first event)', () => {
    // @ts-expect-error LeaseObserved was removed with recovery's grant recording
    expect(() => decide(new History().admitted().facts, { type: 'LeaseObserved', epoch: 1, holder, ttlMs: 1500 }, new Date())).toThrow(
      /unknown trigger/,
    );
  });

  it('given a recorded cancel intent, when recovery sees it, then both executor subjects are fenced with reason canceled (epoch of the last lease, or 0)', () => {
    const h = new History().admitted().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null });
    recovery
      .given(h)
      .when({ type: 'CancelRequested' })
      .then([
        {
          type: 'run.fenced',
          data: { fencedSubject: 'tools', epoch: 0, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
        },
        {
          type: 'run.fenced',
          data: { fencedSubject: 'runtime', epoch: 0, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
        },
      ]);
    const leased = new History()
      .admitted()
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null });
    recovery
      .given(leased)
      .when({ type: 'CancelRequested' })
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', epoch: 1, holder, reason: 'canceled' }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', epoch: 1, holder, reason: 'canceled' }) },
      ]);
  });

  it('given a cancel fence half-written (the runtime appended its turn between the tools marker and the runtime one, whose append was refused), when retried, then only the runtime subject is fenced again, so the Run can settle (K9)', () => {
    const h = new History()
      .admitted()
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .add('model.turn.requested', 1, { turn: 1, model: 'm' })
      .add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null })
      .add('run.fenced', 'fence/1/tools', {
        fencedSubject: 'tools',
        epoch: 1,
        holder,
        reason: 'canceled',
        detail: 'canceled by the user',
        uncertain: [{ kind: 'model-turn', turn: 1 }],
      })
      .add('model.turn.completed', 1, { turn: 1, content: 'A.', toolCalls: [], finishReason: 'stop', usage: null });
    recovery
      .given(h)
      .when({ type: 'CancelRequested' })
      .then([
        {
          type: 'run.fenced',
          data: { fencedSubject: 'runtime', epoch: 1, holder, reason: 'canceled', detail: 'canceled by the user', uncertain: [] },
        },
      ]);
    recovery
      .given(
        h.add('run.fenced', 'refence', {
          fencedSubject: 'runtime',
          epoch: 1,
          holder,
          reason: 'canceled',
          detail: 'canceled by the user',
          uncertain: [],
        }),
      )
      .when({ type: 'CancelRequested' })
      .thenNothing();
  });
});

describe('recovery decide: a deadline passing while nobody executes the Run (K10)', () => {
  const deadlineAt = '2026-01-01T00:00:10.000Z';
  const passed = { type: 'DeadlinePassed' } as const;
  const after = new Date('2026-01-01T00:00:11.000Z');
  const before = new Date('2026-01-01T00:00:09.000Z');

  it('given an admitted Run nobody took, when its deadline passed, then both executor subjects are fenced with reason deadline, saying when (epoch 0, no holder)', () => {
    const data = {
      epoch: 0,
      holder: null,
      reason: 'deadline' as const,
      detail: `deadline ${deadlineAt} passed (no runtime took the Run)`,
      uncertain: [],
    };
    recovery
      .given(new History().admitted({ deadlineAt }))
      .when(passed, after)
      .then([
        { type: 'run.fenced', data: { fencedSubject: 'tools', ...data, uncertain: [] } },
        { type: 'run.fenced', data: { fencedSubject: 'runtime', ...data, uncertain: [] } },
      ]);
  });

  it('given a held lease and a dispatched call without receipt, when the deadline passed, then it is fenced under that epoch, naming the call as uncertain', () => {
    const h = new History()
      .admitted({ deadlineAt })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings');
    recovery
      .given(h)
      .when(passed, after)
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', epoch: 1, reason: 'deadline' }) },
        {
          type: 'run.fenced',
          data: expect.objectContaining({
            fencedSubject: 'runtime',
            epoch: 1,
            holder,
            reason: 'deadline',
            detail: expect.stringContaining(deadlineAt),
            uncertain: [{ kind: 'tool-call', toolCallId: 'a', name: 'get_holdings' }],
          }),
        },
      ]);
  });

  it('given the deadline not yet passed, then nothing', () => {
    recovery.given(new History().admitted({ deadlineAt })).when(passed, before).thenNothing();
  });

  it('given the Run finished, fenced or settled, when its deadline passed, then nothing', () => {
    const finished = new History()
      .admitted({ deadlineAt })
      .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null });
    recovery.given(finished).when(passed, after).thenNothing();
    const fenced = new History()
      .admitted({ deadlineAt })
      .add('run.fenced', 'fence/0/runtime', { fencedSubject: 'runtime', epoch: 0, holder: null, reason: 'canceled', detail: 'x', uncertain: [] });
    recovery.given(fenced).when(passed, after).thenNothing();
    const settled = new History().admitted({ deadlineAt }).add('run.settled', 'settlement', {
      outcome: 'failed',
      reason: 'x',
      passageIds: [],
      receipts: [],
      usage: { modelRequests: 0, toolCalls: 0, promptTokens: 0, completionTokens: 0 },
    });
    recovery.given(settled).when(passed, after).thenNothing();
  });
});

describe("recovery decide: the executors' subjects are closed before a settlement unless the execution closed itself (K6, K9; recovery off the happy path)", () => {
  const finishedRun = () =>
    new History()
      .admitted()
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { content: 'A.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
  /** Finished at its deadline with call `a` proposed and dispatched but no receipt yet. */
  const finishedInFlight = () =>
    new History()
      .admitted()
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .dispatched('a', 'get_holdings')
      .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null });
  const finishedEvent = { type: 'ExecutionFinished' } as const;

  it('given an execution that finished on its own with every proposed call receipted, when recovery sees it, then nothing: no settling fence on the happy path (the Run closes itself)', () => {
    recovery.given(finishedRun()).when(finishedEvent).thenNothing();
    const withTools = new History()
      .admitted()
      .turn(1, { calls: [{ id: 'a', name: 'list_funds' }] })
      .proposed(1, 'a', 'list_funds')
      .dispatched('a', 'list_funds')
      .receipt('a', 'list_funds', 'succeeded')
      .turn(2, { content: 'A.' })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 2 });
    expect(withTools.facts.closesItself).toBe(true);
    recovery.given(withTools).when(finishedEvent).thenNothing();
  });

  it('given a call proposed but never dispatched when the execution stopped, then both subjects are fenced with reason settling, under the last epoch (a stale dispatch decided before the finish could still land)', () => {
    const h = new History()
      .admitted()
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'a', name: 'get_holdings' }] })
      .proposed(1, 'a', 'get_holdings')
      .add('run.execution.finished', 'finished', { reason: 'deadline', detail: 'x', answerTurn: null });
    const data = {
      epoch: 1,
      holder,
      reason: 'settling',
      detail: "execution finished (deadline): the executors' subjects are closed before the settlement",
    } as const;
    const events = recovery
      .given(h)
      .when(finishedEvent)
      .then([
        { type: 'run.fenced', data: { fencedSubject: 'tools', ...data, uncertain: [] } },
        { type: 'run.fenced', data: { fencedSubject: 'runtime', ...data, uncertain: [] } },
      ]);
    expect(events.every((e) => e.owner === 'recovery')).toBe(true);
  });

  it('given a call dispatched without a receipt when the execution stopped at its deadline, then the closing fence names it uncertain', () => {
    recovery
      .given(finishedInFlight())
      .when(finishedEvent)
      .then([
        {
          type: 'run.fenced',
          data: expect.objectContaining({
            fencedSubject: 'tools',
            epoch: 1,
            holder,
            reason: 'settling',
            uncertain: [{ kind: 'tool-call', toolCallId: 'a', name: 'get_holdings' }],
          }),
        },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', reason: 'settling' }) },
      ]);
  });

  it('given the receipt of the in-flight call recorded after the finish, then the subjects are still fenced: whether the Run closes itself is fixed at its finish', () => {
    const h = finishedInFlight().receipt('a', 'get_holdings', 'succeeded');
    expect(h.facts.closesItself).toBe(false);
    recovery
      .given(h)
      .when(finishedEvent)
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', reason: 'settling', uncertain: [] }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', reason: 'settling', uncertain: [] }) },
      ]);
  });

  it('given the subjects already closed, a Run not finished, or a settled Run, then nothing', () => {
    recovery.given(finishedInFlight().closed()).when(finishedEvent).thenNothing();
    recovery
      .given(new History().admitted().add('model.turn.requested', 1, { turn: 1, model: 'm' }))
      .when(finishedEvent)
      .thenNothing();
    const settled = finishedInFlight().settled('failed', 'x');
    recovery.given(settled).when(finishedEvent).thenNothing();
  });

  it('given only the tools subject closed (a retry after the runtime fence failed), then only the runtime subject is fenced', () => {
    const h = finishedInFlight().add('run.fenced', 'settling/tools', {
      fencedSubject: 'tools',
      epoch: 1,
      holder,
      reason: 'settling',
      detail: 'x',
      uncertain: [],
    });
    recovery
      .given(h)
      .when(finishedEvent)
      .then([{ type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', reason: 'settling' }) }]);
  });

  it('given a fault fence on the tools subject and then the runtime finished on its own with every call receipted (the fence raced the finish), then nothing more: the Run closes itself', () => {
    const h = finishedRun();
    const raced = new History()
      .admitted()
      .turn(1, { content: 'A.' })
      .add('run.fenced', 'fence/1/tools', { fencedSubject: 'tools', epoch: 1, holder, reason: 'lease-expired', detail: 'x', uncertain: [] })
      .add('run.execution.finished', 'finished', { reason: 'answered', detail: '', answerTurn: 1 });
    expect(h.facts.closesItself && raced.facts.closesItself).toBe(true);
    recovery.given(raced).when(finishedEvent).thenNothing();
    recovery.given(raced).when(lost).thenNothing();
  });
});
