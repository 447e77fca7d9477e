/**
 * Recovery's advertised limits at their edges (K7, K10): the Run's deadline
 * (`RUNPLANE_RUN_DEADLINE_SECONDS`), the no-progress limit (`RUNPLANE_NO_PROGRESS_SECONDS`) and a
 * wait's expiry (`RUNPLANE_WAIT_TTL_SECONDS`): nothing 1 ms before, fenced at the edge and after.
 * Admission refuses an answer from the same instant (apps/admission/test/limits.test.ts), so a
 * wait is never both answered and expired.
 */
import { describe, expect, it } from '@jest/globals';
import { decide } from '@runplane/app-recovery';
import { spec } from '../../../test/support/decider-spec.js';
import { History } from '../../../test/support/history.js';

const recovery = spec(decide);
const holder = { service: 'runtime', instance: 'i-1' };
const ms = (iso: string, delta: number) => new Date(Date.parse(iso) + delta);
const fencedFor = (reason: string) =>
  (['tools', 'runtime'] as const).map((fencedSubject) => ({
    type: 'run.fenced' as const,
    data: expect.objectContaining({ fencedSubject, reason }),
  })) as never;

describe('the Run deadline: fenced at it, not before', () => {
  const deadlineAt = '2026-01-01T00:10:00.000Z';
  const h = () => new History().admitted({ deadlineAt });
  it('1 ms before: nothing; at it and 1 ms after: fenced deadline', () => {
    recovery.given(h()).when({ type: 'DeadlinePassed' }, ms(deadlineAt, -1)).thenNothing();
    recovery.given(h()).when({ type: 'DeadlinePassed' }, new Date(deadlineAt)).then(fencedFor('deadline'));
    recovery.given(h()).when({ type: 'DeadlinePassed' }, ms(deadlineAt, 1)).then(fencedFor('deadline'));
  });
});

describe('RUNPLANE_NO_PROGRESS_SECONDS: fenced when exactly the limit has passed without progress', () => {
  // admitted at 23:00:01 (History's clock), 60 s limit: due at 23:01:01
  const due = '2025-12-31T23:01:01.000Z';
  const h = () =>
    new History()
      .admitted({ noProgressSeconds: 60 })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .add('model.turn.requested', 1, { turn: 1, model: 'scripted' });
  it('1 ms before: nothing; at it and 1 ms after: fenced no-progress', () => {
    recovery.given(h()).when({ type: 'NoProgress' }, ms(due, -1)).thenNothing();
    recovery.given(h()).when({ type: 'NoProgress' }, new Date(due)).then(fencedFor('no-progress'));
    recovery.given(h()).when({ type: 'NoProgress' }, ms(due, 1)).then(fencedFor('no-progress'));
  });
});

describe('a wait expires at its expiresAt', () => {
  const expiresAt = '2026-01-01T00:10:00.000Z';
  const parked = () =>
    new History()
      .admitted({ tools: ['list_funds', 'ask_human'] })
      .add('lease.granted', 'lease/1', { epoch: 1, holder, ttlMs: 1500 })
      .turn(1, { calls: [{ id: 'q', name: 'ask_human', args: '{"question":"Which?"}' }] })
      .waitOpened(1, 'q', 'Which?', expiresAt);
  it('1 ms before: nothing; at it and 1 ms after: fenced wait-expired', () => {
    recovery.given(parked()).when({ type: 'WaitExpired' }, ms(expiresAt, -1)).thenNothing();
    recovery.given(parked()).when({ type: 'WaitExpired' }, new Date(expiresAt)).then(fencedFor('wait-expired'));
    recovery.given(parked()).when({ type: 'WaitExpired' }, ms(expiresAt, 1)).then(fencedFor('wait-expired'));
  });
});
