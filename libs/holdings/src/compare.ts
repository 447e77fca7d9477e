/**
 * Pure summaries and comparisons of parsed holdings files, producing the contract's
 * `HoldingsSummary`, `GetHoldingsResult` and `CompareHoldingsResult` shapes.
 */
import type { CompareHoldingsResult, GetHoldingsResult, HoldingLine, HoldingsSummary } from '@runplane/contracts';
import type { LineKind, ParsedHoldingsFile, ParsedLine } from './types.js';
import { daysBetween, normaliseTicker, roundWeight } from './values.js';

/** Most securities listed in `GetHoldingsResult.top`. */
export const TOP_HOLDINGS = 25;

/** The security lines of a parsed file (cash and other non-security lines excluded), in file order. */
export function securitiesOf(file: ParsedHoldingsFile): ParsedLine[] {
  return file.lines.filter((line) => line.kind === 'security');
}

/** A parsed line in the contract's `HoldingLine` shape (ticker, name, cusip, weight in percent). */
function toHoldingLine(line: ParsedLine): HoldingLine {
  return { ticker: line.ticker, name: line.name, cusip: line.cusip, weight: line.weight };
}

/** Lines sorted by weight, heaviest first (ties keep file order). */
function heaviestFirst(lines: readonly ParsedLine[]): ParsedLine[] {
  return [...lines].sort((x, y) => y.weight - x.weight || x.sourceRow - y.sourceRow);
}

/** Sum of the lines' weights in percent, rounded to 6 decimals against float noise (not renormalised). */
function weightSum(lines: readonly ParsedLine[]): number {
  return roundWeight(lines.reduce((sum, line) => sum + line.weight, 0));
}

/**
 * The contract's `HoldingsSummary` of one file: security count, every non-security line with its
 * kind, the sum of all weights and of the securities' weights (percent, as stated).
 */
export function summarise(file: ParsedHoldingsFile): HoldingsSummary {
  const securities = securitiesOf(file);
  return {
    fund: file.fund,
    file: file.file,
    issuerFormat: file.issuerFormat,
    asOf: file.asOf,
    securityCount: securities.length,
    nonSecurityLines: file.lines
      .filter((line) => line.kind !== 'security')
      .map((line) => ({ ...toHoldingLine(line), kind: line.kind as Exclude<LineKind, 'security'> })),
    weightSum: weightSum(file.lines),
    securitiesWeightSum: weightSum(securities),
  };
}

/** `get_holdings` result for one file: its summary plus the {@link TOP_HOLDINGS} heaviest securities. */
export function holdingsResult(file: ParsedHoldingsFile): GetHoldingsResult {
  return { ...summarise(file), top: heaviestFirst(securitiesOf(file)).slice(0, TOP_HOLDINGS).map(toHoldingLine) };
}

/** How one security of a file is found in the other file. */
export type MatchMethod = 'cusip' | 'ticker';

/** Lookup of a file's securities by CUSIP and by normalised ticker ({@link normaliseTicker}). */
interface SecurityIndex {
  hasCusips: boolean;
  byCusip: Map<string, ParsedLine[]>;
  byTicker: Map<string, ParsedLine[]>;
}

function indexSecurities(file: ParsedHoldingsFile, securities: readonly ParsedLine[]): SecurityIndex {
  const byCusip = new Map<string, ParsedLine[]>();
  const byTicker = new Map<string, ParsedLine[]>();
  const add = (map: Map<string, ParsedLine[]>, key: string | null, line: ParsedLine) => {
    if (key !== null) map.set(key, [...(map.get(key) ?? []), line]);
  };
  for (const line of securities) {
    add(byCusip, line.cusip?.trim().toUpperCase() || null, line);
    add(byTicker, normaliseTicker(line.ticker), line);
  }
  return { hasCusips: file.hasCusips, byCusip, byTicker };
}

/**
 * The lines of the other file that hold the same security as `line`, and how they were found:
 * by CUSIP when both files carry CUSIPs and the line has one, else by normalised ticker
 * (trim, upper-case, drop `.`, `/`, spaces: `BRK.B` == `BRKB`).
 */
function findInOther(line: ParsedLine, ownHasCusips: boolean, other: SecurityIndex): { method: MatchMethod; lines: ParsedLine[] } {
  const cusip = line.cusip?.trim().toUpperCase() || null;
  if (ownHasCusips && other.hasCusips && cusip !== null) {
    return { method: 'cusip', lines: other.byCusip.get(cusip) ?? [] };
  }
  const ticker = normaliseTicker(line.ticker);
  return { method: 'ticker', lines: ticker === null ? [] : (other.byTicker.get(ticker) ?? []) };
}

/**
 * Compares the securities of two files (non-security lines are not compared).
 *
 * - `commonCount`: securities of A also held by B.
 * - `weightOfAHeldInB`: sum of A's stated weights (percent, not renormalised) over those securities;
 *   `weightOfBHeldInA` likewise for B.
 * - `onlyInA` / `onlyInB`: securities held by one file only, heaviest first.
 * - `matchedBy`: how many of the common securities were matched by CUSIP and by ticker.
 * - `daysBetween`: whole days between the two as-of dates; `null` if either file is undated.
 */
export function compareFiles(a: ParsedHoldingsFile, b: ParsedHoldingsFile): CompareHoldingsResult {
  const securitiesA = securitiesOf(a);
  const securitiesB = securitiesOf(b);
  const indexA = indexSecurities(a, securitiesA);
  const indexB = indexSecurities(b, securitiesB);
  const matchedBy = { cusip: 0, ticker: 0 };
  const onlyInA: ParsedLine[] = [];
  let weightOfAHeldInB = 0;
  for (const line of securitiesA) {
    const found = findInOther(line, a.hasCusips, indexB);
    if (found.lines.length === 0) {
      onlyInA.push(line);
      continue;
    }
    matchedBy[found.method] += 1;
    weightOfAHeldInB += line.weight;
  }
  const onlyInB: ParsedLine[] = [];
  let weightOfBHeldInA = 0;
  for (const line of securitiesB) {
    if (findInOther(line, b.hasCusips, indexA).lines.length === 0) onlyInB.push(line);
    else weightOfBHeldInA += line.weight;
  }
  return {
    a: summarise(a),
    b: summarise(b),
    daysBetween: a.asOf !== null && b.asOf !== null ? daysBetween(a.asOf, b.asOf) : null,
    commonCount: securitiesA.length - onlyInA.length,
    onlyInA: heaviestFirst(onlyInA).map(toHoldingLine),
    onlyInB: heaviestFirst(onlyInB).map(toHoldingLine),
    weightOfAHeldInB: roundWeight(weightOfAHeldInB),
    weightOfBHeldInA: roundWeight(weightOfBHeldInA),
    matchedBy,
  };
}
