/**
 * Small pure helpers for the values found in issuer files: numbers written with thousands
 * separators, `%` or `$`; dates as issuers write them (read by chrono-node); tickers in several
 * conventions.
 */
import * as chrono from 'chrono-node';

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
  const [found] = chrono.strict.parse(text, new Date(Date.UTC(2000, 0, 1)));
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

/** A date a question asks about, as the person wrote it, with the span of days it names. */
export interface QuestionDate {
  /** The words as written (`Dec 6, 2024`, `end of 2024`, `as of 2018`, `Q1 2024`, `now`). */
  text: string;
  /** Character offset in the question. */
  index: number;
  /** `day` = one day; `month` / `year` = every day of that month / year. */
  precision: 'day' | 'month' | 'year';
  /** First and last day named, `YYYY-MM-DD` (equal for `day`). */
  from: string;
  to: string;
  /**
   * How the words were read when that is not plain from them, for the answer to say so:
   * `the end of Q1 2024, 2024-03-31`, `the current date, 2026-11-30`, `2025, the year before the current date (2026-11-30)`.
   */
  reading?: string;
}

/** A phrase of the question that looks like a date but cannot be read as one (never silently ignored). */
export interface UnreadableDate {
  /** The words as written (`2025-09-31`, `Q5 2024`). */
  text: string;
  /** Character offset in the question. */
  index: number;
  /** Why, in plain words (`there is no such day`, `not a date form that can be read`). */
  reason: string;
}

/**
 * `end of 2024`, `year-end 2024` -> the last day; `as of 2018`, `in 2018`, `since 2020`,
 * `compared with 2021`, or a bare `2021` -> the whole year (tagged `runplane/year`). chrono itself
 * drops a bare four-digit number; a longer date around the year (`6 December 2024`) wins, as
 * chrono keeps the longer of overlapping results.
 */
const YEAR_PARSER: chrono.Parser = {
  pattern: () =>
    /(?<![\d/.\-'])(?<!russell\s)\b(?:(as of|in|for|during|since|from|end of|year[- ]end|compared (?:with|to)|against|versus|vs\.?|than)\s+)?((?:19|20)\d{2})\b(?![-/.]\d|\s*%)/i,
  extract: (context, match) => {
    const components = context.createParsingComponents({ year: Number(match[2]), month: 12, day: 31 });
    if (!/end/i.test(match[1] ?? '')) components.addTag('runplane/year');
    return components;
  },
};

/** `Q1 2024`, `2024 Q1`, `Q1-2024`, `first quarter of 2024` -> the quarter's last day (tagged `runplane/quarter`). */
const QUARTER_WORDS: Record<string, number> = { first: 1, second: 2, third: 3, fourth: 4, q1: 1, q2: 2, q3: 3, q4: 4 };
const QUARTER_PARSER: chrono.Parser = {
  pattern: () =>
    /\b(?:(Q[1-4])[\s\-/]*((?:19|20)\d{2})|((?:19|20)\d{2})[\s\-/]*(Q[1-4])|(first|second|third|fourth) quarter(?: of)?\s+((?:19|20)\d{2}))\b/i,
  extract: (context, match) => {
    const quarter = QUARTER_WORDS[(match[1] ?? match[4] ?? match[5])!.toLowerCase()]!;
    const year = Number(match[2] ?? match[3] ?? match[6]);
    const month = quarter * 3;
    const components = context.createParsingComponents({ year, month, day: new Date(Date.UTC(year, month, 0)).getUTCDate() });
    components.addTag('runplane/quarter');
    return components;
  },
};

/** `current`, `currently`, `at present`, `present`: the current date (tagged `runplane/current`). */
const CURRENT_PARSER: chrono.Parser = {
  pattern: () => /\b(currently|current|at present|presently)\b/i,
  extract: (context) => {
    const now = context.reference.instant;
    const components = context.createParsingComponents({ year: now.getUTCFullYear(), month: now.getUTCMonth() + 1, day: now.getUTCDate() });
    components.addTag('runplane/current');
    return components;
  },
};

const questionParser = (() => {
  const parser = chrono.casual.clone();
  parser.parsers.push(YEAR_PARSER, QUARTER_PARSER, CURRENT_PARSER);
  return parser;
})();

/** Relative words the question reader takes (against the current date); other relative words (`Friday`, `noon`) say nothing about files. */
const RELATIVE_WORDS =
  /\b(today|now|current|currently|presently|present|yesterday|ago|(?:this|last|past|previous|next) (?:year|month|week|quarter))\b/i;

/** Phrases that look like a date; one not covered by a date read is reported as unreadable. */
const DATE_LIKE: readonly RegExp[] = [
  /\b\d{4}-\d{1,2}-\d{1,2}\b/g,
  /\b\d{1,2}\/\d{1,2}\/\d{2,4}\b/g,
  /\b\d{1,2}-[A-Za-z]{3,9}-\d{2,4}\b/g,
  /\bQ\d\b(?:[\s\-/]*(?:19|20)?\d{2}\b)?/g,
  /\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4}\b/gi,
  /\b\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?,?\s+\d{4}\b/gi,
  /\bas of\s+(?:the\s+)?[^\s,.;:?!]+(?:\s+(?!and\b|or\b|compared\b|vs\b|versus\b)[^\s,.;:?!]+){0,2}/gi,
];

/** The UTC calendar date of an instant as `YYYY-MM-DD`. */
export function isoDay(instant: Date): string {
  return instant.toISOString().slice(0, 10);
}

/**
 * The dates a question names, in the forms people write (`Dec 6, 2024`, `6 December 2024`,
 * `2024-12-06`, `12/06/2024` (US order), `December 2024`, `as of 2018`, `end of 2024`, a bare year
 * `compared with 2021`, quarters `Q1 2024` (read as the quarter's last day), and relative words
 * against `now`: `today` / `now` / `current` (the current date), `last year`, `3 months ago`), read
 * by chrono-node (its casual English parser plus year, quarter and "current" rules). In question
 * order, without repeats. `unreadable` lists the date-like phrases that could not be read or name
 * no real day (`2025-09-31`, `Q5 2024`), so the caller reports them instead of ignoring them.
 *
 * @param now the current instant (UTC date used); pass the clock in, tests fix it.
 */
export function readQuestionDates(question: string, now: Date = new Date()): { dates: QuestionDate[]; unreadable: UnreadableDate[] } {
  const today = isoDay(now);
  const dates: QuestionDate[] = [];
  const unreadable: UnreadableDate[] = [];
  const covered: [number, number][] = [];
  const reference = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), 12));
  for (const found of questionParser.parse(question, { instant: reference, timezone: 0 })) {
    const { start } = found;
    const tags = found.tags();
    const relative = !/\d{4}/.test(found.text);
    // Relative words count only from the list above ("Friday", "noon" say nothing about the files).
    if (relative && !(RELATIVE_WORDS.test(found.text) && start.isCertain('year')) && !tags.has('runplane/current')) continue;
    if (!relative && !start.isCertain('year')) continue;
    covered.push([found.index, found.index + found.text.length]);
    const year = start.get('year')!;
    let q: QuestionDate | null = null;
    const base = { text: found.text, index: found.index };
    if (tags.has('runplane/year')) {
      q = { ...base, precision: 'year', from: `${year}-01-01`, to: `${year}-12-31` };
    } else if (tags.has('runplane/quarter')) {
      const day = isoDate(year, start.get('month')!, start.get('day')!)!;
      q = { ...base, precision: 'day', from: day, to: day, reading: `the end of that quarter, ${day}` };
    } else if (relative && /\bago\b/i.test(found.text)) {
      const day = isoDate(year, start.get('month')!, start.get('day')!)!;
      q = { ...base, precision: 'day', from: day, to: day, reading: `${day}, counted back from the current date (${today})` };
    } else if (start.isCertain('day') && start.isCertain('month')) {
      const day = isoDate(year, start.get('month')!, start.get('day')!);
      if (day)
        q = {
          ...base,
          precision: 'day',
          from: day,
          to: day,
          ...(relative ? { reading: day === today ? `the current date, ${day}` : `${day}, relative to the current date (${today})` } : {}),
        };
      else unreadable.push({ ...base, reason: 'there is no such day' });
    } else if (start.isCertain('month')) {
      const month = start.get('month')!;
      const last = new Date(Date.UTC(year, month, 0)).getUTCDate();
      q = { ...base, precision: 'month', from: isoDate(year, month, 1)!, to: isoDate(year, month, last)! };
      if (relative) q.reading = `${q.from.slice(0, 7)}, relative to the current date (${today})`;
    } else if (relative) {
      q = {
        ...base,
        precision: 'year',
        from: `${year}-01-01`,
        to: `${year}-12-31`,
        reading: `the year ${year}, relative to the current date (${today})`,
      };
    }
    if (q && !dates.some((o) => o.from === q.from && o.to === q.to)) dates.push(q);
  }
  for (const pattern of DATE_LIKE) {
    for (const m of question.matchAll(pattern)) {
      const at = m.index;
      const end = at + m[0].length;
      if (covered.some(([s, e]) => at < e && end > s)) continue;
      if (unreadable.some((u) => at < u.index + u.text.length && end > u.index)) continue;
      const iso = /^(\d{4})-(\d{1,2})-(\d{1,2})$/.exec(m[0]);
      const us = /^(\d{1,2})\/(\d{1,2})\/(\d{4})$/.exec(m[0]);
      const impossible = (iso && !isoDate(+iso[1]!, +iso[2]!, +iso[3]!)) || (us && !isoDate(+us[3]!, +us[1]!, +us[2]!));
      unreadable.push({
        text: m[0],
        index: at,
        reason: impossible
          ? 'there is no such day'
          : /^Q\d/i.test(m[0])
            ? 'not a quarter with a year that can be read (Q1-Q4 and a year)'
            : 'not a date that can be read',
      });
    }
  }
  unreadable.sort((x, y) => x.index - y.index);
  return { dates, unreadable };
}

/** The dates {@link readQuestionDates} reads (the unreadable phrases left out). */
export function questionDates(question: string, now: Date = new Date()): QuestionDate[] {
  return readQuestionDates(question, now).dates;
}
