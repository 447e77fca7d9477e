/**
 * Which holdings file stands for each fund, for the scripted research policy: the file of a requested date (else the nearest, with the distance), else the closest dates between the funds, else the newest. Pure.
 */
import { type HoldingsFileInfo } from '@runplane/contracts';
import { type QuestionDate } from './question-dates.js';

/** The dated file of `files` whose as-of date is the first of `dates` to match one, if any. */
export function pinnedFile(files: readonly HoldingsFileInfo[], dates: readonly string[]): HoldingsFileInfo | undefined {
  for (const d of dates) {
    const f = files.find((x) => x.asOf === d);
    if (f) return f;
  }
  return undefined;
}

/**
 * The as-of dates to compare two funds' files by: the pair of dated files with the fewest days
 * between them (ties: the later pair), a fund's file pinned when one of `dates` matches it.
 * Undated files are skipped; when a fund has no dated file its date is left out.
 */
export function closestPair(
  filesA: readonly HoldingsFileInfo[],
  filesB: readonly HoldingsFileInfo[],
  dates: readonly string[] = [],
): { asOfA?: string; asOfB?: string } {
  const datedA = filesA.filter((f) => f.asOf !== null);
  const datedB = filesB.filter((f) => f.asOf !== null);
  const pinA = pinnedFile(datedA, dates);
  const pinB = pinnedFile(datedB, dates);
  const candA = pinA ? [pinA] : datedA;
  const candB = pinB ? [pinB] : datedB;
  if (candA.length === 0 || candB.length === 0) {
    const out: { asOfA?: string; asOfB?: string } = {};
    if (candA.length > 0 && pinA?.asOf) out.asOfA = pinA.asOf;
    if (candB.length > 0 && pinB?.asOf) out.asOfB = pinB.asOf;
    return out;
  }
  let best: { a: string; b: string; gap: number; sum: number } | undefined;
  for (const fa of candA) {
    for (const fb of candB) {
      const a = fa.asOf as string;
      const b = fb.asOf as string;
      const gap = Math.abs(dayNumber(a) - dayNumber(b));
      const sum = dayNumber(a) + dayNumber(b);
      if (!best || gap < best.gap || (gap === best.gap && sum > best.sum)) best = { a, b, gap, sum };
    }
  }
  return best ? { asOfA: best.a, asOfB: best.b } : {};
}

/** One fund at one file: what the answer reads, and why that file. */
export interface Subject {
  fund: string;
  /** The chosen file's as-of date (`undefined`: the fund's files are undated or unknown; the tool picks). */
  asOf?: string;
  file?: string;
  why: string;
  /** The requested date this file stands for, and how many days the file is from it (0 = inside the period asked). */
  asked?: { date: QuestionDate; gapDays: number };
}

/**
 * A requested date answered with a file more than this many days away is answered only
 * approximately: the answer keeps the figures and lists that part in the unanswered list with the
 * distance. One month: issuers publish holdings at least monthly, so a nearer file should exist.
 */
export const APPROXIMATE_AFTER_DAYS = 31;

/** How an unanswered-list reason starts for a part answered only approximately. */
export const APPROXIMATE_REASON = 'answered only approximately';

export const DAY_MS = 86_400_000;

export function dayNumber(iso: string): number {
  return Math.round(Date.parse(`${iso}T00:00:00Z`) / DAY_MS);
}

export function daysWord(n: number): string {
  return `${n} ${n === 1 ? 'day' : 'days'}`;
}

/** The words asked, quoted, with how they were read when that is not plain (`"Q1 2024", read as the end of that quarter, 2024-03-31`). */
export function askedWords(d: QuestionDate): string {
  return d.reading ? `"${d.text}", read as ${d.reading}` : `"${d.text}"`;
}

/** The date to pass to a tool for a requested date: the day, or the last day of a month / year. */
export function dateArgument(d: QuestionDate): string {
  return d.precision === 'day' ? d.from : d.to;
}

/**
 * The file of `files` for a requested date, and why: the file of that day / period, else the
 * nearest, with the distance (`gapDays`, 0 inside the period). `null` when no file has a readable date.
 */
export function fileForDate(
  fund: string,
  files: readonly HoldingsFileInfo[],
  d: QuestionDate,
): { file: HoldingsFileInfo; why: string; gapDays: number } | null {
  const dated = files.filter((f) => f.asOf !== null);
  if (dated.length === 0) return null;
  const inside = dated.filter((f) => f.asOf! >= d.from && f.asOf! <= d.to);
  if (inside.length > 0) {
    const file = inside[inside.length - 1]!;
    const why =
      d.precision === 'day'
        ? `the file dated ${d.from}, as asked (${askedWords(d)})`
        : `the newest file dated within ${d.from.slice(0, d.precision === 'year' ? 4 : 7)}, as asked (${askedWords(d)})`;
    return { file, why, gapDays: 0 };
  }
  let best: { file: HoldingsFileInfo; gap: number } | null = null;
  for (const f of dated) {
    const n = dayNumber(f.asOf!);
    const gap = n < dayNumber(d.from) ? dayNumber(d.from) - n : n - dayNumber(d.to);
    if (best === null || gap < best.gap) best = { file: f, gap };
  }
  const { file, gap } = best!;
  const side = file.asOf! < d.from ? 'before' : 'after';
  const asked = d.precision === 'day' ? d.from : `${d.from} to ${d.to}`;
  return {
    file,
    gapDays: gap,
    why: `${fund} has no file dated ${d.precision === 'day' ? d.from : `within ${asked}`} (${askedWords(d)}); the nearest is ${file.file}, ${daysWord(gap)} ${side} ${d.precision === 'day' ? 'it' : `the ${side === 'before' ? 'start' : 'end'} of that period`}`,
  };
}

/**
 * The file for each fund: a fund with a requested date gets the file of that date (else the
 * nearest, with the distance); the others get, among their dated files, the combination with the
 * closest as-of dates to each other and to the requested ones (ties: the later), or the newest
 * file when the fund stands alone. An undated file is used only when it is a fund's only file; for
 * a fund whose files are all undated a requested date is passed on unchanged (the tool reports it
 * cannot be met) and, without one, no file is named (the tool refuses to pick by file name).
 */
export function chooseFiles(
  funds: readonly string[],
  filesByFund: ReadonlyMap<string, readonly HoldingsFileInfo[]>,
  requested: ReadonlyMap<string, QuestionDate>,
): Subject[] {
  const chosen = new Map<string, Subject>();
  for (const fund of funds) {
    const files = filesByFund.get(fund) ?? [];
    const d = requested.get(fund);
    if (files.length === 0) chosen.set(fund, { fund, why: 'no holdings file in the data' });
    else if (files.every((f) => f.asOf === null)) {
      // No file can stand for a date, and between several undated files none is the newest: the
      // requested date is passed on (the tool reports it cannot be met), nothing is picked by name.
      if (d) chosen.set(fund, { fund, asOf: dateArgument(d), why: `the date asked (${askedWords(d)}), which none of its files can meet` });
      else if (files.length === 1) chosen.set(fund, { fund, file: files[0]!.file, why: 'its only file, which states no readable date' });
      else chosen.set(fund, { fund, why: 'none of its files states a readable date' });
    } else if (d) {
      const pick = fileForDate(fund, files, d)!;
      chosen.set(fund, { fund, asOf: pick.file.asOf!, file: pick.file.file, why: pick.why, asked: { date: d, gapDays: pick.gapDays } });
    }
  }
  const free = funds.filter((f) => !chosen.has(f));
  const anchors = [...chosen.values()].filter((s) => s.asOf !== undefined && s.file !== undefined).map((s) => s.asOf!);
  if (free.length === 1 && anchors.length === 0) {
    const fund = free[0]!;
    const dated = (filesByFund.get(fund) ?? []).filter((f) => f.asOf !== null);
    const newest = dated[dated.length - 1]!;
    chosen.set(fund, {
      fund,
      asOf: newest.asOf!,
      file: newest.file,
      why: dated.length > 1 ? `the newest of its ${dated.length} dated files` : 'its only dated file',
    });
  } else if (free.length > 0) {
    // Try each dated file of the free funds as the anchor; keep the smallest spread of dates (ties: later).
    const candidates = free.flatMap((f) => (filesByFund.get(f) ?? []).filter((x) => x.asOf !== null).map((x) => x.asOf!));
    let best: { picks: Map<string, HoldingsFileInfo>; spread: number; sum: number } | null = null;
    for (const anchor of candidates) {
      const picks = new Map<string, HoldingsFileInfo>();
      for (const fund of free) {
        const dated = (filesByFund.get(fund) ?? []).filter((x) => x.asOf !== null);
        let pick = dated[0]!;
        for (const x of dated) {
          const gap = Math.abs(dayNumber(x.asOf!) - dayNumber(anchor));
          const bestGap = Math.abs(dayNumber(pick.asOf!) - dayNumber(anchor));
          if (gap < bestGap || (gap === bestGap && x.asOf! > pick.asOf!)) pick = x;
        }
        picks.set(fund, pick);
      }
      const days = [...[...picks.values()].map((x) => dayNumber(x.asOf!)), ...anchors.map(dayNumber)];
      const spread = Math.max(...days) - Math.min(...days);
      const sum = days.reduce((a, b) => a + b, 0);
      if (best === null || spread < best.spread || (spread === best.spread && sum > best.sum)) best = { picks, spread, sum };
    }
    for (const [fund, pick] of best!.picks) {
      const why =
        funds.length === 1
          ? 'its newest file'
          : best!.spread === 0
            ? "the closest dates between the funds' files (all dated the same day)"
            : `the closest dates between the funds' files (all within ${daysWord(best!.spread)} of each other)`;
      chosen.set(fund, { fund, asOf: pick.asOf!, file: pick.file, why });
    }
  }
  return funds.map((f) => chosen.get(f)!);
}

/** Which requested date belongs to which fund: the date written nearest after a fund (else before it); one date serves all. */
export function requestedDates(dates: readonly QuestionDate[], question: string, funds: readonly string[]): Map<string, QuestionDate> {
  const out = new Map<string, QuestionDate>();
  if (dates.length === 0) return out;
  if (dates.length === 1) {
    for (const f of funds) out.set(f, dates[0]!);
    return out;
  }
  const upper = question.toUpperCase();
  const positions = funds.map((f) => ({ fund: f, at: new RegExp(`\\b${f}\\b`).exec(upper)?.index ?? -1 }));
  for (const d of dates) {
    const before = positions.filter((p) => p.at >= 0 && p.at < d.index).sort((x, y) => y.at - x.at);
    const target = before.find((p) => !out.has(p.fund)) ?? positions.find((p) => !out.has(p.fund));
    if (target) out.set(target.fund, d);
  }
  return out;
}
