/**
 * Small pure helpers for the values found in issuer files: numbers written with thousands
 * separators, `%` or `$`; dates as issuers write them (read by chrono-node); tickers in several
 * conventions.
 */
// the English locale alone (`chrono.strict` is this locale's strict parser): the package's index
// loads all 16 locales, about 260 modules in each tool thread
import { strict as chronoStrict } from 'chrono-node/en';

const MONTHS: Record<string, number> = {
  jan: 1,
  feb: 2,
  mar: 3,
  apr: 4,
  may: 5,
  jun: 6,
  jul: 7,
  aug: 8,
  sep: 9,
  oct: 10,
  nov: 11,
  dec: 12,
};

/**
 * Ticker key used for matching across issuers: trimmed, upper-cased, with `.`, `/` and spaces
 * removed, so SSGA's `BRK.B`, iShares' `BRKB` and Invesco's `"NVDA "` compare equal to their
 * counterparts. Returns `null` for a missing ticker or a placeholder (`''`, `'-'`).
 */
export function normaliseTicker(ticker: string | null | undefined): string | null {
  if (ticker == null) return null;
  const key = ticker
    .trim()
    .toUpperCase()
    .replace(/[./\s]/g, '');
  return key === '' || key === '-' ? null : key;
}

/**
 * A cell's text with surrounding whitespace (including non-breaking spaces) removed; `null` when
 * empty or a bare placeholder dash (`-`), which issuers use for "not applicable".
 */
export function cleanText(value: string | null | undefined): string | null {
  if (value == null) return null;
  const text = value.trim();
  return text === '' || text === '-' ? null : text;
}

/**
 * Parses a number as issuers write it: `"41,700,670,815.44"`, `"11.75%"`, `"$727,247,902.97"`,
 * `"(1,234.5)"` (negative), `" 7.15 "`. Returns `null` for empty, `-` or anything not numeric.
 */
export function parseNumberText(value: string | number | null | undefined): number | null {
  if (value == null) return null;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  let text = value.trim().replace(/[,$%\s]/g, '');
  let sign = 1;
  if (/^\(.*\)$/.test(text)) {
    sign = -1;
    text = text.slice(1, -1);
  }
  if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(text)) return null;
  return sign * Number(text);
}

/** `YYYY-MM-DD` for a calendar date, or `null` if the day does not exist (e.g. 31 Feb). */
export function isoDate(year: number, month: number, day: number): string | null {
  if (!Number.isInteger(year) || !Number.isInteger(month) || !Number.isInteger(day)) return null;
  const date = new Date(Date.UTC(year, month - 1, day));
  if (date.getUTCFullYear() !== year || date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) return null;
  return `${String(year).padStart(4, '0')}-${String(month).padStart(2, '0')}-${String(day).padStart(2, '0')}`;
}

/** SSGA preamble date, e.g. `"As of 30-Sep-2025"` or `"30-Sep-2025"` -> `"2025-09-30"`; `null` if absent. */
export function parseDayMonYear(text: string | null | undefined): string | null {
  const m = /(\d{1,2})-([A-Za-z]{3})[a-z]*-(\d{4})/.exec(text ?? '');
  if (!m) return null;
  const month = MONTHS[m[2]!.toLowerCase()];
  return month === undefined ? null : isoDate(Number(m[3]), month, Number(m[1]));
}

/** iShares / fact-sheet date, e.g. `"Nov 18, 2025"` or `"June 30, 2025"` -> `"2025-11-18"`; `null` if absent. */
export function parseMonthDayYear(text: string | null | undefined): string | null {
  const m = /\b([A-Za-z]{3})[a-z]*\.?\s+(\d{1,2}),?\s+(\d{4})\b/.exec(text ?? '');
  if (!m) return null;
  const month = MONTHS[m[1]!.toLowerCase()];
  return month === undefined ? null : isoDate(Number(m[3]), month, Number(m[2]));
}

/** Invesco / ARK row date `"MM/DD/YYYY"` -> `"YYYY-MM-DD"`; `null` if the text is not such a date. */
export function parseUsDate(text: string | null | undefined): string | null {
  const m = /^\s*(\d{1,2})\/(\d{1,2})\/(\d{4})\s*$/.exec(text ?? '');
  return m ? isoDate(Number(m[3]), Number(m[1]), Number(m[2])) : null;
}

/** Whole days between two `YYYY-MM-DD` dates (absolute, so argument order does not matter). */
export function daysBetween(a: string, b: string): number {
  const ms = Math.abs(Date.parse(`${a}T00:00:00Z`) - Date.parse(`${b}T00:00:00Z`));
  return Math.round(ms / 86_400_000);
}

/** Rounds away floating-point noise from sums of percentages (keeps 6 decimals, the finest issuers use). */
export function roundWeight(value: number): number {
  return Math.round(value * 1e6) / 1e6;
}

/**
 * The calendar date a file states in `text`, in any form issuers write (`Nov 18, 2025`,
 * `11/18/2025` (US order), `18-Nov-2025`, `2025-11-18`, `As of 30-Sep-2025`), read by chrono-node's
 * strict parser: only a date with day, month and year all written counts. `null` when the text
 * holds no such date (the caller reports the line as unreadable, never substitutes another date).
 */
export function parseStatedDate(text: string | null | undefined): string | null {
  if (!text) return null;
  const [found] = chronoStrict.parse(text, new Date(Date.UTC(2000, 0, 1)));
  if (!found) return null;
  const { start } = found;
  if (!start.isCertain('day') || !start.isCertain('month') || !start.isCertain('year')) return null;
  return isoDate(start.get('year')!, start.get('month')!, start.get('day')!);
}

/** A numeric cell as read: its value, or the text when the file states something that is not a number. */
export type CellNumber = { value: number } | { value: null; unreadable: string | null };

/**
 * Reads a numeric cell: `{ value }` for a number ({@link parseNumberText}); `{ value: null,
 * unreadable: text }` for a stated value that is not a number (`N/A`, `-`, blank, words), so the
 * caller keeps the line and marks the value instead of taking it as 0; `unreadable: null` when the
 * column is absent.
 */
export function readNumberCell(text: string | number | null | undefined, columnPresent = true): CellNumber {
  if (!columnPresent) return { value: null, unreadable: null };
  const value = parseNumberText(text);
  if (value !== null) return { value };
  return { value: null, unreadable: typeof text === 'number' ? String(text) : (text ?? '').trim() };
}
