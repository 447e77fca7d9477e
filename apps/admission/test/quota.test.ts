/**
 * Per-principal quotas of admission: the pure rule (`quotaRefusal`) and the decider that applies it
 * to new Runs only (a repeat of an admitted message answers as before, K1), and the settings that
 * set them (`RUNPLANE_QUOTA_*`: unset is no limit; a bad value names the setting).
 */
import { describe, expect, it } from '@jest/globals';
import { admissionIds, decide, QuotaExceeded, type PostMessage } from '../src/decide.js';
import { liveReservations, NO_USAGE, quotaRefusal, reservationsToConfirm, withReservations, type QuotaLimits } from '../src/quota.js';
import { conversationKey, loadConfig, QuotaConfig } from '@runplane/contracts';
import { emptyFacts } from '@runplane/run-facts';
import { spec } from '../../../test/support/decider-spec.js';
import { postMessage } from './commands.js';

const NOW = new Date('2026-01-01T12:00:00.000Z');
const ago = (seconds: number) => new Date(NOW.getTime() - seconds * 1000).toISOString();
const limits = (over: Partial<QuotaLimits> = {}): QuotaLimits => ({ concurrentRuns: null, runsPerHour: null, costMicrosPerDay: null, ...over });

describe('quotaRefusal: the rule', () => {
  it('given no quota set, when a principal has many Runs, then nothing is refused', () => {
    expect(quotaRefusal(limits(), { activeRuns: 1_000, admittedInLastHour: [ago(1), ago(2)], costInLastDay: [] }, NOW)).toBeNull();
  });

  it('given every counted Run parked waiting for a human, when a 3rd Run is refused for concurrent-runs, then Retry-After is the parked hint (300 s), or sooner at the earliest deadline, never under 5 s', () => {
    const later = (seconds: number) => new Date(NOW.getTime() + seconds * 1000).toISOString();
    const parked = (...deadlines: (string | null)[]) => ({
      activeRuns: deadlines.length,
      admittedInLastHour: [],
      costInLastDay: [],
      awaitingHuman: deadlines.map((deadlineAt) => ({ deadlineAt })),
    });
    const wait = (usage: ReturnType<typeof parked>) => quotaRefusal(limits({ concurrentRuns: 2 }), usage, NOW)?.retryAfterSeconds;
    expect(wait(parked(null, null))).toBe(300); // nobody knows when a human answers
    expect(wait(parked(later(7_200), null))).toBe(300);
    expect(wait(parked(later(120.5), later(7_200)))).toBe(121); // the earlier deadline settles one by then at the latest
    expect(wait(parked(ago(10), null))).toBe(5); // past its deadline: settling any moment
    // one of the two still executing: it may settle any moment, the short hint
    expect(wait({ ...parked(null, null), awaitingHuman: [{ deadlineAt: null }] })).toBe(5);
    // a reservation (admitted, not yet projected) is executing too
    const reserved = withReservations(parked(null), new Set(), [{ runId: 'r-new', reservedAt: ago(1) }], new Set(), NOW);
    expect(reserved).toMatchObject({ activeRuns: 2, awaitingHuman: [{ deadlineAt: null }] });
    expect(quotaRefusal(limits({ concurrentRuns: 2 }), reserved, NOW)?.retryAfterSeconds).toBe(5);
  });

  it('given 2 concurrent Runs allowed, when the principal has 1 or 2 unsettled, then the 2nd is admitted and the 3rd refused with a short hint', () => {
    expect(quotaRefusal(limits({ concurrentRuns: 2 }), { activeRuns: 1, admittedInLastHour: [], costInLastDay: [] }, NOW)).toBeNull();
    expect(quotaRefusal(limits({ concurrentRuns: 2 }), { activeRuns: 2, admittedInLastHour: [], costInLastDay: [] }, NOW)).toEqual({
      quota: 'concurrent-runs',
      limit: 2,
      used: 2,
      retryAfterSeconds: 5,
    });
  });

  it('given 3 Runs per hour, when 3 were admitted 50, 20 and 10 minutes ago, then the 4th is refused until the oldest leaves the hour (10 min)', () => {
    const usage = { activeRuns: 0, admittedInLastHour: [ago(3000), ago(1200), ago(600)], costInLastDay: [] };
    expect(quotaRefusal(limits({ runsPerHour: 3 }), usage, NOW)).toEqual({ quota: 'runs-per-hour', limit: 3, used: 3, retryAfterSeconds: 600 });
    // one second after the oldest has left, there is room again
    expect(quotaRefusal(limits({ runsPerHour: 3 }), usage, new Date(NOW.getTime() + 600_001))).toBeNull();
  });

  it('given a burst past the limit (projector lag), when 5 Runs are in the window for 3, then the wait counts until 3 have left', () => {
    const usage = { activeRuns: 0, admittedInLastHour: [ago(600), ago(3000), ago(2400), ago(1800), ago(1200)], costInLastDay: [] };
    // oldest first: 3000, 2400, 1800, 1200, 600 s ago; room for one once the 3rd oldest (1800 s ago) has left: 1800 s
    expect(quotaRefusal(limits({ runsPerHour: 3 }), usage, NOW)).toMatchObject({ quota: 'runs-per-hour', used: 5, retryAfterSeconds: 1800 });
  });

  it('given Runs admitted more than an hour ago in the usage, then they are not counted; a wait is rounded up to whole seconds, at least 1', () => {
    expect(
      quotaRefusal(limits({ runsPerHour: 1 }), { activeRuns: 0, admittedInLastHour: [ago(3600), ago(4000)], costInLastDay: [] }, NOW),
    ).toBeNull();
    const justNow = new Date(NOW.getTime() - 3_599_999).toISOString();
    expect(
      quotaRefusal(limits({ runsPerHour: 1 }), { activeRuns: 0, admittedInLastHour: [justNow], costInLastDay: [] }, NOW)?.retryAfterSeconds,
    ).toBe(1);
    expect(
      quotaRefusal(limits({ runsPerHour: 1 }), { activeRuns: 0, admittedInLastHour: [ago(0.2)], costInLastDay: [] }, NOW)?.retryAfterSeconds,
    ).toBe(3600);
  });

  it('given both quotas exceeded, then the refusal names the one that frees last', () => {
    const usage = { activeRuns: 1, admittedInLastHour: [ago(60)], costInLastDay: [] };
    expect(quotaRefusal(limits({ concurrentRuns: 1, runsPerHour: 1 }), usage, NOW)).toMatchObject({
      quota: 'runs-per-hour',
      retryAfterSeconds: 3540,
    });
    const almostOut = { activeRuns: 1, admittedInLastHour: [ago(3598)], costInLastDay: [] };
    expect(quotaRefusal(limits({ concurrentRuns: 1, runsPerHour: 1 }), almostOut, NOW)).toMatchObject({
      quota: 'concurrent-runs',
      retryAfterSeconds: 5,
    });
  });
});

describe('quotaRefusal: cost-per-day', () => {
  const HOUR = 3600;
  const charge = (secondsAgo: number, upperMicros: number, currency = 'USD') => ({ admittedAt: ago(secondsAgo), currency, upperMicros });
  const day = (costMicrosPerDay: number, ...costInLastDay: ReturnType<typeof charge>[]) =>
    quotaRefusal(limits({ costMicrosPerDay }), { activeRuns: 0, admittedInLastHour: [], costInLastDay }, NOW);

  it('given 1,000,000 micro-USD a day, when the Runs of the last 24 h cost 999,999 at most, then a new Run is admitted', () => {
    expect(day(1_000_000, charge(20 * HOUR, 600_000), charge(HOUR, 399_999))).toBeNull();
  });

  it('given 1,000,000 a day, when Runs admitted 20 h, 10 h and 1 h ago cost 600,000, 300,000 and 200,000, then refused until the 20 h one leaves the window (4 h)', () => {
    expect(day(1_000_000, charge(20 * HOUR, 600_000), charge(10 * HOUR, 300_000), charge(HOUR, 200_000))).toEqual({
      quota: 'cost-per-day',
      limit: 1_000_000,
      used: 1_100_000,
      currency: 'USD',
      retryAfterSeconds: 4 * HOUR,
    });
  });

  it('given 1,000,000 a day, when the oldest charge is small, then the wait lasts until enough has left to be under the limit', () => {
    // 20 h ago 100,000, 10 h ago 900,000: once the first leaves, 900,000 < 1,000,000 remains: 4 h
    expect(day(1_000_000, charge(20 * HOUR, 100_000), charge(10 * HOUR, 900_000))?.retryAfterSeconds).toBe(4 * HOUR);
    // 20 h ago 100,000, 10 h ago 1,000,000: the second must leave too: 14 h
    expect(day(1_000_000, charge(20 * HOUR, 100_000), charge(10 * HOUR, 1_000_000))?.retryAfterSeconds).toBe(14 * HOUR);
  });

  it('given a Run still running whose reservation is its unknown cost, then that upper bound counts (never 0), and exactly at the limit is refused', () => {
    expect(day(500_000, charge(60, 500_000))).toMatchObject({ quota: 'cost-per-day', used: 500_000, retryAfterSeconds: 24 * HOUR - 60 });
  });

  it('given charges older than 24 h or in another currency, then they do not count towards this currency', () => {
    expect(day(1_000_000, charge(24 * HOUR, 5_000_000), charge(HOUR, 600_000, 'USD'), charge(HOUR, 600_000, 'EUR'))).toBeNull();
    expect(day(1_000_000, charge(HOUR, 1_200_000, 'EUR'))).toMatchObject({ currency: 'EUR', used: 1_200_000 });
  });

  it('given the runs-per-hour and cost-per-day quotas both exceeded, then the refusal names the one that frees last', () => {
    const usage = { activeRuns: 0, admittedInLastHour: [ago(60)], costInLastDay: [charge(60, 2_000_000)] };
    expect(quotaRefusal(limits({ runsPerHour: 1, costMicrosPerDay: 1_000_000 }), usage, NOW)).toMatchObject({ quota: 'cost-per-day' });
  });
});

describe('admission decide with quotas', () => {
  const admission = spec(decide);
  const post = (over: Partial<PostMessage> = {}): PostMessage => postMessage({ principal: 'alice', ...over });
  const atLimit = { limits: limits({ concurrentRuns: 1 }), usage: { activeRuns: 1, admittedInLastHour: [ago(30)], costInLastDay: [] } };

  it('given no admission, when a new message comes from a principal at its concurrency quota, then QuotaExceeded and nothing is decided', () => {
    admission
      .given([])
      .when(post({ quota: atLimit }), NOW)
      .thenThrows(QuotaExceeded);
    admission
      .given([])
      .when(post({ quota: atLimit }), NOW)
      .thenThrows(/quota concurrent-runs exceeded: 1 of 1/);
  });

  it('given no admission, when a new message comes from a principal whose Runs of the day cost its money quota, then QuotaExceeded naming the money', () => {
    const spent = { activeRuns: 0, admittedInLastHour: [], costInLastDay: [{ admittedAt: ago(7200), currency: 'USD', upperMicros: 50_000 }] };
    admission
      .given([])
      .when(post({ quota: { limits: limits({ costMicrosPerDay: 50_000 }), usage: spent } }), NOW)
      .thenThrows(/quota cost-per-day exceeded: 50000 of 50000 micro-USD charged at most to the Runs admitted in the last 24 h; retry in 79200 s/);
  });

  it('given no admission, when the principal is under its quotas, then the Run is admitted', () => {
    admission
      .given([])
      .when(post({ quota: { limits: limits({ concurrentRuns: 2, runsPerHour: 2 }), usage: NO_USAGE } }), NOW)
      .then([{ type: 'run.admitted', data: expect.objectContaining({ principal: 'alice' }) }]);
  });

  it('given the message admitted before, when it is repeated while the principal is over quota, then nothing is appended and nothing refused (K1)', () => {
    const [e] = decide(emptyFacts(admissionIds(conversationKey('conv-1', 'alice'), 'client-1').runId), post(), NOW);
    const prior = [{ seq: 1, subject: `rp.run.${e!.runId}.admission`, event: e! }];
    admission
      .given(prior)
      .when(post({ quota: atLimit, requestId: 'req-2' }), NOW)
      .thenNothing();
  });
});

describe('reservations: Runs admitted that the projections do not show yet', () => {
  const none = new Set<string>();
  const usage = { activeRuns: 1, admittedInLastHour: [ago(600)], costInLastDay: [] };

  it('given a reservation the projections do not show, when the usage is counted, then it is one more unsettled Run admitted at its reservation', () => {
    const counted = withReservations(usage, new Set(['r-old']), [{ runId: 'r-new', reservedAt: ago(1) }], none, NOW);
    expect(counted).toEqual({ activeRuns: 2, admittedInLastHour: [ago(600), ago(1)], costInLastDay: [] });
    // so one concurrent Run allowed refuses the next while the projector has not applied the reserved one
    expect(quotaRefusal(limits({ concurrentRuns: 2 }), counted, NOW)).toMatchObject({ quota: 'concurrent-runs', used: 2 });
  });

  it('given reservations the projections show, older than an hour, or missing from the log, then they count nothing and are not kept', () => {
    const reservations = [
      { runId: 'shown', reservedAt: ago(5) },
      { runId: 'old', reservedAt: ago(3_601) },
      { runId: 'gone', reservedAt: ago(60) },
      { runId: 'pending', reservedAt: ago(2) },
    ];
    expect(withReservations(usage, new Set(['shown']), reservations, new Set(['gone']), NOW)).toEqual({
      activeRuns: 2,
      admittedInLastHour: [ago(600), ago(2)],
      costInLastDay: [],
    });
    expect(liveReservations(reservations, new Set(['shown']), new Set(['gone']), NOW).map((r) => r.runId)).toEqual(['pending']);
  });

  it("given no reservation pending, then the usage is the projections' as it is", () => {
    expect(withReservations(usage, new Set(['a']), [{ runId: 'a', reservedAt: ago(1) }], none, NOW)).toBe(usage);
  });

  it('given reservations not shown for 30 s or more, then those (and only those) are checked against the log', () => {
    const reservations = [
      { runId: 'young', reservedAt: ago(29) },
      { runId: 'due', reservedAt: ago(30) },
      { runId: 'shown', reservedAt: ago(300) },
    ];
    expect(reservationsToConfirm(reservations, new Set(['shown']), NOW).map((r) => r.runId)).toEqual(['due']);
  });
});

describe('RUNPLANE_QUOTA_* settings', () => {
  it('unset or empty: no limit; a whole number: that limit', () => {
    expect(loadConfig(QuotaConfig, {})).toEqual({
      RUNPLANE_QUOTA_CONCURRENT_RUNS: null,
      RUNPLANE_QUOTA_RUNS_PER_HOUR: null,
      RUNPLANE_QUOTA_COST_MICROS_PER_DAY: null,
    });
    expect(
      loadConfig(QuotaConfig, {
        RUNPLANE_QUOTA_CONCURRENT_RUNS: '3',
        RUNPLANE_QUOTA_RUNS_PER_HOUR: '',
        RUNPLANE_QUOTA_COST_MICROS_PER_DAY: '5000000',
      }),
    ).toEqual({
      RUNPLANE_QUOTA_CONCURRENT_RUNS: 3,
      RUNPLANE_QUOTA_RUNS_PER_HOUR: null,
      RUNPLANE_QUOTA_COST_MICROS_PER_DAY: 5_000_000,
    });
  });

  it('a bad value stops start-up with an error naming the setting', () => {
    expect(() => loadConfig(QuotaConfig, { RUNPLANE_QUOTA_CONCURRENT_RUNS: 'ten' })).toThrow(
      /RUNPLANE_QUOTA_CONCURRENT_RUNS: must be a whole decimal number/,
    );
    expect(() => loadConfig(QuotaConfig, { RUNPLANE_QUOTA_RUNS_PER_HOUR: '0' })).toThrow(/RUNPLANE_QUOTA_RUNS_PER_HOUR/);
    expect(() => loadConfig(QuotaConfig, { RUNPLANE_QUOTA_RUNS_PER_HOUR: '-1' })).toThrow(/RUNPLANE_QUOTA_RUNS_PER_HOUR/);
    expect(() => loadConfig(QuotaConfig, { RUNPLANE_QUOTA_COST_MICROS_PER_DAY: '1.5' })).toThrow(/RUNPLANE_QUOTA_COST_MICROS_PER_DAY/);
  });
});
