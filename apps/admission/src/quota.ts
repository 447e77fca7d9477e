/**
 * Per-principal quotas of admission: whether one more Run may be admitted for a principal, given
 * what it uses now. Pure: the usage is read before (admission reads it from the Run projections,
 * rebuilt from the log alone, K11) and the clock comes in as `now`.
 *
 * Each quota is one entry of {@link QuotaName}, one limit in {@link QuotaLimits}, what it needs of
 * the principal's usage in {@link QuotaUsage}, and one rule in {@link quotaRefusal}
 * (docs/configuration.md, "Quotas").
 */

import type { QuotaName } from '@runplane/contracts';

/** The quotas, as named in the 429 problem (`quota`) and the metric's `quota` label (contracts `QuotaNames`). */
export type { QuotaName };

/** The sliding window of `runs-per-hour`, ms. */
export const QUOTA_HOUR_MS = 3_600_000;

/** The sliding window of `cost-per-day`, ms (24 h, not the calendar day: no time zone to agree on, no midnight burst). */
export const QUOTA_DAY_MS = 86_400_000;

/**
 * Seconds a refusal for `concurrent-runs` tells the client to wait while a counted Run is
 * executing (or just admitted): when it settles is not known in advance, so this is a hint to poll
 * at, not a promise.
 */
export const CONCURRENT_RETRY_AFTER_SECONDS = 5;

/**
 * Seconds a refusal for `concurrent-runs` tells the client to wait, at most, when every counted
 * Run is parked waiting for a human (`awaiting_human`, K10): none frees before somebody answers,
 * which may take hours, so a 5 s poll would only be refused again. It is shorter when a parked
 * Run's deadline comes sooner (it settles by then at the latest).
 */
export const PARKED_RETRY_AFTER_SECONDS = 300;

/** The limits (`RUNPLANE_QUOTA_*`); null: no limit. */
export interface QuotaLimits {
  /** Runs admitted and not settled yet, at once. */
  concurrentRuns: number | null;
  /** Runs admitted in any sliding hour. */
  runsPerHour: number | null;
  /**
   * Money charged to the Runs admitted in any sliding 24 h (`RUNPLANE_QUOTA_COST_MICROS_PER_DAY`),
   * micro-units of the currency the models are priced in, applied to each currency on its own.
   */
  costMicrosPerDay: number | null;
}

/**
 * What one Run admitted in the last 24 h costs at most, as its projection says (K7): the measured
 * cost plus the upper bound of what is not measured (turns in flight at their reservation, turns
 * whose usage stayed unknown), never 0 for the unknown part. Unpriced Runs have none.
 */
export interface QuotaCharge {
  /** When the Run was admitted (ISO-8601): the charge leaves the window 24 h later. */
  admittedAt: string;
  /** ISO 4217 code of the price the cost was charged at. */
  currency: string;
  /** Measured + unknown upper bound, integer micro-units (1 USD = 1,000,000). */
  upperMicros: number;
}

/** What a principal uses, as the projections say (the Run counts exclude child Runs, charged to their parent's grant; the money includes them). */
export interface QuotaUsage {
  /** Its Runs admitted and not settled. */
  activeRuns: number;
  /** When its Runs admitted in the last hour were admitted (ISO-8601), oldest first. */
  admittedInLastHour: readonly string[];
  /**
   * The priced Runs admitted in the last 24 h, child Runs included (their model turns are paid
   * like the parent's, and carry its principal); empty when `costMicrosPerDay` is not set.
   */
  costInLastDay: readonly QuotaCharge[];
  /**
   * Those of its unsettled Runs (of `activeRuns`) parked waiting for a human's answer, each with
   * its deadline (ISO-8601; null: none): they free a `concurrent-runs` slot only once answered, or
   * at their deadline. Absent: none known to be waiting.
   */
  awaitingHuman?: readonly { deadlineAt: string | null }[];
}

/** Why a new Run is refused: which quota, its limit, the usage counted, and how long to wait (whole seconds, at least 1). */
export interface QuotaRefusal {
  quota: QuotaName;
  limit: number;
  used: number;
  retryAfterSeconds: number;
  /** `cost-per-day` only: the currency of `limit` and `used` (micro-units). */
  currency?: string;
}

/** The usage of a principal without Runs. */
export const NO_USAGE: QuotaUsage = Object.freeze({ activeRuns: 0, admittedInLastHour: Object.freeze([]), costInLastDay: Object.freeze([]) });

/** True when no quota is set: admission then reads no usage at all. */
export const unlimited = (limits: QuotaLimits): boolean =>
  limits.concurrentRuns === null && limits.runsPerHour === null && limits.costMicrosPerDay === null;

const retryAfter = (waitMs: number): number => Math.max(1, Math.ceil(waitMs / 1000));

/**
 * `cost-per-day`, per currency: refused when the charges of the last 24 h reach the limit (a Run
 * admitted under it may still spend its own grant past it: `budget.maxCost` and the grant ceiling
 * bound that). The wait lasts until the oldest charges have left the window far enough for the
 * rest to be under the limit; since Runs still running may charge more meanwhile, it is the
 * earliest a retry can be admitted, not a promise.
 */
function costRefusal(limit: number, charges: readonly QuotaCharge[], now: Date): QuotaRefusal | null {
  const windowStart = now.getTime() - QUOTA_DAY_MS;
  const byCurrency = new Map<string, { at: number; micros: number }[]>();
  for (const c of charges) {
    const at = Date.parse(c.admittedAt);
    if (!(at > windowStart) || c.upperMicros <= 0) continue;
    const list = byCurrency.get(c.currency) ?? [];
    list.push({ at, micros: c.upperMicros });
    byCurrency.set(c.currency, list);
  }
  let worst: QuotaRefusal | null = null;
  for (const [currency, list] of byCurrency) {
    const used = list.reduce((n, c) => n + c.micros, 0);
    if (used < limit) continue;
    list.sort((a, b) => a.at - b.at);
    // the charges leave oldest first; room once what stays is under the limit
    let left = used;
    let leavesAt = now.getTime();
    for (const c of list) {
      left -= c.micros;
      leavesAt = c.at + QUOTA_DAY_MS;
      if (left < limit) break;
    }
    const refusal: QuotaRefusal = { quota: 'cost-per-day', limit, used, retryAfterSeconds: retryAfter(leavesAt - now.getTime()), currency };
    if (!worst || refusal.retryAfterSeconds > worst.retryAfterSeconds) worst = refusal;
  }
  return worst;
}

/**
 * `concurrent-runs`' wait: {@link CONCURRENT_RETRY_AFTER_SECONDS} while any counted Run may be
 * executing; when every one is parked waiting for a human ({@link QuotaUsage.awaitingHuman}), until
 * the earliest of their deadlines (they settle by then at the latest), at most
 * {@link PARKED_RETRY_AFTER_SECONDS} and at least the short hint.
 */
function concurrentRetryAfter(usage: QuotaUsage, now: Date): number {
  const waiting = usage.awaitingHuman ?? [];
  if (waiting.length === 0 || waiting.length < usage.activeRuns) return CONCURRENT_RETRY_AFTER_SECONDS;
  const untilDeadline = waiting.map((r) => (r.deadlineAt === null ? Infinity : Date.parse(r.deadlineAt) - now.getTime()));
  const seconds = Math.min(PARKED_RETRY_AFTER_SECONDS, retryAfter(Math.min(...untilDeadline)));
  return Math.max(CONCURRENT_RETRY_AFTER_SECONDS, seconds);
}

/**
 * Whether one more Run may be admitted at `now` under `limits`: null when it may; otherwise the
 * refusal. With several quotas exceeded, the one that frees last is named (its wait is the true
 * one). `runs-per-hour` waits until enough Runs of the window have left it to make room for one
 * (`admittedAt + 1 h` of the Run that has to leave, rounded up to whole seconds); Runs admitted in
 * a burst faster than the projections follow may leave more Runs in the window than the limit,
 * and the wait counts them all. `concurrent-runs` waits {@link CONCURRENT_RETRY_AFTER_SECONDS}, or
 * longer when every counted Run waits for a human ({@link concurrentRetryAfter}).
 * `cost-per-day` counts what the Runs admitted in the last 24 h cost at most ({@link QuotaCharge})
 * and waits until enough of it has left the window ({@link costRefusal}).
 */
export function quotaRefusal(limits: QuotaLimits, usage: QuotaUsage, now: Date): QuotaRefusal | null {
  const refusals: QuotaRefusal[] = [];
  if (limits.concurrentRuns !== null && usage.activeRuns >= limits.concurrentRuns) {
    refusals.push({
      quota: 'concurrent-runs',
      limit: limits.concurrentRuns,
      used: usage.activeRuns,
      retryAfterSeconds: concurrentRetryAfter(usage, now),
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
        retryAfterSeconds: retryAfter(waitMs),
      });
    }
  }
  if (limits.costMicrosPerDay !== null) {
    const refusal = costRefusal(limits.costMicrosPerDay, usage.costInLastDay, now);
    if (refusal) refusals.push(refusal);
  }
  if (refusals.length === 0) return null;
  return refusals.reduce((a, b) => (b.retryAfterSeconds > a.retryAfterSeconds ? b : a));
}

/**
 * Ms after which a reservation the projections do not show is checked against the log: a
 * reservation whose Run has no `run.admitted` by then was left by a crash between reserving and
 * appending (or an admission that failed before it could remove it), and no longer counts.
 */
export const RESERVATION_CONFIRM_AFTER_MS = 30_000;

/** One Run admission reserved against its principal's quotas before appending it (eventlog `QuotaReservation`). */
export interface Reservation {
  runId: string;
  /** ISO-8601 time it was reserved. */
  reservedAt: string;
}

/**
 * The usage the count quotas see: the projections' plus each reservation they do not show yet
 * (`known`: the ids of the principal's Runs the projections show admitted in the last hour),
 * counted as an unsettled Run admitted at its reservation time. Reservations older than an hour,
 * or in `gone` (never reached the log), count nothing. Money is the projections' alone: a Run
 * the projections do not show yet has been charged nothing (docs/configuration.md, "Quotas").
 */
export function withReservations(
  usage: QuotaUsage,
  known: ReadonlySet<string>,
  reservations: readonly Reservation[],
  gone: ReadonlySet<string>,
  now: Date,
): QuotaUsage {
  const pending = liveReservations(reservations, known, gone, now);
  if (pending.length === 0) return usage;
  return {
    activeRuns: usage.activeRuns + pending.length,
    admittedInLastHour: [...usage.admittedInLastHour, ...pending.map((r) => r.reservedAt)].sort(),
    costInLastDay: usage.costInLastDay,
    // a reserved Run is just admitted, not waiting for anybody: it is one of activeRuns but not of these
    ...(usage.awaitingHuman ? { awaitingHuman: usage.awaitingHuman } : {}),
  };
}

/**
 * The reservations to keep: not yet shown by the projections, younger than an hour (the longest
 * window a reservation counts in), and not found missing from the log (`gone`).
 */
export function liveReservations(
  reservations: readonly Reservation[],
  known: ReadonlySet<string>,
  gone: ReadonlySet<string>,
  now: Date,
): Reservation[] {
  const since = now.getTime() - QUOTA_HOUR_MS;
  return reservations.filter((r) => !known.has(r.runId) && !gone.has(r.runId) && Date.parse(r.reservedAt) > since);
}

/** The reservations old enough to be checked against the log ({@link RESERVATION_CONFIRM_AFTER_MS}), not yet shown by the projections. */
export function reservationsToConfirm(reservations: readonly Reservation[], known: ReadonlySet<string>, now: Date): Reservation[] {
  return reservations.filter((r) => !known.has(r.runId) && now.getTime() - Date.parse(r.reservedAt) >= RESERVATION_CONFIRM_AFTER_MS);
}

/** Whether `limits` sets a quota that counts Runs (`concurrent-runs`, `runs-per-hour`): only those are reserved before the append. */
export const countsRuns = (limits: QuotaLimits): boolean => limits.concurrentRuns !== null || limits.runsPerHour !== null;
