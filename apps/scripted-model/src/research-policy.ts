/**
 * The offline research policy: a deterministic stand-in for a model that answers fund-holdings
 * questions with the tool pack of `@runplane/contracts`. It is a pure function of the request's
 * messages and tools; every figure in its answer is read from the tool results in the messages.
 *
 * Plan for one user question (only messages after the last user message count):
 * 1. nothing called yet: call `list_funds` (when offered);
 * 2. then, in one turn, `get_holdings` for every fund the question mentions (covered or not) and,
 *    when two mentioned funds are covered, `compare_holdings` for the first two with the
 *    closest-dated pair of files (a date in the question pins a fund's file);
 * 3. once every call has a tool message: the final answer, passages separated by blank lines.
 */
import {
  CompareHoldingsResult,
  FundMetadataResult,
  GetHoldingsResult,
  ListFundsResult,
  ToolMessageContent,
  type HoldingsFileInfo,
  type HoldingLine,
  type HoldingsSummary,
} from '@runplane/contracts';
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

/** ISO dates (YYYY-MM-DD) in the text, in order, without repeats. */
export function mentionedDates(text: string): string[] {
  return [...new Set(text.match(/\b\d{4}-\d{2}-\d{2}\b/g) ?? [])];
}

/**
 * Fund tickers the question mentions, in question order without repeats: upper-case tokens of 1-5
 * letters that are not {@link STOP_WORDS}, plus any token naming a known fund (any case, 3+ letters).
 */
export function mentionedFunds(question: string, knownFunds: Iterable<string> = []): string[] {
  const known = new Set([...knownFunds].map((f) => f.toUpperCase()));
  const out: string[] = [];
  for (const raw of question.match(/[A-Za-z][A-Za-z&]*/g) ?? []) {
    const upper = raw.toUpperCase();
    const isKnown = known.has(upper) && (raw === upper || raw.length >= 3);
    const looksLikeTicker = /^[A-Z]{1,5}$/.test(raw) && !STOP_WORDS.has(raw);
    if ((isKnown || looksLikeTicker) && !STOP_WORDS.has(upper) && !out.includes(upper)) out.push(upper);
  }
  return out;
}

// ---- planning ---------------------------------------------------------------------------------

const DAY_MS = 86_400_000;
function dayNumber(iso: string): number {
  return Math.round(Date.parse(`${iso}T00:00:00Z`) / DAY_MS);
}

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

const METADATA_WORDS = /\b(expense ratio|expenses?|inception|shares outstanding|metadata|fact ?sheet|benchmark|fees?)\b/i;

/**
 * The research calls for the question, given the list_funds result (null when list_funds was not
 * available or did not succeed): get_holdings per mentioned fund, compare_holdings for the first
 * two covered ones, fund_metadata per covered fund when the question asks for fund facts. Only
 * tools in `offered` are planned. Empty when the question mentions no fund.
 */
export function planResearch(question: string, funds: ListFundsResult | null, offered: ReadonlySet<string>): ReplyToolCall[] {
  const filesByFund = new Map<string, HoldingsFileInfo[]>((funds?.funds ?? []).map((f) => [f.fund.toUpperCase(), f.files]));
  const mentioned = mentionedFunds(question, filesByFund.keys());
  if (mentioned.length === 0) return [];
  const dates = mentionedDates(question);
  const covered = funds ? mentioned.filter((f) => (filesByFund.get(f)?.length ?? 0) > 0) : mentioned;
  const [first, second] = covered;
  const pair =
    first !== undefined && second !== undefined ? closestPair(filesByFund.get(first) ?? [], filesByFund.get(second) ?? [], dates) : undefined;

  const calls: ReplyToolCall[] = [];
  if (offered.has('get_holdings')) {
    for (const fund of mentioned) {
      const asOf =
        fund === first && pair?.asOfA
          ? pair.asOfA
          : fund === second && pair?.asOfB
            ? pair.asOfB
            : (pinnedFile(filesByFund.get(fund) ?? [], dates)?.asOf ?? undefined);
      calls.push({ name: 'get_holdings', arguments: asOf ? { fund, asOf } : { fund } });
    }
  }
  if (pair && first !== undefined && second !== undefined && offered.has('compare_holdings')) {
    calls.push({ name: 'compare_holdings', arguments: { fundA: first, fundB: second, ...pair } });
  }
  if (METADATA_WORDS.test(question) && offered.has('fund_metadata')) {
    for (const fund of covered) calls.push({ name: 'fund_metadata', arguments: { fund } });
  }
  return calls;
}

// ---- writing ----------------------------------------------------------------------------------

/** A derived percentage, 1 decimal: `95.2%`. */
function pct1(x: number): string {
  return `${x.toFixed(1)}%`;
}

/** A weight or weight sum from a file, 2 decimals: `100.25%`, `0.26%`. */
function pct2(x: number): string {
  return `${x.toFixed(2)}%`;
}

function label(line: HoldingLine): string {
  return line.ticker ?? line.name;
}

function listNames(lines: readonly HoldingLine[], max = 20): string {
  if (lines.length <= max) return lines.map(label).join(', ');
  const shown = 10;
  return `${lines.slice(0, shown).map(label).join(', ')} and ${lines.length - shown} more`;
}

function sumWeights(lines: readonly HoldingLine[]): number {
  return lines.reduce((s, l) => s + l.weight, 0);
}

function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

function dateText(asOf: string | null): string {
  return asOf ? `as of ${asOf}` : 'undated (the file states no date)';
}

const KIND_WORDS: Record<string, [string, string]> = {
  cash: ['a cash line', 'cash lines'],
  'money-market': ['a money-market line', 'money-market lines'],
  futures: ['a futures line', 'futures lines'],
  collateral: ['a collateral line', 'collateral lines'],
  other: ['another non-security line', 'other non-security lines'],
};

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

function fundPassage(fund: string, s: HoldingsSummary, top: readonly HoldingLine[] = []): string {
  const sentences = [`${fund} ${dateText(s.asOf)} (file ${s.file}): ${countText(s)}.`];
  const nonSec = s.nonSecurityLines.map((l) => `${l.name}${l.ticker ? ` (${l.ticker})` : ''} ${pct2(l.weight)}`).join(', ');
  sentences.push(
    `Its weights sum to ${pct2(s.weightSum)} as the file states them` +
      (s.nonSecurityLines.length > 0 ? ` (securities ${pct2(s.securitiesWeightSum)}; ${nonSec}).` : '.'),
  );
  if (top.length > 0)
    sentences.push(
      `Largest holdings: ${top
        .slice(0, 5)
        .map((l) => `${label(l)} ${pct2(l.weight)}`)
        .join(', ')}.`,
    );
  return sentences.join(' ');
}

function daysText(days: number | null): string {
  if (days === null) return 'at least one file is undated, so the days between them are unknown';
  if (days === 0) return 'both files are dated the same day';
  return `the disclosure dates are ${plural(days, 'day', 'days')} apart`;
}

function fileNameCheck(info: { file: string; asOf: string | null }): string {
  const named = info.file.match(/\d{4}-\d{2}-\d{2}/)?.[0];
  if (info.asOf === null)
    return `${info.file} states no date inside, so it is treated as undated${named ? ` (its name says ${named}, which is not used)` : ''}`;
  if (!named) return `${info.file} states ${info.asOf}`;
  if (named === info.asOf) return `${info.file} states ${info.asOf} (its name agrees)`;
  return `${info.file} states ${info.asOf} (its name says ${named}; the date inside the file is used)`;
}

function datesPassage(
  files: Array<{ fund: string; file: string; asOf: string | null }>,
  days: number | null | undefined,
  funds: ListFundsResult | null,
): string {
  const sentences = [`Disclosure dates were verified from inside each file, not taken from file names: ${files.map(fileNameCheck).join('; ')}.`];
  if (days !== undefined) sentences.push(`${capitalize(daysText(days))}.`);
  if (funds) {
    const others = files
      .map(({ fund, file }) => {
        const rest = (funds.funds.find((f) => f.fund.toUpperCase() === fund)?.files ?? []).filter((f) => f.file !== file);
        return rest.length > 0 ? `${fund} ${rest.map((f) => f.asOf ?? `${f.file} (undated)`).join(', ')}` : null;
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

function describeCall(c: CallRecord): string {
  const a = c.args;
  if (c.name === 'get_holdings') return `the get_holdings call for ${argText(a.fund, '?')}${a.asOf ? ` as of ${argText(a.asOf)}` : ''}`;
  if (c.name === 'compare_holdings') return `the comparison of ${argText(a.fundA, '?')} and ${argText(a.fundB, '?')}`;
  if (c.name === 'fund_metadata') return `the fund_metadata call for ${argText(a.fund, '?')}`;
  return `the ${c.name} call`;
}

function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** One honest sentence for a call that did not succeed (or whose result cannot be used). */
function failureSentence(c: CallRecord, known: ReadonlySet<string> | null): string {
  const what = describeCall(c);
  const o = c.outcome;
  switch (o.status) {
    case 'failed': {
      const fund = argText(c.args.fund).toUpperCase();
      if (c.name === 'get_holdings' && known && !known.has(fund)) return `${fund} is not covered by the data: ${o.error.message}`;
      return `${capitalize(what)} failed (${o.error.code}): ${o.error.message}`;
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

/**
 * The final answer for the question from the tool calls of the current turn: passages separated
 * by blank lines, dates as YYYY-MM-DD, derived percentages with 1 decimal. Every figure is read
 * from the tool results; failed, denied, unknown and missing calls get their own passage.
 */
export function writeAnswer(question: string, calls: readonly CallRecord[]): string {
  const listCall = calls.find((c) => c.name === 'list_funds');
  const funds = succeeded(listCall, ListFundsResult) ?? null;
  const known = funds ? new Set(funds.funds.filter((f) => f.files.length > 0).map((f) => f.fund.toUpperCase())) : null;
  const illustrative = funds?.dataSet === 'illustrative';

  const holdings = calls.filter((c) => c.name === 'get_holdings').map((c) => ({ call: c, result: succeeded(c, GetHoldingsResult) }));
  const compareCall = calls.find((c) => c.name === 'compare_holdings');
  const compare = succeeded(compareCall, CompareHoldingsResult);
  const metadata = calls.filter((c) => c.name === 'fund_metadata').map((c) => ({ call: c, result: succeeded(c, FundMetadataResult) }));
  const failures = calls
    .filter((c) => {
      const schema =
        c.name === 'list_funds'
          ? ListFundsResult
          : c.name === 'get_holdings'
            ? GetHoldingsResult
            : c.name === 'compare_holdings'
              ? CompareHoldingsResult
              : c.name === 'fund_metadata'
                ? FundMetadataResult
                : null;
      return c.outcome.status !== 'succeeded' || (schema !== null && !schema.safeParse(c.outcome.result).success);
    })
    .map((c) => failureSentence(c, known));

  const passages: string[] = [];
  const researched = holdings.length > 0 || compareCall !== undefined || metadata.length > 0;

  if (!researched) {
    // No fund mentioned (or no research tool offered): answer from list_funds.
    if (funds) {
      const intro =
        mentionedFunds(question, known ?? []).length === 0
          ? 'The question names no fund ticker, so here is what the data covers.'
          : 'The holdings tools were not available, so here is only what the data covers.';
      passages.push([intro, illustrative ? ILLUSTRATIVE_NOTE : ''].filter(Boolean).join(' '));
      passages.push(fundsOverview(funds));
      if (funds.otherFiles.length > 0) passages.push(`Other files in the data, not read as holdings files: ${funds.otherFiles.join(', ')}.`);
      passages.push('Name one or more fund tickers to get their holdings, the verified disclosure dates and a comparison.');
    } else if (calls.length === 0) {
      passages.push('No research tools were available, so the holdings data could not be read; nothing is assumed about it.');
    } else {
      passages.push('The data could not be read, so the question cannot be answered from it; nothing is assumed.');
    }
    if (failures.length > 0) passages.push(endSentences(failures));
    return passages.join('\n\n');
  }

  // Which file each fund was read from: get_holdings first, else the comparison's summaries.
  const summaries = new Map<string, { summary: HoldingsSummary; top: HoldingLine[] }>();
  for (const h of holdings)
    if (h.result) summaries.set(argText(h.call.args.fund, h.result.fund).toUpperCase(), { summary: h.result, top: h.result.top });
  const fundA = compare ? argText(compareCall?.args.fundA, compare.a.fund).toUpperCase() : undefined;
  const fundB = compare ? argText(compareCall?.args.fundB, compare.b.fund).toUpperCase() : undefined;
  if (compare && fundA && fundB) {
    // The comparison's files are authoritative for the compared pair.
    const a = summaries.get(fundA);
    const b = summaries.get(fundB);
    summaries.set(fundA, { summary: compare.a, top: a && a.summary.file === compare.a.file ? a.top : [] });
    summaries.set(fundB, { summary: compare.b, top: b && b.summary.file === compare.b.file ? b.top : [] });
  }

  // Passage 1: what was answered.
  const intro: string[] = [];
  if (compare && fundA && fundB) {
    intro.push(
      `${fundA} (${dateText(compare.a.asOf)}) and ${fundB} (${dateText(compare.b.asOf)}) were compared from their holdings files ${compare.a.file} and ${compare.b.file}; ${daysText(compare.daysBetween)}.`,
      `They hold ${compare.commonCount} securities in common.`,
    );
  } else if (summaries.size > 0) {
    intro.push(`Holdings read: ${[...summaries].map(([f, s]) => `${f} ${dateText(s.summary.asOf)} from ${s.summary.file}`).join('; ')}.`);
    const mentioned = holdings.map((h) => argText(h.call.args.fund).toUpperCase());
    if (mentioned.length >= 2 && !compareCall)
      intro.push(`No comparison was made: fewer than two of ${mentioned.join(', ')} are covered by the data.`);
    if (compareCall && !compare) intro.push('The comparison did not succeed; see below.');
  } else {
    const asked = holdings.map((h) => argText(h.call.args.fund, '?').toUpperCase());
    intro.push(
      asked.length > 0
        ? `None of the funds asked about (${asked.join(', ')}) could be read from the data.`
        : 'No holdings could be read from the data.',
    );
    if (funds) intro.push(`Funds the data covers: ${funds.funds.map((f) => f.fund).join(', ')}.`);
  }
  if (illustrative) intro.push(ILLUSTRATIVE_NOTE);
  passages.push(intro.join(' '));

  // One passage per fund read.
  for (const [fund, s] of summaries) passages.push(fundPassage(fund, s.summary, s.top));

  if (compare && fundA && fundB) {
    passages.push(
      `Overlap: ${compare.commonCount} securities in common (matched by CUSIP ${compare.matchedBy.cusip}, by ticker ${compare.matchedBy.ticker}). ` +
        `${pct1(compare.weightOfBHeldInA)} of ${fundB}'s weight is held in ${fundA}; ${pct1(compare.weightOfAHeldInB)} of ${fundA}'s weight is held in ${fundB}.`,
    );
    const gap = (holder: string, other: string, lines: readonly HoldingLine[]) =>
      lines.length === 0
        ? `${holder} holds every security of ${other}.`
        : `${holder} lacks ${plural(lines.length, `${other} name`, `${other} names`)} (${pct1(sumWeights(lines))} of ${other}'s weight): ${listNames(lines)}.`;
    passages.push(`Coverage gaps: ${gap(fundA, fundB, compare.onlyInB)} ${gap(fundB, fundA, compare.onlyInA)}`);
  }

  if (summaries.size > 0) {
    const files = [...summaries].map(([fund, s]) => ({ fund, file: s.summary.file, asOf: s.summary.asOf }));
    passages.push(datesPassage(files, compare ? compare.daysBetween : undefined, funds));
  }

  for (const m of metadata) {
    if (!m.result) continue;
    const facts = m.result.facts.slice(0, 12).map((f) => `${f.field}: ${f.value} (${f.source}${f.asOf ? `, as of ${f.asOf}` : ', undated'})`);
    const more = m.result.facts.length > facts.length ? ` (and ${m.result.facts.length - facts.length} more)` : '';
    passages.push(
      facts.length > 0
        ? `${m.result.fund} facts as the files state them: ${facts.join('; ')}${more}.`
        : `The data states no facts about ${m.result.fund}.`,
    );
  }

  if (failures.length > 0) passages.push(endSentences(failures));
  return passages.join('\n\n');
}

/**
 * The research policy: given a chat request's messages and offered tools, the next reply.
 * Tool calls (finish `tool_calls`) while research remains, else the final answer (finish `stop`).
 * Deterministic and pure; never throws on odd input (unreadable tool messages are reported).
 */
export function researchPolicy(messages: readonly WireMessage[], tools: readonly WireTool[] | undefined): Reply {
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
    const plan = planResearch(question, funds, offered);
    if (plan.length > 0) return { toolCalls: plan, finishReason: 'tool_calls' };
  }
  return { content: writeAnswer(question, calls), finishReason: 'stop' };
}
