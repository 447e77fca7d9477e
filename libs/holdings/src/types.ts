/**
 * Shapes of a parsed issuer holdings file. Weights are percentages of the fund as the file states
 * them (7.15 = 7.15 %); dates are `YYYY-MM-DD` read from inside the file, or `null` when the file
 * states none (`asOfHow: 'absent'`) or states one that cannot be read (`asOfHow: 'unreadable'`).
 */
import type { AsOfHow, IssuerFormat, UnreadableValue } from '@runplane/contracts';

/** How a line of the holdings table was classified: a security, or one of the contract's non-security kinds. */
export type LineKind = 'security' | 'cash' | 'money-market' | 'futures' | 'collateral' | 'other';

/** One row of the holdings table (preamble, header, blank lines and footer excluded). */
export interface ParsedLine {
  /** Ticker as the file writes it, trimmed; `null` when blank or `-`. */
  ticker: string | null;
  name: string;
  /** CUSIP (or the issuer's pseudo-identifier for cash lines); `null` where the file has none. */
  cusip: string | null;
  /** ISIN / SEDOL where the file carries them. */
  isin: string | null;
  sedol: string | null;
  /** Percent of the fund; `null` when the stated weight cannot be read (see `unreadable`), never 0 instead. */
  weight: number | null;
  kind: LineKind;
  /** Sector as stated; `null` when absent or `-` (SSGA writes `-` on every row). */
  sector: string | null;
  /** Shares / quantity / par value held, where the file states it (`null`: absent or unreadable). */
  shares: number | null;
  /** Market value in the file's currency, where stated (`null`: absent or unreadable). */
  marketValue: number | null;
  /** iShares `Asset Class` (e.g. `Equity`, `Money Market`); `null` for other formats. */
  assetClass: string | null;
  /** iShares `Location` (country of the security) and `Exchange`, as stated; `null` elsewhere. */
  location: string | null;
  exchange: string | null;
  /** Stated values that could not be read as numbers, with the cell text. */
  unreadable: UnreadableValue[];
  /** 1-based line (csv) or row (xlsx) number in the file, for tracing. */
  sourceRow: number;
}

/** A fund-level fact read from a file's preamble (or a fact sheet / overview table). */
export interface FileFact {
  field: string;
  value: string;
}

/** A fully parsed holdings file. */
export interface ParsedHoldingsFile {
  /** Absolute path as given to the parser. */
  path: string;
  /** Base file name. */
  file: string;
  /** Lower-case hex sha256 of the bytes parsed. */
  sha256: string;
  issuerFormat: IssuerFormat;
  /** Fund ticker, upper-case. */
  fund: string;
  /** Where the fund ticker came from: inside the file, or the file-name prefix (iShares has none inside). */
  fundSource: 'inside-file' | 'file-name';
  /** As-of date read from inside the file, `YYYY-MM-DD`; `null` = absent or unreadable (see `asOfHow`). */
  asOf: string | null;
  /** How the as-of date was established (never from the file name). */
  asOfHow: AsOfHow;
  /** The text the date was read from, or the date line that could not be read; `null` when none. */
  asOfText: string | null;
  /** Where the as-of date was read (e.g. `preamble "As of 30-Sep-2025"`), or why it is missing, in words. */
  asOfSource: string;
  /** Fund name from the preamble, where the format has one. */
  fundName: string | null;
  /** Preamble facts (fund name, inception date, shares outstanding...) as the file states them. */
  preambleFacts: FileFact[];
  /** Every table row in file order: securities and classified non-security lines. */
  lines: ParsedLine[];
  /** True when the format carries a CUSIP column (SSGA, Invesco, ARK). */
  hasCusips: boolean;
  /** True when the file carries an ISIN / SEDOL column. */
  hasIsins: boolean;
  hasSedols: boolean;
}
