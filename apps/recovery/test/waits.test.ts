/** Recovery's rules for parked Runs (K6, K10): a parked Run loses nothing when its lease goes; an unanswered wait is fenced at its expiry. */
import { describe, it } from '@jest/globals';
import { decide } from '@runplane/app-recovery';
import { bothFenced, spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const parked = () =>
  new History()
    .admitted({ tools: ['list_funds', 'ask_human'] })
    .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
    .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
    .waitOpened(1, 'q', 'Which?', '2026-01-01T00:10:00.000Z');

const leaseParked = (
  epoch: number,
  on: 'awaiting_human' | 'awaiting_child',
  woken: boolean,
  reason: 'lease-expired' | 'runtime-stopped' = 'lease-expired',
  detail = 'expired',
) => ({ type: 'lease.parked' as const, data: { epoch, holder, reason, detail, on, woken } });

describe('recovery decide: a parked Run is not an execution to fence (K10)', () => {
  it('given a parked Run whose holder died before releasing its lease, when the lease expires or its runtime stops, then the epoch is closed as parked, not fenced', () => {
    recovery
      .given(parked())
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .then([leaseParked(1, 'awaiting_human', false)]);
    recovery
      .given(parked())
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'runtime-stopped', detail: 'stopped' })
      .then([leaseParked(1, 'awaiting_human', false, 'runtime-stopped', 'stopped')]);
  });

  it("given the answer accepted (wait.answered) before the dead holder's lease expired, when it expires, then the Run is still treated as parked (woken), never fenced: the accepted wake is not thrown away", () => {
    recovery
      .given(parked().waitAnswered('q', 'A'))
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .then([leaseParked(1, 'awaiting_human', true)]);
  });

  it("given a parent parked on a child whose settlement was recorded before its dead holder's lease expired, when it expires, then parked (woken), not fenced", () => {
    const h = new History()
      .admitted({ tools: ['list_funds', 'spawn_subagent'] })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 's', name: 'spawn_subagent', args: '{"question":"Sub?"}' }] })
      .childRequested(1, 's', 'Sub?');
    const childRunId = h.facts.children.keys().next().value as string;
    recovery
      .given(h)
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .then([leaseParked(1, 'awaiting_child', false)]);
    recovery
      .given(h.childSettled(childRunId, 's', 'completed', 'the child answer'))
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .then([leaseParked(1, 'awaiting_child', true)]);
  });

  it('given the epoch already closed as parked, when the same lease is seen lost again, then nothing', () => {
    recovery
      .given(
        parked()
          .waitAnswered('q', 'A')
          .add('lease.parked', 'parked/1', { epoch: 1, holder, reason: 'lease-expired', detail: 'expired', on: 'awaiting_human', woken: true }),
      )
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .thenNothing();
  });

  it('given the runtime died after the parking turn completed but before wait.opened was recorded, when the lease expires, then fenced: the Run never parked (interrupted)', () => {
    const h = new History()
      .admitted({ tools: ['list_funds', 'ask_human'] })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] });
    recovery
      .given(h)
      .when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' })
      .then(
        (['tools', 'runtime'] as const).map((fencedSubject) => ({
          type: 'run.fenced' as const,
          data: { fencedSubject, epoch: 1, holder, reason: 'lease-expired' as const, detail: 'expired', uncertain: [] },
        })),
      );
  });

  it('given the wake taken at epoch 2 by a runtime that died before requesting the next turn, when that lease expires, then epoch 2 is closed as parked (nothing executed since the park)', () => {
    recovery
      .given(parked().waitAnswered('q', 'A').add('lease.granted', 'lease/2', { epoch: 2, holder, ttlMs: 1500 }))
      .when({ type: 'LeaseLost', epoch: 2, holder, reason: 'lease-expired', detail: 'expired' })
      .then([leaseParked(2, 'awaiting_human', true)]);
  });

  it('given its wake recorded and the Run taken again, a lost lease fences as usual', () => {
    const h = parked()
      .waitAnswered('q', 'A')
      .add('lease.granted', 'lease/2', { epoch: 2, holder, ttlMs: 1500 })
      .add('model.turn.requested', 2, { turn: 2, model: 'm' });
    recovery
      .given(h)
      .when({ type: 'LeaseLost', epoch: 2, holder, reason: 'lease-expired', detail: 'expired' })
      .then(
        bothFenced({
          epoch: 2,
          holder,
          reason: 'lease-expired',
          detail: 'expired',
          uncertain: [{ kind: 'model-turn', turn: 2 }],
        }),
      );
  });
});

describe('recovery decide, WaitExpired (K10)', () => {
  it('given the wait not yet expired, or answered, or the Run canceled, then nothing', () => {
    recovery.given(parked()).when({ type: 'WaitExpired' }, new Date('2026-01-01T00:09:59.000Z')).thenNothing();
    recovery.given(parked().waitAnswered('q', 'A')).when({ type: 'WaitExpired' }, new Date('2026-01-01T00:11:00.000Z')).thenNothing();
    recovery
      .given(parked().add('run.cancel.requested', 'cancel', { requestedBy: null, reason: null }))
      .when({ type: 'WaitExpired' }, new Date('2026-01-01T00:11:00.000Z'))
      .thenNothing();
  });

  it('given the wait expired unanswered, then both executor subjects are fenced wait-expired', () => {
    const h = parked();
    const waitId = h.facts.waits.keys().next().value as string;
    recovery
      .given(h)
      .when({ type: 'WaitExpired' }, new Date('2026-01-01T00:10:01.000Z'))
      .then(
        bothFenced({
          epoch: 1,
          holder,
          reason: 'wait-expired',
          detail: `wait ${waitId} ("Which?") expired unanswered at 2026-01-01T00:10:00.000Z`,
          uncertain: [],
        }),
      );
  });
});

describe('recovery decide: a parked Run still has a deadline (K7, K10)', () => {
  it('given a parked Run past its deadline, when the deadline sweep decides it, then it is fenced deadline (the lifecycle settles it failed)', () => {
    const h = new History()
      .admitted({ tools: ['ask_human'], deadlineAt: '2026-01-01T00:05:00.000Z' })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
      .waitOpened(1, 'q', 'Which?', '2026-01-01T00:05:00.000Z');
    recovery.given(h).when({ type: 'DeadlinePassed' }, new Date('2026-01-01T00:04:00.000Z')).thenNothing();
    recovery
      .given(h)
      .when({ type: 'DeadlinePassed' }, new Date('2026-01-01T00:05:01.000Z'))
      .then(
        bothFenced({
          epoch: 1,
          holder,
          reason: 'deadline',
          detail: 'deadline 2026-01-01T00:05:00.000Z passed (the Run was parked awaiting_human)',
          uncertain: [],
        }),
      );
  });
});
