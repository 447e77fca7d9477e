/**
 * Given/when/then for what a failed lease renewal means (K6, K10): the decision the runtime takes
 * after a renewal throws, most often during a NATS restart. Only positive evidence that somebody
 * else changed the lease stops execution.
 */
import { describe, expect, it } from '@jest/globals';
import { renewalVerdict, type HeldLease, type LeaseEntry, type LeaseValue } from '@runplane/eventlog';

const me = { service: 'runtime', instance: 'runtime-a' };
const lease: HeldLease = { runId: 'r1', epoch: 3, revision: 10, ttlMs: 3_000 };
const entry = (value: LeaseValue, revision = 11): LeaseEntry => ({ runId: 'r1', value, revision, writtenAt: new Date('2026-11-30T10:00:00Z') });

describe('a renewal that failed', () => {
  it('given the bucket cannot be read (NATS unreachable), then the lease is kept and renewed on the next tick', () => {
    expect(renewalVerdict(lease, undefined, me.instance)).toEqual({ kind: 'retry' });
  });

  it('given the key is absent (store lost, or cleaned up after settlement), then it is retried; the log decides the Run', () => {
    expect(renewalVerdict(lease, null, me.instance)).toEqual({ kind: 'retry' });
  });

  it('given the entry is still ours at another revision (a renewal stored during the outage), then that revision is adopted', () => {
    expect(renewalVerdict(lease, entry({ state: 'held', epoch: 3, holder: me, ttlMs: 3_000 }, 12), me.instance)).toEqual({
      kind: 'adopt',
      revision: 12,
    });
  });

  it('given recovery fenced the lease, then it is lost: execution stops', () => {
    expect(renewalVerdict(lease, entry({ state: 'fenced', epoch: 3, holder: me }), me.instance)).toEqual({ kind: 'lost', state: 'fenced' });
  });

  it('given another instance holds it, or the same instance under another epoch, then it is lost', () => {
    const other = { service: 'runtime', instance: 'runtime-b' };
    expect(renewalVerdict(lease, entry({ state: 'held', epoch: 3, holder: other, ttlMs: 3_000 }), me.instance)).toEqual({
      kind: 'lost',
      state: 'held',
    });
    expect(renewalVerdict(lease, entry({ state: 'held', epoch: 4, holder: me, ttlMs: 3_000 }), me.instance)).toEqual({ kind: 'lost', state: 'held' });
  });

  it('given it was released meanwhile, then it is lost', () => {
    expect(renewalVerdict(lease, entry({ state: 'released', epoch: 3, holder: me, reason: 'finished' }), me.instance)).toEqual({
      kind: 'lost',
      state: 'released',
    });
  });
});
