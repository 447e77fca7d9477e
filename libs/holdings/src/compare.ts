/**
 * Pure summaries and comparisons of parsed holdings files, producing the contract's
 * `HoldingsSummary`, `GetHoldingsResult` and `CompareHoldingsResult` shapes.
 */
import type {
  CompareHoldingsResult,
  FileSelection,
  GetHoldingsResult,
  HoldingLine,
  HoldingsSummary,
  MatchMethod,
  Provenance,
} from '@runplane/contracts';
import { cusipOf, fileMarket, marketOf, nameKey, sameMarket, tickerKey, type Market } from './identity.js';
import type { LineKind, ParsedHoldingsFile, ParsedLine } from './types.js';
import { daysBetween, roundWeight } from './values.js';

export type { MatchMethod } from '@runplane/contracts';

/** Securities listed in `GetHoldingsResult.top` unless the caller asks for another number. */
export const TOP_HOLDINGS = 25;

/** The security lines of a parsed file (cash and other non-security lines excluded), in file order. */
export function securitiesOf(file: ParsedHoldingsFile): ParsedLine[] {
  return file.lines.filter((line) => line.kind === 'security');
}

/** What a tool read: the file, its sha256, layout and as-of date with how it was established. */
export function provenanceOf(file: ParsedHoldingsFile): Provenance {
  return { file: file.file, sha256: file.sha256, layout: file.issuerFormat, asOf: file.asOf, asOfHow: file.asOfHow, asOfText: file.asOfText };
}

/** A parsed line in the contract's `HoldingLine` shape (weight `null` when unreadable). */
function toHoldingLine(line: ParsedLine): HoldingLine {
  const out: HoldingLine = { ticker: line.ticker, name: line.name, cusip: line.cusip, weight: line.weight };
  if (line.isin) out.isin = line.isin;
  if (line.sedol) out.sedol = line.sedol;
  const market = marketOf(line);
  if (market) out.market = market.label;
  if (line.unreadable.length > 0) out.unreadable = line.unreadable;
  return out;
}

/** Lines sorted by weight, heaviest first; unreadable weights last; ties keep file order. */
function heaviestFirst(lines: readonly ParsedLine[]): ParsedLine[] {
  return [...lines].sort((x, y) => (y.weight ?? -Infinity) - (x.weight ?? -Infinity) || x.sourceRow - y.sourceRow);
}

/** Sum of the lines' readable weights in percent, rounded to 6 decimals against float noise (not renormalised). */
function weightSum(lines: readonly ParsedLine[]): number {
  return roundWeight(lines.reduce((sum, line) => sum + (line.weight ?? 0), 0));
}

/**
 * The contract's `HoldingsSummary` of one file: security count, every non-security line with its
 * kind, the sums of the readable weights (percent, as stated), the lines whose weight cannot be
 * read (left out of the sums, never counted as 0) and the file's provenance.
 */
export function summarise(file: ParsedHoldingsFile): HoldingsSummary {
  const securities = securitiesOf(file);
  return {
    fund: file.fund,
    file: file.file,
    issuerFormat: file.issuerFormat,
    asOf: file.asOf,
    provenance: provenanceOf(file),
    securityCount: securities.length,
    nonSecurityLines: file.lines
      .filter((line) => line.kind !== 'security')
      .map((line) => ({ ...toHoldingLine(line), kind: line.kind as Exclude<LineKind, 'security'> })),
    weightSum: weightSum(file.lines),
    securitiesWeightSum: weightSum(securities),
    unreadableWeightLines: file.lines.filter((line) => line.weight === null).map((line) => ({ ...toHoldingLine(line), kind: line.kind })),
  };
}

/** `get_holdings` result for one file: its summary plus the `top` heaviest securities with readable weights. */
export function holdingsResult(file: ParsedHoldingsFile, selection: FileSelection, top = TOP_HOLDINGS): GetHoldingsResult {
  const readable = securitiesOf(file).filter((line) => line.weight !== null);
  return { ...summarise(file), top: heaviestFirst(readable).slice(0, top).map(toHoldingLine), selection };
}

// ---- matching ---------------------------------------------------------------------------------

type IdKind = 'cusip' | 'isin' | 'sedol';
const ID_KINDS: readonly IdKind[] = ['cusip', 'isin', 'sedol'];

function idOf(line: ParsedLine, kind: IdKind): string | null {
  if (kind === 'cusip') return cusipOf(line);
  const value = (kind === 'isin' ? line.isin : line.sedol)?.trim().toUpperCase();
  return value ? value : null;
}

/** True when the file carries identifiers of `kind` (a column, or US/CA ISINs for CUSIPs) on its securities. */
function carries(file: ParsedHoldingsFile, securities: readonly ParsedLine[], kind: IdKind): boolean {
  const column = kind === 'cusip' ? file.hasCusips || file.hasIsins : kind === 'isin' ? file.hasIsins : file.hasSedols;
  return column && securities.some((line) => idOf(line, kind) !== null);
}

const ID_NAMES: Record<IdKind, string> = { cusip: 'CUSIP', isin: 'ISIN', sedol: 'SEDOL' };

/** A short label of a line for reasons: `LRCX (Lam Research Corp)`. */
function show(line: ParsedLine): string {
  return line.ticker ? `${line.ticker} (${line.name})` : line.name;
}

/** Why a line pair did not match on the strongest identifier, for a fallback's `why`. */
function idGap(a: ParsedLine, b: ParsedLine, kind: IdKind): string {
  const [x, y] = [idOf(a, kind), idOf(b, kind)];
  if (x && y) return `${ID_NAMES[kind]} differs (${x} in A, ${y} in B)`;
  return `${ID_NAMES[kind]} missing in ${x ? 'B' : y ? 'A' : 'both files'}`;
}

interface Match {
  a: ParsedLine;
  b: ParsedLine;
  method: MatchMethod;
  fallbackWhy: string | null;
}

/**
 * One-to-one matching of two files' securities, strongest key first:
 * 1. each identifier kind both files carry, CUSIP, then ISIN, then SEDOL (equal values);
 * 2. the ticker without exchange suffix, only when both lines' markets are known and share a
 *    country (a same ticker on different markets is recorded in `notMatched`; so is a ticker
 *    whose market one file does not state); when both lines carry the strongest identifier and it
 *    differs, the names must also share their first word (guards against a reused ticker);
 * 3. the company name ({@link nameKey}), unique on both sides, markets not contradicting.
 * Steps weaker than the strongest identifier both files carry are fallbacks, each with why.
 */
function matchSecurities(fileA: ParsedHoldingsFile, secA: ParsedLine[], fileB: ParsedHoldingsFile, secB: ParsedLine[]) {
  const kinds = ID_KINDS.filter((kind) => carries(fileA, secA, kind) && carries(fileB, secB, kind));
  const defaultA = fileMarket(secA);
  const defaultB = fileMarket(secB);
  const marketA = (line: ParsedLine) => marketOf(line) ?? defaultA;
  const marketB = (line: ParsedLine) => marketOf(line) ?? defaultB;
  const strongest = kinds[0] ?? null;
  const matched = new Map<ParsedLine, Match>();
  const taken = new Set<ParsedLine>();
  const notMatched: { a: ParsedLine; b: ParsedLine; why: string }[] = [];
  const add = (m: Match) => {
    matched.set(m.a, m);
    taken.add(m.b);
  };
  const openA = () => secA.filter((line) => !matched.has(line));
  const openB = () => secB.filter((line) => !taken.has(line));
  const index = (lines: ParsedLine[], key: (line: ParsedLine) => string | null) => {
    const map = new Map<string, ParsedLine[]>();
    for (const line of lines) {
      const k = key(line);
      if (k !== null) map.set(k, [...(map.get(k) ?? []), line]);
    }
    return map;
  };

  for (const kind of kinds) {
    const byId = index(openB(), (line) => idOf(line, kind));
    for (const a of openA()) {
      const id = idOf(a, kind);
      const b = id === null ? undefined : byId.get(id)?.find((line) => !taken.has(line));
      if (b) add({ a, b, method: kind, fallbackWhy: kind === strongest ? null : `${idGap(a, b, strongest!)}; matched on ${ID_NAMES[kind]} ${id}` });
    }
  }

  const byTicker = index(openB(), (line) => tickerKey(line.ticker));
  for (const a of openA()) {
    const key = tickerKey(a.ticker);
    if (key === null) continue;
    const candidates = (byTicker.get(key) ?? []).filter((line) => !taken.has(line));
    const ma = marketA(a);
    const fitting: { b: ParsedLine; market: Market }[] = [];
    for (const b of candidates) {
      const mb = marketB(b);
      if (!ma || !mb) {
        const missing = !ma ? 'A' : 'B';
        notMatched.push({
          a,
          b,
          why: `same ticker ${key}, but file ${missing} does not say where ${show(!ma ? a : b)} trades, so the company cannot be confirmed`,
        });
      } else if (!sameMarket(ma, mb)) {
        notMatched.push({ a, b, why: `same ticker ${key} on different markets (${ma.label} in A, ${mb.label} in B): not the same company` });
      } else if (strongest && idOf(a, strongest) && idOf(b, strongest) && nameKey(a.name)?.split(' ')[0] !== nameKey(b.name)?.split(' ')[0]) {
        notMatched.push({
          a,
          b,
          why: `same ticker ${key}, but ${idGap(a, b, strongest)} and the names differ (${a.name} / ${b.name}): the ticker may have been reused`,
        });
      } else fitting.push({ b, market: mb });
    }
    if (fitting.length === 1) {
      const { b, market } = fitting[0]!;
      add({
        a,
        b,
        method: 'ticker',
        fallbackWhy: strongest ? `${idGap(a, b, strongest)}; matched on ticker ${key} on the same market (${market.label})` : null,
      });
    } else if (fitting.length > 1) {
      for (const { b } of fitting) notMatched.push({ a, b, why: `ticker ${key} names ${fitting.length} lines on the same market in B: ambiguous` });
    }
  }

  const nameCounts = (lines: ParsedLine[]) => {
    const counts = new Map<string, number>();
    for (const line of lines) {
      const k = nameKey(line.name);
      if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    return counts;
  };
  const countA = nameCounts(openA());
  const countB = nameCounts(openB());
  const byName = index(openB(), (line) => nameKey(line.name));
  for (const a of openA()) {
    const key = nameKey(a.name);
    if (key === null || countA.get(key) !== 1 || countB.get(key) !== 1) continue;
    const b = byName.get(key)![0]!;
    const [ma, mb] = [marketA(a), marketB(b)];
    if (ma && mb && !sameMarket(ma, mb)) continue;
    const stronger = strongest
      ? idGap(a, b, strongest)
      : tickerKey(a.ticker) === tickerKey(b.ticker)
        ? `ticker ${a.ticker ?? ''} not confirmed on one market`
        : `ticker differs (${a.ticker ?? 'none'} in A, ${b.ticker ?? 'none'} in B)`;
    const tickers =
      strongest && tickerKey(a.ticker) !== tickerKey(b.ticker) ? ` and ticker differs (${a.ticker ?? 'none'} / ${b.ticker ?? 'none'})` : '';
    add({ a, b, method: 'name', fallbackWhy: `${stronger}${tickers}; matched on the name ${key}` });
  }
  return { strongest, matches: [...matched.values()], notMatched: notMatched.filter((p) => !matched.has(p.a)), taken };
}

/**
 * Compares the securities of two files (non-security lines are not compared), matching them one
 * to one on the strongest identifier both carry with stated fallbacks (see `matchSecurities`).
 *
 * - `commonCount`: matched securities; `matchedBy`: how many by each key.
 * - `weightOfAHeldInB` / `weightOfBHeldInA`: sum of a side's readable stated weights (percent, not
 *   renormalised) over the matched securities.
 * - `standardOverlap`: sum over matched securities of the smaller of the two weights (pairs with an
 *   unreadable weight are left out and counted in `commonWithUnreadableWeight`).
 * - `fallbackMatches` / `notMatched`: matches made by a weaker key, and look-alikes not matched, each with why.
 * - `daysBetween`: whole days between the two as-of dates; `null` if either is not known.
 */
export function compareFiles(
  a: ParsedHoldingsFile,
  b: ParsedHoldingsFile,
  selectionA: FileSelection,
  selectionB: FileSelection,
): CompareHoldingsResult {
  const secA = securitiesOf(a);
  const secB = securitiesOf(b);
  const { strongest, matches, notMatched, taken } = matchSecurities(a, secA, b, secB);
  const matchedA = new Set(matches.map((m) => m.a));
  const matchedBy = { cusip: 0, isin: 0, sedol: 0, ticker: 0, name: 0 };
  let weightA = 0;
  let weightB = 0;
  let overlap = 0;
  let unreadable = 0;
  for (const m of matches) {
    matchedBy[m.method] += 1;
    weightA += m.a.weight ?? 0;
    weightB += m.b.weight ?? 0;
    if (m.a.weight === null || m.b.weight === null) unreadable += 1;
    else overlap += Math.min(m.a.weight, m.b.weight);
  }
  return {
    a: summarise(a),
    b: summarise(b),
    selectionA,
    selectionB,
    daysBetween: a.asOf !== null && b.asOf !== null ? daysBetween(a.asOf, b.asOf) : null,
    commonCount: matches.length,
    onlyInA: heaviestFirst(secA.filter((line) => !matchedA.has(line))).map(toHoldingLine),
    onlyInB: heaviestFirst(secB.filter((line) => !taken.has(line))).map(toHoldingLine),
    weightOfAHeldInB: roundWeight(weightA),
    weightOfBHeldInA: roundWeight(weightB),
    standardOverlap: roundWeight(overlap),
    commonWithUnreadableWeight: unreadable,
    strongestSharedIdentifier: strongest ?? 'ticker',
    matchedBy,
    fallbackMatches: matches
      .filter((m) => m.fallbackWhy !== null)
      .map((m) => ({ a: toHoldingLine(m.a), b: toHoldingLine(m.b), method: m.method, why: m.fallbackWhy! })),
    notMatched: notMatched.map((p) => ({ a: toHoldingLine(p.a), b: toHoldingLine(p.b), why: p.why })),
  };
}
