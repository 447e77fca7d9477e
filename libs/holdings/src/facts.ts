/**
 * Fund facts from the files that are not holdings files: the stockanalysis ETF overview table
 * (one row per fund, no date inside) and Vanguard fact sheets converted to Markdown.
 */
import { parseCsvRows, normaliseHeaderCell } from './table.js';
import type { FileFact } from './types.js';
import { cleanText, parseStatedDate } from './values.js';

/** Facts about one fund found in an overview table: fund ticker -> facts. */
export type OverviewTable = Map<string, FileFact[]>;

/** Labels for overview columns whose unit SOURCES.md documents; other columns keep their header name. */
const OVERVIEW_LABELS: Record<string, string> = {
  assets: 'Assets ($M)',
  expense: 'Expense ratio (%)',
  sharesout: 'Shares outstanding (M)',
  divyield: 'Dividend yield (%)',
  n_hold: 'Number of holdings (N_Hold)',
};

/**
 * True when the first line of `text` is the overview header: an empty (ticker) first column, then
 * `Assets`, ..., `Expense`, ... (e.g. `,Assets,NAV,Expense,PE,...,N_Hold`).
 */
export function isOverviewTable(text: string): boolean {
  const header = parseCsvRows(text, 1)[0]?.cells.map(normaliseHeaderCell) ?? [];
  return header.length > 3 && (header[0] === '' || header[0] === 'ticker') && header.includes('assets') && header.includes('expense');
}

/**
 * Parses the overview table into per-fund facts (values as stated, empty cells skipped). Field
 * names are the column headers, with units added where documented (e.g. `Assets ($M)`).
 */
export function parseOverviewTable(text: string): OverviewTable {
  const rows = parseCsvRows(text);
  const header = rows[0]?.cells ?? [];
  const table: OverviewTable = new Map();
  for (const { cells } of rows.slice(1)) {
    const fund = cleanText(cells[0])?.toUpperCase();
    if (!fund) continue;
    const facts: FileFact[] = [];
    header.forEach((name, index) => {
      if (index === 0) return;
      const value = cleanText(cells[index]);
      if (value === null) return;
      facts.push({ field: OVERVIEW_LABELS[normaliseHeaderCell(name)] ?? name.trim(), value });
    });
    if (!table.has(fund)) table.set(fund, facts);
  }
  return table;
}

/** A fact sheet's fund, its as-of date and the facts that are easy to pick out. */
export interface FactSheet {
  fund: string;
  /** Date of the `As of ...` line (`null`: no such line, or one that cannot be read; see `asOfText`). */
  asOf: string | null;
  /** The `As of` line's text, `null` when the sheet has none. */
  asOfText: string | null;
  facts: FileFact[];
}

const FACT_SHEET_ROWS: readonly [RegExp, string][] = [
  [/^benchmark\b/i, 'Benchmark'],
  [/^expense ratio\b/i, 'Expense ratio'],
  [/^inception date\b/i, 'Inception date'],
  [/^etf total net assets\b/i, 'ETF total net assets'],
  [/^fund total net assets\b/i, 'Fund total net assets'],
  [/^dividend schedule\b/i, 'Dividend schedule'],
  [/^cusip number\b/i, 'CUSIP'],
  [/^exchange\b/i, 'Exchange'],
  [/^number ?of stocks\b/i, 'Number of stocks'],
];

function decodeEntities(text: string): string {
  return text
    .replace(/&amp;/g, '&')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'");
}

/**
 * Reads a fund fact sheet in Markdown (Vanguard layout: `## <name> | <TICKER>` heading,
 * `As of June 30, 2025`, `| Benchmark | ... |` rows). Returns `null` when the text is not such a
 * fact sheet (no `Ticker symbol` row and no `| TICKER` heading).
 *
 * Facts: fund name, benchmark, expense ratio, inception date, net assets, dividend schedule,
 * CUSIP, exchange, number of stocks (the fund's column); values as stated, first occurrence wins.
 */
export function parseFactSheet(markdown: string): FactSheet | null {
  const text = decodeEntities(markdown);
  const tickerRow = /^\|\s*Ticker symbol\s*\|\s*([A-Z][A-Z0-9.]{0,11})\s*\|/im.exec(text);
  const heading = /^#{1,3}\s+(.+?)\s*\|\s*([A-Z][A-Z0-9.]{0,11})\s*$/m.exec(text);
  const fund = tickerRow?.[1] ?? heading?.[2];
  if (!fund) return null;
  const facts: FileFact[] = [];
  if (heading?.[1]) facts.push({ field: 'Fund name', value: heading[1].trim() });
  const seen = new Set<string>();
  for (const line of text.split(/\r?\n/)) {
    const cells = /^\|(.+)\|\s*$/
      .exec(line)?.[1]
      ?.split('|')
      .map((c) => c.trim());
    if (!cells || cells.length < 2 || /^-+$/.test(cells[0]!)) continue;
    for (const [pattern, field] of FACT_SHEET_ROWS) {
      if (seen.has(field) || !pattern.test(cells[0]!)) continue;
      const value = cleanText(cells[1]);
      if (value === null) continue;
      seen.add(field);
      facts.push({ field, value });
    }
  }
  if (facts.length === 0) return null;
  const asOfText = /^As of (.+)$/im.exec(text)?.[1]?.trim() ?? null;
  return { fund: fund.toUpperCase(), asOf: parseStatedDate(asOfText), asOfText, facts };
}
