/**
 * Per-principal quotas of admission: whether one more Run may be admitted for a principal, given
 * what it uses now. Pure: the usage is read before (admission reads it from the Run projections,
 * rebuilt from the log alone, K11) and the clock comes in as `now`.
 *
 * Each quota is one entry of {@link QuotaName}, one limit in {@link QuotaLimits}, what it needs of
 * the principal's usage in {@link QuotaUsage}, and one rule in {@link quotaRefusal}. A money-per-day
 * quota is added the same way: `money-per-day`, a limit in the currency's minor units, the
 * principal's spend since the day began (from the priced usage of its Runs), and a `Retry-After`
 * until the day ends (docs/configuration.md, "Quotas").
 */

import type { QuotaName } from '@runplane/contracts';

/** The quotas, as named in the 429 problem (`quota`) and the metric's `quota` label (contracts `QuotaNames`). */
export type { QuotaName };

/** The sliding window of `runs-per-hour`, ms. */
export const QUOTA_HOUR_MS = 3_600_000;

/**
 * Seconds a refusal for `concurrent-runs` tells the client to wait: when a Run of the principal
 * settles is not known in advance, so this is a hint to poll at, not a promise.
 */
export const CONCURRENT_RETRY_AFTER_SECONDS = 5;

/** The limits (`RUNPLANE_QUOTA_*`); null: no limit. */
export interface QuotaLimits {
  /** Runs admitted and not settled yet, at once. */
  concurrentRuns: number | null;
  /** Runs admitted in any sliding hour. */
  runsPerHour: number | null;
}

/** What a principal uses, as the projections say (child Runs excluded: they are charged to their parent's grant). */
export interface QuotaUsage {
  /** Its Runs admitted and not settled. */
  activeRuns: number;
  /** When its Runs admitted in the last hour were admitted (ISO-8601), oldest first. */
  admittedInLastHour: readonly string[];
}

/** Why a new Run is refused: which quota, its limit, the usage counted, and how long to wait (whole seconds, at least 1). */
export interface QuotaRefusal {
  quota: QuotaName;
  limit: number;
  used: number;
  retryAfterSeconds: number;
}

/** The usage of a principal without Runs. */
export const NO_USAGE: QuotaUsage = Object.freeze({ activeRuns: 0, admittedInLastHour: Object.freeze([]) });

/** True when no quota is set: admission then reads no usage at all. */
export const unlimited = (limits: QuotaLimits): boolean => limits.concurrentRuns === null && limits.runsPerHour === null;

/**
 * Whether one more Run may be admitted at `now` under `limits`: null when it may; otherwise the
 * refusal. With several quotas exceeded, the one that frees last is named (its wait is the true
 * one). `runs-per-hour` waits until enough Runs of the window have left it to make room for one
 * (`admittedAt + 1 h` of the Run that has to leave, rounded up to whole seconds); Runs admitted in
 * a burst faster than the projections follow may leave more Runs in the window than the limit,
 * and the wait counts them all. `concurrent-runs` waits {@link CONCURRENT_RETRY_AFTER_SECONDS}.
 */
export function quotaRefusal(limits: QuotaLimits, usage: QuotaUsage, now: Date): QuotaRefusal | null {
  const refusals: QuotaRefusal[] = [];
  if (limits.concurrentRuns !== null && usage.activeRuns >= limits.concurrentRuns) {
    refusals.push({
      quota: 'concurrent-runs',
      limit: limits.concurrentRuns,
      used: usage.activeRuns,
      retryAfterSeconds: CONCURRENT_RETRY_AFTER_SECONDS,
    });
  }
  if (limits.runsPerHour !== null) {
    const windowStart = now.getTime() - QUOTA_HOUR_MS;
    const inWindow = usage.admittedInLastHour.map((at) => Date.parse(at)).filter((t) => t > windowStart);
    inWindow.sort((a, b) => a - b);
    if (inWindow.length >= limits.runsPerHour) {
      // room for one more once all but limit - 1 of them have left the window
      const mustLeave = inWindow[inWindow.length - limits.runsPerHour]!;
      const waitMs = mustLeave + QUOTA_HOUR_MS - now.getTime();
      refusals.push({
        quota: 'runs-per-hour',
        limit: limits.runsPerHour,
        used: inWindow.length,
        retryAfterSeconds: Math.max(1, Math.ceil(waitMs / 1000)),
      });
    }
  }
  if (refusals.length === 0) return null;
  return refusals.reduce((a, b) => (b.retryAfterSeconds > a.retryAfterSeconds ? b : a));
}
