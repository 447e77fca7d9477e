/**
 * The wording of the scripted research policy's answer: figures as the files state them (weights 2 decimals, derived percentages 1 decimal, dates YYYY-MM-DD), one passage per file read, overlaps and coverage gaps, disclosure-date checks, and one sentence per call that did not succeed. Pure.
 */
import { CompareHoldingsResult, type HoldingLine, type HoldingsSummary, ListFundsResult } from '@runplane/contracts';
import { type z } from 'zod';
import type { CallRecord } from './conversation.js';
import { type UnreadableDate } from './question-dates.js';

/** A derived percentage, 1 decimal: `95.2%`. */
export function pct1(x: number): string {
  return `${x.toFixed(1)}%`;
}

/** A weight or weight sum from a file, 2 decimals: `100.25%`, `0.26%`; an unreadable one says so. */
export function pct2(x: number | null): string {
  return x === null ? 'weight unreadable' : `${x.toFixed(2)}%`;
}

/** A line's label: its ticker, or the name next to a bare exchange code (`TAIWAN SEMICONDUCTOR (2330)`) or when there is no ticker. */
export function label(line: HoldingLine): string {
  if (line.ticker === null) return line.name;
  return /^[A-Za-z]/.test(line.ticker) ? line.ticker : `${line.name} (${line.ticker})`;
}

export function listNames(lines: readonly HoldingLine[], max = 20): string {
  if (lines.length <= max) return lines.map(label).join(', ');
  const shown = 10;
  return `${lines.slice(0, shown).map(label).join(', ')} and ${lines.length - shown} more`;
}

export function sumWeights(lines: readonly HoldingLine[]): number {
  return lines.reduce((s, l) => s + (l.weight ?? 0), 0);
}

export function plural(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`;
}

/** The date of a file as the answer states it: read from inside, unreadable, or absent. */
export function dateText(info: { asOf: string | null; provenance?: { asOfHow: string; asOfText: string | null } }): string {
  if (info.asOf) return `as of ${info.asOf}`;
  if (info.provenance?.asOfHow === 'unreadable') return `with a date line that cannot be read ("${info.provenance.asOfText ?? ''}")`;
  return 'undated (the file states no date)';
}

export const KIND_WORDS: Record<string, [string, string]> = {
  cash: ['a cash line', 'cash lines'],
  'money-market': ['a money-market line', 'money-market lines'],
  futures: ['a futures line', 'futures lines'],
  collateral: ['a collateral line', 'collateral lines'],
  other: ['another non-security line', 'other non-security lines'],
};

/** Non-security lines listed one by one up to this many; more are summarised with a count. */
export const LIST_NON_SECURITY_MAX = 5;

/** "503 securities plus a cash line", "101 securities" ... */
export function countText(s: HoldingsSummary): string {
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

export function nonSecurityText(s: HoldingsSummary): string {
  const lines = s.nonSecurityLines;
  const one = (l: HoldingLine) => `${l.name}${l.ticker ? ` (${l.ticker})` : ''} ${pct2(l.weight)}`;
  if (lines.length <= LIST_NON_SECURITY_MAX) return lines.map(one).join(', ');
  const heaviest = [...lines].sort((x, y) => Math.abs(y.weight ?? 0) - Math.abs(x.weight ?? 0)).slice(0, 3);
  return `${lines.length} non-security lines together ${pct2(sumWeights(lines))}, the largest ${heaviest.map(one).join(', ')}`;
}

export function unreadableText(s: HoldingsSummary): string | null {
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

export function fundPassage(
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

export function daysText(days: number | null): string {
  if (days === null) return 'at least one file has no readable date, so the days between them are unknown';
  if (days === 0) return 'both files are dated the same day';
  return `the disclosure dates are ${plural(days, 'day', 'days')} apart`;
}

export function fileNameCheck(info: HoldingsSummary): string {
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

export function datesPassage(files: readonly HoldingsSummary[], funds: ListFundsResult | null): string {
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
export function argText(value: unknown, fallback = ''): string {
  if (value === undefined || value === null) return fallback;
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' ? String(value) : JSON.stringify(value);
}

/** A call in the user's words (no tool names). */
export function describeCall(c: CallRecord): string {
  const a = c.args;
  if (c.name === 'get_holdings') return `reading the holdings of ${argText(a.fund, '?')}${a.asOf ? ` as of ${argText(a.asOf)}` : ''}`;
  if (c.name === 'compare_holdings') return `the comparison of ${argText(a.fundA, '?')} and ${argText(a.fundB, '?')}`;
  if (c.name === 'fund_metadata') return `looking up the fund facts of ${argText(a.fund, '?')}`;
  if (c.name === 'list_funds') return 'listing the data';
  return `the ${c.name} step`;
}

export function capitalize(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** One honest sentence for a call that did not succeed (or whose result cannot be used). */
export function failureSentence(c: CallRecord, known: ReadonlySet<string> | null, said: Set<string>): string {
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
    case 'narrowed':
      return `${capitalize(what)} returned a result too large for the model's context: only its first ${o.shown} of ${o.total} characters were shown, so it is not used`;
    case 'unreadable':
      return `${capitalize(what)} returned content that is not a tool result; it is not used`;
    case 'succeeded':
      return `${capitalize(what)} returned a result that does not match the tool contract; it is not used`;
  }
}

/** The question's date phrases that could not be read: said once in the prose (the list has them in short). */
export function unreadableDatesSentence(unreadable: readonly UnreadableDate[]): string {
  const each = unreadable.map((u) => `"${u.text}" (${u.reason})`).join(', ');
  return `${unreadable.length === 1 ? 'A date in the question could not be used' : 'Dates in the question could not be used'}: ${each}; the files were chosen as if ${unreadable.length === 1 ? 'it were' : 'they were'} not written.`;
}

export function succeeded<T>(c: CallRecord | undefined, schema: z.ZodType<T>): T | undefined {
  if (!c || c.outcome.status !== 'succeeded') return undefined;
  const parsed = schema.safeParse(c.outcome.result);
  return parsed.success ? parsed.data : undefined;
}

export function endSentences(sentences: string[]): string {
  return sentences.map((s) => (/[.!?]$/.test(s) ? s : `${s}.`)).join(' ');
}

export function fundsOverview(funds: ListFundsResult): string {
  const list = funds.funds.map((f) => `${f.fund} (${f.files.map((x) => x.asOf ?? `${x.file} undated`).join(', ')})`).join('; ');
  return `The data holds holdings files for ${plural(funds.funds.length, 'fund', 'funds')}: ${list}. Dates are the as-of dates stated inside each file.`;
}

export const ILLUSTRATIVE_NOTE = 'These figures come from the illustrative sample data shipped with the project, not from real issuer files.';

/**
 * How many common holdings have an unreadable weight on each side: a side's unreadable security
 * weights less those among the securities only it holds.
 */
export function unreadableCommon(c: CompareHoldingsResult): { a: number; b: number } {
  const side = (s: HoldingsSummary, only: readonly HoldingLine[]) =>
    s.unreadableWeightLines.filter((l) => l.kind === 'security').length - only.filter((l) => l.weight === null).length;
  return { a: Math.max(0, side(c.a, c.onlyInA)), b: Math.max(0, side(c.b, c.onlyInB)) };
}

export function overlapPassage(nameA: string, nameB: string, c: CompareHoldingsResult): string {
  const by = Object.entries(c.matchedBy)
    .filter(([, n]) => n > 0)
    .map(([k, n]) => `${n} by ${k === 'ticker' ? 'ticker on the same market' : k === 'name' ? 'company name' : k.toUpperCase()}`);
  // A figure that leaves out unreadable weights is a lower bound and says so ("at least").
  const missing = unreadableCommon(c);
  const atLeast = (lower: boolean) => (lower ? 'at least ' : '');
  const sentences = [
    `Overlap of ${nameA} and ${nameB}: ${c.commonCount} securities in common${by.length > 0 ? ` (matched: ${by.join(', ')})` : ''}. ` +
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

export function gapsPassage(nameA: string, nameB: string, c: CompareHoldingsResult): string {
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
