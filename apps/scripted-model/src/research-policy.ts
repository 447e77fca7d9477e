/**
 * The offline research policy: a deterministic stand-in for a model that answers fund-holdings
 * questions with the tool pack of `@runplane/contracts`. It is a pure function of the request's
 * messages and tools; every figure in its answer is read from the tool results in the messages.
 *
 * Plan for one user question (only messages after the last user message count):
 * 1. nothing called yet: call `list_funds` (when offered);
 * 2. then, in one turn, `get_holdings` for every fund the question mentions (covered or not; with
 *    `top` when it asks for a "top N"), `compare_holdings` for every pair of covered funds (up to
 *    {@link MAX_COMPARED_FUNDS}; one fund and two dates = that fund's two files), and
 *    `fund_metadata` per fund when it asks for fund facts. Files are chosen by {@link chooseFiles}:
 *    the dates the question names (in any form people write them), else the closest dates between
 *    the funds, else the newest;
 * 3. once every call has a tool message: the final answer, passages separated by blank lines,
 *    ending with the parts it could not answer as a fenced JSON block ({@link UNANSWERED_FENCE}).
 */
import {
  CompareHoldingsResult,
  FundMetadataResult,
  GetHoldingsResult,
  ListFundsResult,
  ToolMessageContent,
  type FileSelection,
  type HoldingsFileInfo,
  type HoldingLine,
  type HoldingsSummary,
  UNANSWERED_FENCE,
  type UnansweredPart,
} from '@runplane/contracts';
import { isoDay, readQuestionDates, type QuestionDate, type UnreadableDate } from './question-dates.js';
import type { z } from 'zod';
import { contentText, type Reply, type ReplyToolCall, type WireMessage, type WireTool } from './wire.js';

// ---- reading the conversation -----------------------------------------------------------------

/** How one tool call of the current turn ended, as the tool message reports it. */
export type CallOutcome =
  | { status: 'succeeded'; result: unknown }
  | { status: 'failed' | 'denied' | 'unknown'; error: { code: string; message: string } }
  /** No tool message answers this call. */
  | { status: 'missing' }
  /** The tool message is not a {@link ToolMessageContent} JSON. */
  | { status: 'unreadable'; text: string };

export interface CallRecord {
  id: string;
  name: string;
  args: Record<string, unknown>;
  outcome: CallOutcome;
}

/** The text of the last user message ('' when there is none). */
export function lastQuestion(messages: readonly WireMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (m?.role === 'user') return contentText(m.content);
  }
  return '';
}

function parseArgs(s: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(s);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function parseOutcome(text: string): CallOutcome {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { status: 'unreadable', text };
  }
  const parsed = ToolMessageContent.safeParse(json);
  return parsed.success ? parsed.data : { status: 'unreadable', text };
}

/**
 * The tool calls the assistant made since the last user message, in order, each with the outcome
 * its tool message reports (`missing` when no tool message answers it).
 */
export function currentTurnCalls(messages: readonly WireMessage[]): CallRecord[] {
  let start = 0;
  messages.forEach((m, i) => {
    if (m.role === 'user') start = i + 1;
  });
  const turn = messages.slice(start);
  const results = new Map<string, string>();
  for (const m of turn) if (m.role === 'tool') results.set(m.tool_call_id, contentText(m.content));
  const calls: CallRecord[] = [];
  for (const m of turn) {
    if (m.role !== 'assistant') continue;
    for (const c of m.tool_calls ?? []) {
      const text = results.get(c.id);
      calls.push({
        id: c.id,
        name: c.function.name,
        args: parseArgs(c.function.arguments),
        outcome: text === undefined ? { status: 'missing' } : parseOutcome(text),
      });
    }
  }
  return calls;
}

// ---- reading the question ---------------------------------------------------------------------

/** Upper-case words that look like tickers but are not funds. */
export const STOP_WORDS: ReadonlySet<string> = new Set(
  (
    'A I AN AND OR THE OF IN ON AT TO BY FOR AS IS IT BE NO NOT ANY ALL ARE WAS DO DOES HOW WHAT WHY WHO WHEN ' +
    'WITH FROM VS VS. ETF ETFS FUND USD EUR GBP US USA UK EU S&P NAV ISIN CUSIP SEDOL SEC AUM ER TER YTD QTD MTD ' +
    'CSV XLSX XLS PDF JSON API ID IDS OK IPO CEO CFO AI FAQ NB PS TLDR ASAP NYSE AMEX MSCI CRSP FTSE GICS ' +
    'REIT ADR GDP CPI FX EPS PE DIV TBD NA SPDR INC LLC PLC ESG MMF'
  ).split(/\s+/),
);

/** Day dates (YYYY-MM-DD) the text names in any written form (`Dec 6, 2024`, `12/06/2024`...), in order, without repeats. */
export function mentionedDates(text: string, now: Date = new Date()): string[] {
  return readQuestionDates(text, now)
    .dates.filter((d) => d.precision === 'day')
    .map((d) => d.from);
}

/** The question with its date phrases (read or unreadable) blanked out, so no fund is taken from them (`Q1 2024` is not fund `Q`). */
function withoutDatePhrases(question: string): string {
  const { dates, unreadable } = readQuestionDates(question);
  let out = question;
  for (const d of [...dates, ...unreadable]) out = out.slice(0, d.index) + ' '.repeat(d.text.length) + out.slice(d.index + d.text.length);
  return out;
}

/**
 * Fund tickers the question mentions, in question order without repeats: any token naming a known
 * fund (any case, 3+ letters), plus upper-case tokens of 1-5 letters that are not {@link STOP_WORDS}.
 * With known funds (the data's list), such a token that is not one of them counts only in a fund
 * position ({@link inFundPosition}: `holdings of XYZQ`, `Compare SPY with XYZQ`, `XYZQ holdings`),
 * so a security (`tell me about NVDA`), an issuer's name (`ARK Innovation`) or an emphasised word is
 * never researched nor listed as a fund not covered. Words inside date phrases (`Q1 2024`, `as of
 * the 45th of Smarch`) are never funds.
 */
export function mentionedFunds(question: string, knownFunds: Iterable<string> = []): string[] {
  const known = new Set([...knownFunds].map((f) => f.toUpperCase()));
  const words = [...withoutDatePhrases(question).matchAll(/[A-Za-z][A-Za-z&]*|[,(]/g)].map((m) => m[0]);
  const out: string[] = [];
  words.forEach((raw, i) => {
    const upper = raw.toUpperCase();
    if (STOP_WORDS.has(upper) || out.includes(upper)) return;
    const isKnown = known.has(upper) && (raw === upper || raw.length >= 3);
    const looksLikeTicker = /^[A-Z]{1,5}$/.test(raw);
    if (isKnown || (looksLikeTicker && (known.size === 0 || inFundPosition(words, i, (w) => known.has(w.toUpperCase()) || out.includes(w)))))
      out.push(upper);
  });
  return out;
}

/** Words that join funds named together (`SPY and QQQ`, `SPY vs QQQ`, `EEM, ODD`). */
const JOINERS = new Set(['and', 'or', 'with', 'vs', 'versus', 'against', 'to', ',', '(']);
/** Words a fund follows (`holdings of XYZQ`, `compare XYZQ`) or that follow a fund (`XYZQ holdings`). */
const LEADS = new Set(['compare', 'of', 'for', 'fund', 'etf']);
const TRAILS = new Set(['holdings', 'holding', 'fund', 'funds', 'etf', 'etfs', 'vs', 'versus']);

/**
 * True when the word at `i` of `words` (the question's words, `,` and `(` kept) stands where a
 * fund is named: after a lead word (`compare`, `of`, `for`), after or before another fund across a
 * joiner (`and`, `with`, `vs`, `,`), or before `holdings` / `fund` / `ETF`; never when a capitalised
 * word follows it (`ARK Innovation`: part of a name).
 */
function inFundPosition(words: readonly string[], i: number, isFund: (word: string) => boolean): boolean {
  const next = words[i + 1];
  if (next && /^[A-Z][a-z]/.test(next) && !TRAILS.has(next.toLowerCase())) return false;
  if (next && TRAILS.has(next.toLowerCase())) return true;
  let j = i - 1;
  while (j >= 0 && JOINERS.has(words[j]!.toLowerCase())) j--;
  const joinedBefore = j < i - 1;
  if (j >= 0 && (LEADS.has(words[j]!.toLowerCase()) || (joinedBefore && isFund(words[j]!)))) return true;
  let k = i + 1;
  while (k < words.length && JOINERS.has(words[k]!.toLowerCase())) k++;
  return k > i + 1 && k < words.length && isFund(words[k]!);
}

// ---- planning ---------------------------------------------------------------------------------

/** The dated file of `files` whose as-of date is the first of `dates` to match one, if any. */
function pinnedFile(files: readonly HoldingsFileInfo[], dates: readonly string[]): HoldingsFileInfo | undefined {
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

const METADATA_WORDS = /\b(expense ratio|expenses?|inception|shares outstanding|metadata|fact ?sheet|benchmark|fees?|net assets|dividend)\b/i;
const HOLDINGS_WORDS =
  /\b(holdings?|hold|holds|compare|comparison|overlap|top|weights?|gaps?|coverage|securities|stocks|names|changed?|since|vs\.?|versus)\b/i;
const CHANGE_WORDS = /\b(since|changed?|changes|evolved?|latest|newest)\b/i;
const NUMBER_WORDS: Record<string, number> = { five: 5, ten: 10, twenty: 20, fifteen: 15, three: 3 };

/** Most funds compared pairwise in one answer; further funds get holdings but no comparison (listed as unanswered). */
export const MAX_COMPARED_FUNDS = 4;

/** The N of "top N" / "N largest" in the question (1-500), or `null`. */
export function topN(question: string): number | null {
  const m = /\btop[- ](\d{1,3}|five|ten|fifteen|twenty|three)\b|\b(\d{1,3}|five|ten|twenty) (?:largest|biggest|heaviest)\b/i.exec(question);
  const word = (m?.[1] ?? m?.[2])?.toLowerCase();
  if (!word) return null;
  const n = NUMBER_WORDS[word] ?? Number(word);
  return n >= 1 && n <= 500 ? n : null;
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
const APPROXIMATE_REASON = 'answered only approximately';

const DAY_MS = 86_400_000;
function dayNumber(iso: string): number {
  return Math.round(Date.parse(`${iso}T00:00:00Z`) / DAY_MS);
}
function daysWord(n: number): string {
  return `${n} ${n === 1 ? 'day' : 'days'}`;
}

/** The words asked, quoted, with how they were read when that is not plain (`"Q1 2024", read as the end of that quarter, 2024-03-31`). */
function askedWords(d: QuestionDate): string {
  return d.reading ? `"${d.text}", read as ${d.reading}` : `"${d.text}"`;
}

/** The date to pass to a tool for a requested date: the day, or the last day of a month / year. */
function dateArgument(d: QuestionDate): string {
  return d.precision === 'day' ? d.from : d.to;
}

/**
 * The file of `files` for a requested date, and why: the file of that day / period, else the
 * nearest, with the distance (`gapDays`, 0 inside the period). `null` when no file has a readable date.
 */
function fileForDate(
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
function requestedDates(dates: readonly QuestionDate[], question: string, funds: readonly string[]): Map<string, QuestionDate> {
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

/**
 * What the question asks for: the subjects (fund + file + why), the pairs to compare, the funds
 * whose facts it asks for, a "top N", and the parts that cannot be planned or are answered only
 * approximately: too many funds, a date phrase that cannot be read, a requested date (`today`
 * included) met by a file more than {@link APPROXIMATE_AFTER_DAYS} days away, or a requested date
 * that none of a fund's files can meet.
 *
 * @param now the current instant; `today` / `now` / `current` / `last year` are read against it.
 */
export function questionPlan(question: string, funds: ListFundsResult | null, now: Date = new Date()) {
  const filesByFund = new Map<string, HoldingsFileInfo[]>((funds?.funds ?? []).map((f) => [f.fund.toUpperCase(), f.files]));
  const mentioned = mentionedFunds(question, filesByFund.keys());
  const covered = funds ? mentioned.filter((f) => (filesByFund.get(f)?.length ?? 0) > 0) : mentioned;
  const wantsFacts = METADATA_WORDS.test(question);
  const wantsHoldings = !wantsFacts || HOLDINGS_WORDS.test(question);
  const unplanned: UnansweredPart[] = [];
  const { dates, unreadable } = readQuestionDates(question, now);
  for (const u of unreadable) unplanned.push({ part: `the date "${u.text}"`, reason: u.reason });
  let subjects: Subject[] = [];
  const pairs: [number, number][] = [];
  const oneFund = covered.length === 1 ? covered[0]! : null;
  const oneFundFiles = oneFund ? (filesByFund.get(oneFund) ?? []) : [];
  if (oneFund && funds && oneFundFiles.some((f) => f.asOf !== null) && (dates.length >= 2 || (dates.length === 1 && CHANGE_WORDS.test(question)))) {
    // One fund at several dates: its file of each date (one date and "since": that date against
    // the newest). Dates met by the same file share it, and its reason names each of them.
    const picks: Subject[] = [];
    for (const d of dates.slice(0, MAX_COMPARED_FUNDS)) {
      const pick = fileForDate(oneFund, oneFundFiles, d)!;
      const same = picks.find((p) => p.file === pick.file.file);
      if (same) same.why = `${same.why}; it is also ${alsoFor(d, pick)}`;
      else picks.push({ fund: oneFund, asOf: pick.file.asOf!, file: pick.file.file, why: pick.why, asked: { date: d, gapDays: pick.gapDays } });
      approximate(oneFund, d, pick, unplanned);
    }
    if (dates.length === 1) {
      const dated = oneFundFiles.filter((f) => f.asOf !== null);
      const newest = dated[dated.length - 1]!;
      if (newest.file !== picks[0]!.file)
        picks.push({ fund: oneFund, asOf: newest.asOf!, file: newest.file, why: 'its newest file, to compare against' });
    }
    if (picks.length >= 2) {
      // Oldest first, so each comparison reads as "then" against "later".
      subjects = [...picks].sort((x, y) => (x.asOf! < y.asOf! ? -1 : 1));
      for (let i = 0; i + 1 < subjects.length; i++) pairs.push([i, i + 1]);
    } else {
      subjects = picks;
      unplanned.push({
        part: `how ${oneFund} changed between the dates asked`,
        reason: `every date asked leads to the same file (${picks[0]!.file})`,
      });
    }
  }
  if (subjects.length === 0) {
    const requested = requestedDates(dates, question, covered);
    subjects = funds ? chooseFiles(covered, filesByFund, requested) : covered.map((fund) => ({ fund, why: 'chosen by the tool' }));
    for (const s of subjects) {
      if (s.asked) approximate(s.fund, s.asked.date, { file: { file: s.file!, asOf: s.asOf! }, gapDays: s.asked.gapDays }, unplanned);
    }
    const compared = Math.min(subjects.length, MAX_COMPARED_FUNDS);
    for (let i = 0; i < compared; i++) for (let j = i + 1; j < compared; j++) pairs.push([i, j]);
    if (subjects.length > MAX_COMPARED_FUNDS) {
      for (const s of subjects.slice(MAX_COMPARED_FUNDS)) {
        unplanned.push({
          part: `comparison of ${s.fund} with the other funds`,
          reason: `only the first ${MAX_COMPARED_FUNDS} funds named are compared pairwise`,
        });
      }
    }
  }
  const uncovered = mentioned.filter((f) => !covered.includes(f));
  return {
    mentioned,
    covered,
    uncovered,
    subjects,
    pairs,
    wantsFacts,
    wantsHoldings,
    top: topN(question),
    unplanned,
    unreadable,
    today: isoDay(now),
  };
}

/** The same file standing for a further date, without repeating the first reason: `the nearest to 2026-11-30 ("now", ...), 909 days before it`. */
function alsoFor(d: QuestionDate, pick: { file: HoldingsFileInfo; gapDays: number }): string {
  if (pick.gapDays === 0) return `the file for ${askedWords(d)}`;
  const side = pick.file.asOf! < d.from ? 'before' : 'after';
  return `the nearest to ${d.precision === 'day' ? d.from : `${d.from} to ${d.to}`} (${askedWords(d)}), ${daysWord(pick.gapDays)} ${side} ${d.precision === 'day' ? 'it' : 'that period'}`;
}

/** Lists a requested date met by a file more than {@link APPROXIMATE_AFTER_DAYS} days away as answered only approximately. */
function approximate(
  fund: string,
  d: QuestionDate,
  pick: { file: Pick<HoldingsFileInfo, 'file' | 'asOf'>; gapDays: number },
  unplanned: UnansweredPart[],
): void {
  if (pick.gapDays <= APPROXIMATE_AFTER_DAYS) return;
  const when = d.precision === 'day' ? d.from : d.precision === 'month' ? d.from.slice(0, 7) : d.from.slice(0, 4);
  unplanned.push({
    part: d.text.includes(when) ? `${fund} as of ${when}` : `${fund} as of ${when} ("${d.text}")`,
    reason: `${APPROXIMATE_REASON}, from ${pick.file.file}, ${daysWord(pick.gapDays)} away (more than ${APPROXIMATE_AFTER_DAYS})`,
  });
}

/**
 * The research calls for the question, given the list_funds result (null when list_funds was not
 * available or did not succeed): see {@link questionPlan}. Only tools in `offered` are planned.
 * Empty when the question mentions no fund.
 */
export function planResearch(question: string, funds: ListFundsResult | null, offered: ReadonlySet<string>, now: Date = new Date()): ReplyToolCall[] {
  const plan = questionPlan(question, funds, now);
  if (plan.mentioned.length === 0) return [];
  const calls: ReplyToolCall[] = [];
  const top = plan.top !== null ? { top: plan.top } : {};
  if (offered.has('get_holdings') && plan.wantsHoldings) {
    for (const s of plan.subjects) calls.push({ name: 'get_holdings', arguments: { fund: s.fund, ...(s.asOf ? { asOf: s.asOf } : {}), ...top } });
    for (const fund of plan.uncovered) calls.push({ name: 'get_holdings', arguments: { fund } });
  }
  if (offered.has('compare_holdings') && plan.wantsHoldings) {
    for (const [i, j] of plan.pairs) {
      const [a, b] = [plan.subjects[i]!, plan.subjects[j]!];
      calls.push({
        name: 'compare_holdings',
        arguments: { fundA: a.fund, fundB: b.fund, ...(a.asOf ? { asOfA: a.asOf } : {}), ...(b.asOf ? { asOfB: b.asOf } : {}) },
      });
    }
  }
  if (plan.wantsFacts && offered.has('fund_metadata')) {
    for (const fund of plan.mentioned) calls.push({ name: 'fund_metadata', arguments: { fund } });
  }
  return calls;
}

// ---- writing ----------------------------------------------------------------------------------

/** A derived percentage, 1 decimal: `95.2%`. */
function pct1(x: number): string {
  return `${x.toFixed(1)}%`;
}

/** A weight or weight sum from a file, 2 decimals: `100.25%`, `0.26%`; an unreadable one says so. */
function pct2(x: number | null): string {
  return x === null ? 'weight unreadable' : `${x.toFixed(2)}%`;
}

/** A line's label: its ticker, or the name next to a bare exchange code (`TAIWAN SEMICONDUCTOR (2330)`) or when there is no ticker. */
function label(line: HoldingLine): string {
  if (line.ticker === null) return line.name;
  return /^[A-Za-z]/.test(line.ticker) ? line.ticker : `${line.name} (${line.ticker})`;
}

function listNames(lines: readonly HoldingLine[], max = 20): string {
  if (lines.length <= max) return lines.map(label).join(', ');
  const shown = 10;
  return `${lines.slice(0, shown).map(label).join(', ')} and ${lines.length - shown} more`;
}

function sumWeights(lines: readonly HoldingLine[]): number {
  return lines.reduce((s, l) => s + (l.weight ?? 0), 0);
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** The date of a file as the answer states it: read from inside, unreadable, or absent. */
function dateText(info: { asOf: string | null; provenance?: { asOfHow: string; asOfText: string | null } }): string {
  if (info.asOf) return `as of ${info.asOf}`;
  if (info.provenance?.asOfHow === 'unreadable') return `with a date line that cannot be read ("${info.provenance.asOfText ?? ''}")`;
  return 'undated (the file states no date)';
}

const KIND_WORDS: Record<string, [string, string]> = {
  cash: ['a cash line', 'cash lines'],
  'money-market': ['a money-market line', 'money-market lines'],
  futures: ['a futures line', 'futures lines'],
  collateral: ['a collateral line', 'collateral lines'],
  other: ['another non-security line', 'other non-security lines'],
};

/** Non-security lines listed one by one up to this many; more are summarised with a count. */
const LIST_NON_SECURITY_MAX = 5;

/** "503 securities plus a cash line", "101 securities" ... */
function countText(s: HoldingsSummary): string {
  const byKind = new Map<string, number>();
  for (const l of s.nonSecurityLines) byKind.set(l.kind, (byKind.get(l.kind) ?? 0) + 1);
  const parts = [...byKind].map(([kind, n]) => {
    const [one, many] = KIND_WORDS[kind] ?? [`a ${kind} line`, `${kind} lines`];
    return n === 1 ? one : `${n} ${many}`;
  });
  const base = plural(s.securityCount, 'security', 'securities');
  if (parts.length === 0) return base;
  const joined = parts.length === 1 ? parts[0] : `${parts.slice(0, -1).join(', ')} and ${parts[parts.length - 1]}`;
  return `${base} plus ${joined}`;
}

function nonSecurityText(s: HoldingsSummary): string {
  const lines = s.nonSecurityLines;
  const one = (l: HoldingLine) => `${l.name}${l.ticker ? ` (${l.ticker})` : ''} ${pct2(l.weight)}`;
  if (lines.length <= LIST_NON_SECURITY_MAX) return lines.map(one).join(', ');
  const heaviest = [...lines].sort((x, y) => Math.abs(y.weight ?? 0) - Math.abs(x.weight ?? 0)).slice(0, 3);
  return `${lines.length} non-security lines together ${pct2(sumWeights(lines))}, the largest ${heaviest.map(one).join(', ')}`;
}

function unreadableText(s: HoldingsSummary): string | null {
  const lines = s.unreadableWeightLines;
  if (lines.length === 0) return null;
  const shown = lines
    .slice(0, 5)
    .map((l) => `${label(l)} "${l.unreadable?.find((u) => u.field === 'weight')?.text ?? ''}"`)
    .join(', ');
  return (
    `${plural(lines.length, 'line states a weight', 'lines state a weight')} that cannot be read (${shown}${lines.length > 5 ? ', ...' : ''}): ` +
    'they are kept, not counted as 0, and the sums leave them out, so those sums and any figure built on them are lower bounds'
  );
}

function fundPassage(
  name: string,
  s: HoldingsSummary,
  top: readonly HoldingLine[],
  topCount: number,
  why: string | undefined,
  stated: boolean,
): string {
  const how = why === undefined ? '' : why.startsWith(`${s.fund} has no file`) ? `, chosen because ${why}` : `, chosen as ${why}`;
  const sentences = [`${name} ${dateText(s)} (file ${s.file}${how}): ${countText(s)}.`];
  const sums = `${stated ? 'Its weights sum to' : 'Weights sum to'} ${pct2(s.weightSum)}${stated ? ' as the file states them, not renormalised' : ''}`;
  sentences.push(s.nonSecurityLines.length > 0 ? `${sums} (securities ${pct2(s.securitiesWeightSum)}; ${nonSecurityText(s)}).` : `${sums}.`);
  const unreadable = unreadableText(s);
  if (unreadable) sentences.push(`${capitalize(unreadable)}.`);
  if (top.length > 0) {
    const shown = top.slice(0, topCount);
    const heading = topCount === 5 ? 'Largest holdings' : `Top ${shown.length} holdings`;
    sentences.push(`${heading}: ${shown.map((l) => `${label(l)} ${pct2(l.weight)}`).join(', ')}.`);
  }
  return sentences.join(' ');
}

function daysText(days: number | null): string {
  if (days === null) return 'at least one file has no readable date, so the days between them are unknown';
  if (days === 0) return 'both files are dated the same day';
  return `the disclosure dates are ${plural(days, 'day', 'days')} apart`;
}

function fileNameCheck(info: HoldingsSummary): string {
  const named = info.file.match(/\d{4}-\d{2}-\d{2}/)?.[0];
  if (info.asOf === null) {
    const how =
      info.provenance?.asOfHow === 'unreadable'
        ? `has a date line ("${info.provenance.asOfText ?? ''}") that cannot be read as a date`
        : 'states no date inside, so it is treated as undated';
    return `${info.file} ${how}${named ? ` (its name says ${named}, which is not used)` : ''}`;
  }
  if (!named) return `${info.file} states ${info.asOf}`;
  if (named === info.asOf) return `${info.file} states ${info.asOf} (its name agrees)`;
  return `${info.file} states ${info.asOf} (its name says ${named}; the date inside the file is used)`;
}

function datesPassage(files: readonly HoldingsSummary[], funds: ListFundsResult | null): string {
  const sentences = [`Disclosure dates were verified from inside each file, not taken from file names: ${files.map(fileNameCheck).join('; ')}.`];
  if (funds) {
    const used = new Set(files.map((f) => f.file));
    const others = [...new Set(files.map((f) => f.fund.toUpperCase()))]
      .map((fund) => {
        const rest = (funds.funds.find((f) => f.fund.toUpperCase() === fund)?.files ?? []).filter((f) => !used.has(f.file));
        return rest.length > 0 ? `${fund} ${rest.map((f) => f.asOf ?? `${f.file} (no readable date)`).join(', ')}` : null;
      })
      .filter((x): x is string => x !== null);
    if (others.length > 0) sentences.push(`Other holdings files in the data: ${others.join('; ')}.`);
  }
  return sentences.join(' ');
}

/**
 * A tool argument as text: strings, numbers and booleans as they are, anything else the model sent
 * as JSON (never `[object Object]`), `fallback` when it is missing.
 */
function argText(value: unknown, fallback = ''): string {
  if (value === undefined || value === null) return fallback;
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' ? String(value) : JSON.stringify(value);
}

/** A call in the user's words (no tool names). */
function describeCall(c: CallRecord): string {
  const a = c.args;
  if (c.name === 'get_holdings') return `reading the holdings of ${argText(a.fund, '?')}${a.asOf ? ` as of ${argText(a.asOf)}` : ''}`;
  if (c.name === 'compare_holdings') return `the comparison of ${argText(a.fundA, '?')} and ${argText(a.fundB, '?')}`;
  if (c.name === 'fund_metadata') return `looking up the fund facts of ${argText(a.fund, '?')}`;
  if (c.name === 'list_funds') return 'listing the data';
  return `the ${c.name} step`;
}

/** The part of the question a call answers, for the unanswered list. */
function partOf(c: CallRecord): string {
  const a = c.args;
  if (c.name === 'get_holdings') return `holdings of ${argText(a.fund, '?').toUpperCase()}${a.asOf ? ` as of ${argText(a.asOf)}` : ''}`;
  if (c.name === 'compare_holdings') return `comparison of ${argText(a.fundA, '?').toUpperCase()} and ${argText(a.fundB, '?').toUpperCase()}`;
  if (c.name === 'fund_metadata') return `fund facts of ${argText(a.fund, '?').toUpperCase()}`;
  return 'the list of funds in the data';
}

function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** One honest sentence for a call that did not succeed (or whose result cannot be used). */
function failureSentence(c: CallRecord, known: ReadonlySet<string> | null, said: Set<string>): string {
  const what = describeCall(c);
  const o = c.outcome;
  if ('error' in o && said.has(o.error.message))
    return `${capitalize(what)} ${o.status === 'failed' ? 'failed' : `was ${o.status}`} for the same reason`;
  if ('error' in o) said.add(o.error.message);
  switch (o.status) {
    case 'failed': {
      const fund = argText(c.args.fund).toUpperCase();
      // The tool's message already says the fund is not covered; it is not said twice.
      if (c.name === 'get_holdings' && known && !known.has(fund))
        return /not covered/i.test(o.error.message) ? o.error.message : `${fund} is not covered by the data: ${o.error.message}`;
      return `${capitalize(what)} failed: ${o.error.message}`;
    }
    case 'denied':
      return `${capitalize(what)} was denied (${o.error.code}): ${o.error.message}`;
    case 'unknown':
      return `${capitalize(what)}: outcome unknown, not assumed (${o.error.code}: ${o.error.message})`;
    case 'missing':
      return `${capitalize(what)}: no result came back; outcome unknown, not assumed`;
    case 'unreadable':
      return `${capitalize(what)} returned content that is not a tool result; it is not used`;
    case 'succeeded':
      return `${capitalize(what)} returned a result that does not match the tool contract; it is not used`;
  }
}

/** The short reason for the unanswered list (the prose has the tool's full message). */
function shortReason(c: CallRecord): string {
  const o = c.outcome;
  if (o.status === 'missing') return 'no result came back';
  if (o.status === 'unreadable' || o.status === 'succeeded') return 'the result could not be used';
  if (o.status === 'unknown') return 'outcome unknown';
  if (o.status === 'denied') return `denied (${o.error.code})`;
  switch (o.error.code) {
    case 'unknown_fund':
      return 'not covered by the data';
    case 'no_file_for_date': {
      // The tool names the fund and date it could not meet; the other side of a comparison may be fine.
      const m = /Fund (\S+) has no holdings file as of (\d{4}-\d{2}-\d{2})/.exec(o.error.message);
      return m ? `no file of ${m[1]} dated ${m[2]}` : 'no file of the date asked';
    }
    case 'no_readable_date':
      return 'none of its files states a readable date, so none can be chosen';
    case 'unreadable_file':
      return 'its file could not be read';
    default:
      return `failed (${o.error.code})`;
  }
}

/** The question's date phrases that could not be read: said once in the prose (the list has them in short). */
function unreadableDatesSentence(unreadable: readonly UnreadableDate[]): string {
  const each = unreadable.map((u) => `"${u.text}" (${u.reason})`).join(', ');
  return `${unreadable.length === 1 ? 'A date in the question could not be used' : 'Dates in the question could not be used'}: ${each}; the files were chosen as if ${unreadable.length === 1 ? 'it were' : 'they were'} not written.`;
}

function succeeded<T>(c: CallRecord | undefined, schema: z.ZodType<T>): T | undefined {
  if (!c || c.outcome.status !== 'succeeded') return undefined;
  const parsed = schema.safeParse(c.outcome.result);
  return parsed.success ? parsed.data : undefined;
}

function endSentences(sentences: string[]): string {
  return sentences.map((s) => (/[.!?]$/.test(s) ? s : `${s}.`)).join(' ');
}

function fundsOverview(funds: ListFundsResult): string {
  const list = funds.funds.map((f) => `${f.fund} (${f.files.map((x) => x.asOf ?? `${x.file} undated`).join(', ')})`).join('; ');
  return `The data holds holdings files for ${plural(funds.funds.length, 'fund', 'funds')}: ${list}. Dates are the as-of dates stated inside each file.`;
}

const ILLUSTRATIVE_NOTE = 'These figures come from the illustrative sample data shipped with the project, not from real issuer files.';

/** The closing passage: the unanswered parts in words, then as the fenced JSON block (one passage: no blank line inside). */
function unansweredPassage(parts: readonly UnansweredPart[]): string {
  const unique = parts.filter((p, i) => parts.findIndex((q) => q.part === p.part) === i);
  // Parts answered from a far-away file are said apart from the parts not answered, each reason once.
  const approximate = unique.filter((p) => p.reason.startsWith(APPROXIMATE_REASON));
  const missing = unique.filter((p) => !approximate.includes(p));
  const words = [
    missing.length > 0 ? `Not answered: ${missing.map((p) => `${p.part} (${p.reason})`).join('; ')}.` : '',
    approximate.length > 0
      ? `Answered only approximately: ${approximate.map((p) => `${p.part} (${p.reason.slice(APPROXIMATE_REASON.length).replace(/^, /, '')})`).join('; ')}.`
      : '',
  ]
    .filter(Boolean)
    .join(' ');
  return `${words || 'Every part of the question was answered.'}\n${UNANSWERED_FENCE}\n${JSON.stringify({ unanswered: unique })}\n\`\`\``;
}

/** Fields a question may ask for, and how fact names spell them. */
const FACT_REQUESTS: readonly [RegExp, RegExp, string][] = [
  [/\bexpense ratio|\bexpenses?\b|\bfees?\b/i, /expense/i, 'expense ratio'],
  [/\binception\b/i, /inception/i, 'inception date'],
  [/\bbenchmark\b/i, /benchmark/i, 'benchmark'],
  [/\bshares outstanding\b/i, /shares ?out/i, 'shares outstanding'],
  [/\bnet assets\b|\bassets\b/i, /assets/i, 'net assets'],
  [/\bdividend\b/i, /div/i, 'dividend'],
];

function factsPassage(question: string, m: FundMetadataResult, unanswered: UnansweredPart[]): string {
  const asked = FACT_REQUESTS.filter(([q]) => q.test(question));
  const fmt = (f: FundMetadataResult['facts'][number]) => `${f.field}: ${f.value} (${f.source}${f.asOf ? `, as of ${f.asOf}` : ', undated'})`;
  const sentences: string[] = [];
  for (const [, field, words] of asked) {
    const found = m.facts.filter((f) => field.test(f.field));
    if (found.length === 0) unanswered.push({ part: `${words} of ${m.fund}`, reason: 'no file in the data states it' });
    else sentences.push(`${capitalize(words)} of ${m.fund} as the files state it: ${found.map(fmt).join('; ')}.`);
  }
  if (asked.length === 0 || sentences.length === 0) {
    const facts = m.facts.slice(0, 12).map(fmt);
    const more = m.facts.length > facts.length ? ` (and ${m.facts.length - facts.length} more)` : '';
    sentences.push(
      facts.length > 0 ? `${m.fund} facts as the files state them: ${facts.join('; ')}${more}.` : `The data states no facts about ${m.fund}.`,
    );
  }
  return sentences.join(' ');
}

/**
 * How many common holdings have an unreadable weight on each side: a side's unreadable security
 * weights less those among the securities only it holds.
 */
function unreadableCommon(c: CompareHoldingsResult): { a: number; b: number } {
  const side = (s: HoldingsSummary, only: readonly HoldingLine[]) =>
    s.unreadableWeightLines.filter((l) => l.kind === 'security').length - only.filter((l) => l.weight === null).length;
  return { a: Math.max(0, side(c.a, c.onlyInA)), b: Math.max(0, side(c.b, c.onlyInB)) };
}

function overlapPassage(nameA: string, nameB: string, c: CompareHoldingsResult): string {
  const by = Object.entries(c.matchedBy)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${k === 'ticker' ? 'ticker on the same market' : k === 'name' ? 'company name' : k.toUpperCase()} ${n}`);
  // A figure that leaves out unreadable weights is a lower bound and says so ("at least").
  const missing = unreadableCommon(c);
  const atLeast = (lower: boolean) => (lower ? 'at least ' : '');
  const sentences = [
    `Overlap of ${nameA} and ${nameB}: ${c.commonCount} securities in common${by.length > 0 ? ` (matched by ${by.join(', ')})` : ''}. ` +
      `The standard overlap (the smaller weight summed over common holdings) is ${atLeast(c.commonWithUnreadableWeight > 0)}${pct1(c.standardOverlap)}; ` +
      `${atLeast(missing.b > 0)}${pct1(c.weightOfBHeldInA)} of ${nameB}'s weight is held in ${nameA}; ${atLeast(missing.a > 0)}${pct1(c.weightOfAHeldInB)} of ${nameA}'s weight is held in ${nameB}.`,
  ];
  if (c.commonWithUnreadableWeight > 0) {
    const sides = [
      missing.a > 0 ? `${missing.a} in ${nameA}'s file (left out of ${nameA}'s weight held in ${nameB})` : null,
      missing.b > 0 ? `${missing.b} in ${nameB}'s file (left out of ${nameB}'s weight held in ${nameA})` : null,
    ].filter((x): x is string => x !== null);
    sentences.push(
      `${plural(c.commonWithUnreadableWeight, 'common holding has', 'common holdings have')} a weight that cannot be read in one file or both: ` +
        `${sides.join(' and ')}; the standard overlap leaves out ${c.commonWithUnreadableWeight === 1 ? 'that pair' : `those ${c.commonWithUnreadableWeight} pairs`}, so the figures marked "at least" are lower bounds.`,
    );
  }
  if (c.fallbackMatches.length > 0) {
    const shown = c.fallbackMatches.slice(0, 8).map((m) => `${label(m.a)} = ${label(m.b)} (${m.why})`);
    sentences.push(
      `${plural(c.fallbackMatches.length, 'match', 'matches')} used a fallback because the ${c.strongestSharedIdentifier.toUpperCase()} did not match: ${shown.join('; ')}${c.fallbackMatches.length > 8 ? `; and ${c.fallbackMatches.length - 8} more` : ''}.`,
    );
  }
  if (c.notMatched.length > 0) {
    const shown = c.notMatched.slice(0, 5).map((p) => `${label(p.a)} / ${label(p.b)}: ${p.why}`);
    sentences.push(`Not counted as common: ${shown.join('; ')}${c.notMatched.length > 5 ? `; and ${c.notMatched.length - 5} more` : ''}.`);
  }
  return sentences.join(' ');
}

function gapsPassage(nameA: string, nameB: string, c: CompareHoldingsResult): string {
  const gap = (holder: string, other: string, lines: readonly HoldingLine[]) => {
    if (lines.length === 0) return `${holder} holds every security of ${other}.`;
    const unread = lines.filter((l) => l.weight === null).length;
    const weight =
      unread === 0
        ? `${pct1(sumWeights(lines))} of ${other}'s weight`
        : `at least ${pct1(sumWeights(lines))} of ${other}'s weight, a lower bound: ${unread} of them ${unread === 1 ? 'has a weight' : 'have weights'} that cannot be read`;
    return `${holder} lacks ${plural(lines.length, `${other} name`, `${other} names`)} (${weight}): ${listNames(lines)}.`;
  };
  return `Coverage gaps: ${gap(nameA, nameB, c.onlyInB)} ${gap(nameB, nameA, c.onlyInA)}`;
}

/**
 * The final answer for the question from the tool calls of the current turn: passages separated
 * by blank lines, dates as YYYY-MM-DD, derived percentages with 1 decimal. Every figure is read
 * from the tool results; each fund's file is named with why it was chosen; failed, denied,
 * unknown and missing calls get their own passage. The last passage lists the parts not answered,
 * in words and as a fenced JSON block ({@link extractUnanswered}).
 */
export function writeAnswer(question: string, calls: readonly CallRecord[], now: Date = new Date()): string {
  const listCall = calls.find((c) => c.name === 'list_funds');
  const funds = succeeded(listCall, ListFundsResult) ?? null;
  const known = funds ? new Set(funds.funds.filter((f) => f.files.length > 0).map((f) => f.fund.toUpperCase())) : null;
  const illustrative = funds?.dataSet === 'illustrative';
  const plan = questionPlan(question, funds, now);
  const why = new Map(plan.subjects.filter((s) => s.file).map((s) => [s.file!, s.why]));

  const holdings = calls.filter((c) => c.name === 'get_holdings').map((c) => ({ call: c, result: succeeded(c, GetHoldingsResult) }));
  const compares = calls.filter((c) => c.name === 'compare_holdings').map((c) => ({ call: c, result: succeeded(c, CompareHoldingsResult) }));
  const metadata = calls.filter((c) => c.name === 'fund_metadata').map((c) => ({ call: c, result: succeeded(c, FundMetadataResult) }));
  const schemaOf = (name: string) =>
    name === 'list_funds'
      ? ListFundsResult
      : name === 'get_holdings'
        ? GetHoldingsResult
        : name === 'compare_holdings'
          ? CompareHoldingsResult
          : name === 'fund_metadata'
            ? FundMetadataResult
            : null;
  const failedCalls = calls.filter((c) => {
    const schema = schemaOf(c.name);
    return c.outcome.status !== 'succeeded' || (schema !== null && !schema.safeParse(c.outcome.result).success);
  });
  // Each failure's message is said once in the prose; the unanswered list gives a short reason.
  const saidMessages = new Set<string>();
  const failures = failedCalls.map((c) => failureSentence(c, known, saidMessages));
  const unanswered: UnansweredPart[] = [...plan.unplanned];
  for (const c of failedCalls) {
    if (c.name === 'list_funds') continue;
    unanswered.push({ part: partOf(c), reason: shortReason(c) });
  }

  const passages: string[] = [];
  const researched = holdings.length > 0 || compares.length > 0 || metadata.length > 0;

  if (!researched) {
    // No fund mentioned (or no research tool offered): answer from list_funds.
    if (funds) {
      const intro =
        plan.mentioned.length === 0
          ? 'The question names no fund ticker, so here is what the data covers.'
          : 'The holdings tools were not available, so here is only what the data covers.';
      passages.push(
        [intro, illustrative ? ILLUSTRATIVE_NOTE : '', plan.unreadable.length > 0 ? unreadableDatesSentence(plan.unreadable) : '']
          .filter(Boolean)
          .join(' '),
      );
      passages.push(fundsOverview(funds));
      if (funds.otherFiles.length > 0) {
        const notes = new Map((funds.otherFileNotes ?? []).map((n) => [n.file, n]));
        const unread = funds.otherFiles.filter((f) => notes.get(f)?.kind === 'not-holdings');
        passages.push(
          `Other files in the data, not read as holdings files: ${funds.otherFiles.join(', ')}.` +
            (unread.length > 0 && unread.length <= 5 ? ` ${unread.map((f) => notes.get(f)!.reason).join(' ')}` : ''),
        );
      }
      passages.push('Name one or more fund tickers to get their holdings, the verified disclosure dates and a comparison.');
      if (plan.mentioned.length > 0)
        for (const f of plan.mentioned) unanswered.push({ part: `research on ${f}`, reason: 'the holdings tools were not available' });
    } else if (calls.length === 0) {
      passages.push('No research tools were available, so the holdings data could not be read; nothing is assumed about it.');
      unanswered.push({ part: 'the whole question', reason: 'no research tools were available' });
    } else {
      passages.push('The data could not be read, so the question cannot be answered from it; nothing is assumed.');
      unanswered.push({ part: 'the whole question', reason: 'the data could not be read' });
    }
    if (failures.length > 0) passages.push(endSentences(failures));
    passages.push(unansweredPassage(unanswered));
    return passages.join('\n\n');
  }

  // Which file each fund was read from: get_holdings results, and the comparisons' summaries.
  // The tool's own note on its pick is kept only when the tool chose (`newest`): a `requested-date`
  // note ("as requested") echoes the date this policy passed, which the question may never have asked.
  const toolsPick = (sel: FileSelection) => (sel.rule === 'requested-date' ? undefined : sel.detail);
  const summaries = new Map<string, { summary: HoldingsSummary; top: HoldingLine[]; selection?: string | undefined }>();
  for (const h of holdings)
    if (h.result) summaries.set(h.result.file, { summary: h.result, top: h.result.top, selection: toolsPick(h.result.selection) });
  for (const c of compares) {
    if (!c.result) continue;
    for (const [s, sel] of [
      [c.result.a, c.result.selectionA],
      [c.result.b, c.result.selectionB],
    ] as const) {
      if (!summaries.has(s.file)) summaries.set(s.file, { summary: s, top: [], selection: toolsPick(sel) });
    }
  }
  const sameFundTwice = new Set([...summaries.values()].map((s) => s.summary.fund)).size < summaries.size;
  const nameOf = (s: HoldingsSummary) => (sameFundTwice ? `${s.fund} ${s.asOf ?? s.file}` : s.fund);
  const okCompares = compares.filter((c) => c.result).map((c) => c.result!);

  // Passage 1: what was answered.
  const intro: string[] = [];
  if (okCompares.length > 0) {
    for (const c of okCompares) {
      intro.push(
        `${nameOf(c.a)} (${dateText(c.a)}) and ${nameOf(c.b)} (${dateText(c.b)}) were compared from their holdings files ${c.a.file} and ${c.b.file}; ${daysText(c.daysBetween)}; ${plural(c.commonCount, 'security', 'securities')} in common.`,
      );
    }
  } else if (summaries.size > 0) {
    intro.push(`Holdings read: ${[...summaries.values()].map((s) => `${s.summary.fund} ${dateText(s.summary)} from ${s.summary.file}`).join('; ')}.`);
    const asked = holdings.map((h) => argText(h.call.args.fund).toUpperCase());
    const readFunds = new Set([...summaries.values()].map((s) => s.summary.fund.toUpperCase()));
    if (new Set(asked).size >= 2 && compares.length === 0)
      intro.push(
        readFunds.size >= 2
          ? 'No comparison was made.'
          : `No comparison was made: fewer than two of ${[...new Set(asked)].join(', ')} are covered by the data.`,
      );
    if (compares.length > 0) intro.push('The comparison did not succeed; see below.');
  } else if (holdings.length > 0 || compares.length > 0) {
    const asked = holdings.map((h) => argText(h.call.args.fund, '?').toUpperCase());
    intro.push(
      asked.length > 0
        ? `None of the funds asked about (${asked.join(', ')}) could be read from the data.`
        : 'No holdings could be read from the data.',
    );
    if (funds) intro.push(`Funds the data covers: ${funds.funds.map((f) => f.fund).join(', ')}.`);
  } else {
    intro.push(`Fund facts for ${metadata.map((m) => argText(m.call.args.fund, '?').toUpperCase()).join(', ')}, as the files state them.`);
  }
  if (illustrative) intro.push(ILLUSTRATIVE_NOTE);
  if (plan.unreadable.length > 0) intro.push(unreadableDatesSentence(plan.unreadable));
  passages.push(intro.join(' '));

  // One passage per file read; the "as the file states them" note once.
  const topCount = plan.top ?? 5;
  const said = new Set<string>();
  [...summaries.values()].forEach((s, i) => {
    // A reason shared by several files (the closest dates between the funds) is given once.
    const reason = why.get(s.summary.file) ?? s.selection;
    passages.push(fundPassage(nameOf(s.summary), s.summary, s.top, topCount, reason && !said.has(reason) ? reason : undefined, i === 0));
    if (reason) said.add(reason);
  });
  if (plan.top !== null) {
    for (const s of summaries.values()) {
      if (s.top.length > 0 && s.top.length < plan.top && s.summary.securityCount > s.top.length) {
        unanswered.push({ part: `top ${plan.top} holdings of ${s.summary.fund}`, reason: `only ${s.top.length} came back` });
      }
    }
  }

  for (const c of okCompares) {
    passages.push(overlapPassage(nameOf(c.a), nameOf(c.b), c));
    passages.push(gapsPassage(nameOf(c.a), nameOf(c.b), c));
  }

  if (summaries.size > 0)
    passages.push(
      datesPassage(
        [...summaries.values()].map((s) => s.summary),
        funds,
      ),
    );

  for (const m of metadata) if (m.result) passages.push(factsPassage(question, m.result, unanswered));

  // What the question needed that this Run did not do (research cut short, or calls other than the
  // plan's) is listed as unanswered too: the answer never claims more than was read (K9).
  const read = new Set([...summaries.values()].map((s) => s.summary.fund.toUpperCase()));
  const listed = (fund: string) => unanswered.some((u) => u.part.toUpperCase().includes(fund.toUpperCase()));
  if (plan.wantsHoldings)
    for (const f of plan.covered)
      if (!read.has(f.toUpperCase()) && !listed(f)) unanswered.push({ part: `holdings of ${f}`, reason: 'not read in this Run' });
  if (plan.pairs.length > 0 && okCompares.length === 0 && !unanswered.some((u) => /compar/i.test(u.part)))
    unanswered.push({ part: `the comparison of ${plan.covered.join(' and ')}`, reason: 'no comparison was made' });

  if (failures.length > 0) passages.push(endSentences(failures));
  passages.push(unansweredPassage(unanswered));
  return passages.join('\n\n');
}

/**
 * The research policy: given a chat request's messages and offered tools, the next reply.
 * Tool calls (finish `tool_calls`) while research remains, else the final answer (finish `stop`).
 * Deterministic and pure given `now` (the clock: `today`, `now`, `current`, `last year` in the
 * question are read against its UTC date; the server passes the machine's, tests fix it); never
 * throws on odd input (unreadable tool messages are reported).
 */
export function researchPolicy(messages: readonly WireMessage[], tools: readonly WireTool[] | undefined, now: Date = new Date()): Reply {
  const offered = new Set((tools ?? []).map((t) => t.function.name));
  const question = lastQuestion(messages);
  const calls = currentTurnCalls(messages);

  if (calls.length === 0 && offered.has('list_funds')) {
    return { toolCalls: [{ name: 'list_funds', arguments: {} }], finishReason: 'tool_calls' };
  }
  const researched = calls.some((c) => c.name !== 'list_funds');
  if (!researched) {
    const funds =
      succeeded(
        calls.find((c) => c.name === 'list_funds'),
        ListFundsResult,
      ) ?? null;
    const plan = planResearch(question, funds, offered, now);
    if (plan.length > 0) return { toolCalls: plan, finishReason: 'tool_calls' };
  }
  return { content: writeAnswer(question, calls, now), finishReason: 'stop' };
}
