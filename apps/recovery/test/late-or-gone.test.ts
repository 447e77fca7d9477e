/**
 * Recovery's "late or gone" rule (K6, K10): an expired lease whose holder process still beats is
 * late, not lost, for at most one more TTL; a holder without a fresh heartbeat is gone and fenced
 * at its lease's expiry, as before heartbeats existed.
 */
import { describe, expect, it } from '@jest/globals';
import { expiredLease, type ExpiringLease, type HolderHeartbeat } from '@runplane/app-recovery';

const TTL = 15_000;
const EXPIRES = Date.parse('2026-01-01T00:00:15.000Z');
const lease: ExpiringLease = { epoch: 3, holder: { service: 'runtime', instance: 'i-1' }, ttlMs: TTL, expiresAt: EXPIRES };

/** given the lease (expiring at EXPIRES) and the holder's heartbeat, when the sweep runs at `now`: the verdict. */
const given = (heartbeat: HolderHeartbeat | null) => ({
  when: (now: number) => ({ verdict: () => expiredLease(lease, heartbeat, now) }),
});

describe('recovery: the fence detail of a lease judged after recovery restarted', () => {
  it('given a lease that expired while recovery was down, when it is judged after the grace, then the detail states its own expiry and the judging time apart', () => {
    const judged = EXPIRES + 45_000;
    const verdict = expiredLease({ ...lease, expiresAt: judged, storedExpiresAt: EXPIRES }, null, judged + 1);
    expect(verdict.kind).toBe('gone');
    expect((verdict as { detail: string }).detail).toMatch(
      /^lease epoch 3 of i-1 expired at 2026-01-01T00:00:15\.000Z without a renewal \(judged from 2026-01-01T00:01:00\.000Z: recovery's grace after its own start or reconnection\)/,
    );
    // judged at its own expiry: one time, as before
    const plain = expiredLease({ ...lease, storedExpiresAt: EXPIRES }, null, EXPIRES + 1);
    expect((plain as { detail: string }).detail).toMatch(/^lease epoch 3 of i-1 expired at 2026-01-01T00:00:15\.000Z without a renewal;/);
  });
});

describe('recovery: an expired lease is late while its holder beats, gone when it does not (K10)', () => {
  it('given any heartbeat, when the lease has not expired, then it is held', () => {
    expect(given(null).when(EXPIRES).verdict()).toEqual({ kind: 'held' });
    expect(
      given({ freshUntil: EXPIRES + 5_000 })
        .when(EXPIRES - 1)
        .verdict(),
    ).toEqual({ kind: 'held' });
  });

  it('given a fresh heartbeat, when the lease expired less than one TTL ago, then late: not fenced, at the latest one TTL after the expiry', () => {
    expect(
      given({ freshUntil: EXPIRES + 10_000 })
        .when(EXPIRES + 1)
        .verdict(),
    ).toEqual({ kind: 'late', fenceBy: EXPIRES + TTL });
    expect(
      given({ freshUntil: EXPIRES + TTL + 5_000 })
        .when(EXPIRES + TTL)
        .verdict(),
    ).toEqual({ kind: 'late', fenceBy: EXPIRES + TTL });
  });

  it('given a fresh heartbeat, when the lease expired more than one TTL ago, then gone: stuck, or stopped since its last beat', () => {
    const v = given({ freshUntil: EXPIRES + 3 * TTL })
      .when(EXPIRES + TTL + 1)
      .verdict();
    expect(v).toEqual({ kind: 'gone', detail: expect.stringContaining('renewed nothing for one more TTL') });
    expect(v.kind === 'gone' && v.detail).toContain('without a renewal');
    expect(v.kind === 'gone' && v.detail).toContain('stuck, or stopped since its last beat');
  });

  it('given a heartbeat still within its TTL whose last beat is recent, when the lease expired more than one TTL ago, then the detail gives the beat and says stuck or stopped since, not that it still beats', () => {
    const now = EXPIRES + TTL + 1;
    const v = given({ freshUntil: now + 20_000, lastAt: now - 4_000, everyMs: 3_000 })
      .when(now)
      .verdict();
    const detail = v.kind === 'gone' ? v.detail : '';
    expect(detail).toContain(`last beat at ${new Date(now - 4_000).toISOString()} (4000 ms before; it beats every 3000 ms)`);
    expect(detail).toContain('stuck, or stopped since that beat');
    expect(detail).not.toContain('still beats');
  });

  it('given a heartbeat still within its TTL but silent for over one and a half beat intervals (a killed process), when the lease expired more than one TTL ago, then the detail says it has not beaten since', () => {
    const now = EXPIRES + TTL + 1;
    const v = given({ freshUntil: now + 20_000, lastAt: now - 4_501, everyMs: 3_000 })
      .when(now)
      .verdict();
    expect(v.kind).toBe('gone');
    const detail = v.kind === 'gone' ? v.detail : '';
    expect(detail).toContain(`has not beaten since ${new Date(now - 4_501).toISOString()} (4501 ms before; it beats every 3000 ms)`);
    expect(detail).toContain('stopped, killed or cut off');
    expect(detail).not.toContain('still beats');
  });

  it('given a stale heartbeat (the process was killed: it stopped beating), when the lease expired, then gone at once', () => {
    const v = given({ freshUntil: EXPIRES - 1_000 })
      .when(EXPIRES + 1)
      .verdict();
    expect(v).toEqual({ kind: 'gone', detail: expect.stringContaining('heartbeat is stale since 2026-01-01T00:00:14.000Z') });
  });

  it('given a stale heartbeat whose last beat is known, when the lease expired, then the detail names the last beat first, not only when it went stale', () => {
    const v = given({ freshUntil: EXPIRES - 1_000, lastAt: EXPIRES - 16_000, everyMs: 5_000 })
      .when(EXPIRES + 1)
      .verdict();
    expect(v).toEqual({
      kind: 'gone',
      detail: expect.stringContaining(
        `its process last beat at ${new Date(EXPIRES - 16_000).toISOString()} (its heartbeat stale since ${new Date(EXPIRES - 1_000).toISOString()})`,
      ),
    });
  });

  it('given no heartbeat at all (a stopped process deleted it, or an older runtime), when the lease expired, then gone at once', () => {
    expect(
      given(null)
        .when(EXPIRES + 1)
        .verdict(),
    ).toEqual({ kind: 'gone', detail: expect.stringContaining('has no heartbeat') });
  });

  it('given a heartbeat that went stale during the grace, when the sweep runs after it, then gone before the grace ends', () => {
    expect(
      given({ freshUntil: EXPIRES + 4_000 })
        .when(EXPIRES + 4_001)
        .verdict(),
    ).toEqual({ kind: 'gone', detail: expect.any(String) });
  });
});
