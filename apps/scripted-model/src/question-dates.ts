/**
 * The dates a question names, read for the scripted model's research policy (a test double, not
 * the product: moved here from `@runplane/holdings`, which the tools service ships, since nothing
 * in the product reads questions). Pure; the clock is passed in.
 */
import * as chrono from 'chrono-node';
import { isoDate } from '@runplane/holdings';

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

/**
 * True for a `now` that opens a sentence or clause and leads into it (`Now also compare QQQ with
 * IVV`, `OK. Now, what does SPY hold?`, `and now compare...`): it orders the conversation, it names
 * no date. A `now` that names the time of the holdings (`What does SPY hold now?`, `as of now`,
 * `right now`) is still the current date.
 */
function isDiscourseNow(question: string, index: number, text: string): boolean {
  if (!/^now$/i.test(text)) return false;
  const before = question.slice(0, index);
  const opens = /(^|[.!?;:]\s*|\b(?:and|so|ok|okay|then|but)\s*,?\s*)$/i.test(before);
  const leadsOn = /^\s*,?\s*[A-Za-z]/.test(question.slice(index + text.length));
  return opens && leadsOn;
}

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
    if (isDiscourseNow(question, found.index, found.text)) continue;
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
