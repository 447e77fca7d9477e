/**
 * Recovery's rules for a handed-over Run (a drain, K6, K10): the draining holder recorded the
 * transfer at a safe point under its own epoch, so its lease, lost or released, is never fenced;
 * a handover nobody takes is still caught by the no-progress and deadline rules.
 */
import { describe, expect, it } from '@jest/globals';
import { decide, lostAfterHandover } from '@runplane/app-recovery';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const handedOver = (noProgressSeconds?: number, deadlineAt?: string) =>
  new History()
    .admitted({ ...(noProgressSeconds ? { noProgressSeconds } : {}), ...(deadlineAt ? { deadlineAt } : {}) })
    .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
    .turn(1, { calls: [{ id: 'c1', name: 'list_funds' }] })
    .proposed(1, 'c1', 'list_funds')
    .add('run.handed_over', 'handover/1', { epoch: 1, holder, reason: 'drain', pendingToolCalls: 1 });

describe('recovery decide: a handed-over Run is not an execution to fence', () => {
  it('given the Run handed over at epoch 1, when that lease expires or its runtime stopped before releasing it handover, then nothing is fenced', () => {
    recovery.given(handedOver()).when({ type: 'LeaseLost', epoch: 1, holder, reason: 'lease-expired', detail: 'expired' }).thenNothing();
    recovery.given(handedOver()).when({ type: 'LeaseLost', epoch: 1, holder, reason: 'runtime-stopped', detail: 'stopped' }).thenNothing();
    expect(lostAfterHandover(handedOver().facts, 1)).toBe(true);
  });

  it('given the Run handed over at epoch 1 and taken at epoch 2, when the holder of epoch 2 is lost, then the Run is fenced as usual', () => {
    const h = handedOver().add('lease.granted', 'lease/2', { epoch: 2, holder: { service: 'runtime', instance: 'i-2' }, ttlMs: 1500 });
    expect(lostAfterHandover(h.facts, 2)).toBe(false);
    const fences = recovery
      .given(h)
      .when({ type: 'LeaseLost', epoch: 2, holder: { service: 'runtime', instance: 'i-2' }, reason: 'lease-expired', detail: 'expired' })
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', epoch: 2, reason: 'lease-expired' }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', epoch: 2, reason: 'lease-expired' }) },
      ]);
    expect(fences).toHaveLength(2);
  });

  it('given a handover and a cancel after it, when the lease is lost, then the Run is fenced (a cancel is never waited out)', () => {
    const h = handedOver().add('run.cancel.requested', 'cancel', { requestedBy: 'ana', reason: null });
    expect(lostAfterHandover(h.facts, 1)).toBe(false);
  });

  it('given a handover nobody took, when its no-progress limit or its deadline passes, then it is fenced like any other Run', () => {
    const later = new Date('2026-01-01T00:10:00.000Z');
    recovery
      .given(handedOver(60))
      .when({ type: 'NoProgress' }, later)
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', reason: 'no-progress' }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', reason: 'no-progress' }) },
      ]);
    recovery
      .given(handedOver(undefined, '2026-01-01T00:05:00.000Z'))
      .when({ type: 'DeadlinePassed' }, later)
      .then([
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'tools', reason: 'deadline' }) },
        { type: 'run.fenced', data: expect.objectContaining({ fencedSubject: 'runtime', reason: 'deadline' }) },
      ]);
  });
});
