import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-recovery';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const lost = { type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' } as const;

describe('recovery decide: a lost lease fences the execution (K6, K10)', () => {
  it('given a turn in flight and a dispatched call without receipt, when the lease is lost, then both executor subjects are fenced, naming what is uncertain', () => {
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
        { type: 'run.fenced', data: { fencedSubject: 'runtime', ...data, uncertain: [...uncertain] } },
        { type: 'run.fenced', data: { fencedSubject: 'tools', ...data, uncertain: [...uncertain] } },
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

  it('given an admitted Run, when a lease grant is observed, then it is recorded once per epoch', () => {
    const observed = { type: 'LeaseObserved', epoch: 1, holder, ttlMs: 1500 } as const;
    recovery
      .given(new History().admitted())
      .when(observed)
      .then([{ type: 'lease.granted', data: { epoch: 1, holder, ttlMs: 1500 } }]);
    recovery
      .given(new History().admitted().add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 }))
      .when(observed)
      .thenNothing();
  });

  it('given a recorded cancel intent, when recovery sees it, then both executor subjects are fenced with reason canceled (epoch of the last lease, or 0)', () => {
    const h = new History().admitted().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null });
    recovery
      .given(h)
      .when({ type: 'CancelRequested' })
      .then([
        {
          type: 'run.fenced',
          data: { fencedSubject: 'runtime', epoch: 0, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
        },
        {
          type: 'run.fenced',
          data: { fencedSubject: 'tools', epoch: 0, holder: null, reason: 'canceled', detail: 'canceled by ana', uncertain: [] },
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
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', epoch: 1, holder, reason: 'canceled' }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', epoch: 1, holder, reason: 'canceled' }) },
      ]);
  });
});
