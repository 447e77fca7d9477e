/**
 * Security identity across issuer files: which identifier a cell holds (CUSIP, ISIN, SEDOL), the
 * market a line trades on (iShares `Location`/`Exchange`, a Bloomberg exchange suffix on the
 * ticker, or a North American CUSIP), and the keys the fallback matches use (ticker without an
 * exchange suffix, company name without punctuation and legal-form words).
 */
import type { ParsedLine } from './types.js';
import { normaliseTicker } from './values.js';

/** The kind of a security identifier, judged by its shape (lengths and character classes of the standards). */
export function identifierKind(text: string | null | undefined): 'cusip' | 'isin' | 'sedol' | null {
  const id = (text ?? '').trim().toUpperCase();
  if (/^[A-Z]{2}[A-Z0-9]{9}\d$/.test(id)) return 'isin';
  if (/^[0-9A-Z*@#]{8}\d$/.test(id) && /\d/.test(id.slice(0, 8))) return 'cusip';
  if (/^[0-9B-DF-HJ-NP-TV-Z]{6}\d$/.test(id)) return 'sedol';
  return null;
}

/** The CUSIP of a line: its CUSIP cell, else the CUSIP inside a US or Canadian ISIN (`US0378331005` -> `037833100`). */
export function cusipOf(line: Pick<ParsedLine, 'cusip' | 'isin'>): string | null {
  const cusip = line.cusip?.trim().toUpperCase() || null;
  if (cusip !== null && !/^(999|X9)/.test(cusip)) return cusip;
  const isin = line.isin?.trim().toUpperCase() ?? '';
  return /^(US|CA)[A-Z0-9]{9}\d$/.test(isin) ? isin.slice(2, 11) : null;
}

/** Bloomberg-style exchange suffixes on tickers (`DKNG UW`) -> the country they trade in. */
const EXCHANGE_SUFFIX_COUNTRY: Record<string, string> = {
  US: 'UNITED STATES',
  UW: 'UNITED STATES',
  UN: 'UNITED STATES',
  UQ: 'UNITED STATES',
  UA: 'UNITED STATES',
  UR: 'UNITED STATES',
  UP: 'UNITED STATES',
  UV: 'UNITED STATES',
  UF: 'UNITED STATES',
  CN: 'CANADA',
  CT: 'CANADA',
  LN: 'UNITED KINGDOM',
  HK: 'HONG KONG',
  IN: 'INDIA',
  IB: 'INDIA',
  IS: 'INDIA',
  TT: 'TAIWAN',
  JP: 'JAPAN',
  JT: 'JAPAN',
  KS: 'KOREA (SOUTH)',
  PM: 'PHILIPPINES',
  PW: 'POLAND',
  AB: 'SAUDI ARABIA',
  BZ: 'BRAZIL',
  MM: 'MEXICO',
  SJ: 'SOUTH AFRICA',
  CH: 'CHINA',
  C1: 'CHINA',
  C2: 'CHINA',
};

/** A ticker's exchange suffix when it carries a known one (`"DKNG UW"` -> `UW`), else `null`. */
function exchangeSuffix(ticker: string | null): string | null {
  const m = /^\S+\s+([A-Z0-9]{2})$/.exec((ticker ?? '').trim().toUpperCase());
  return m && EXCHANGE_SUFFIX_COUNTRY[m[1]!] ? m[1]! : null;
}

/**
 * Ticker key for the ticker fallback: the ticker without a known exchange suffix (`DKNG UW` ->
 * `DKNG`), then {@link normaliseTicker} (`BRK.B` == `BRKB`). `null` for a missing ticker.
 */
export function tickerKey(ticker: string | null): string | null {
  const suffix = exchangeSuffix(ticker);
  return normaliseTicker(suffix ? ticker!.trim().slice(0, -suffix.length) : ticker);
}

/** Where a line trades: the countries it may trade in and how that is known, or `null` when the file does not say. */
export interface Market {
  countries: ReadonlySet<string>;
  /** In words: `India, National Stock Exchange Of India`, `US/Canada (from its CUSIP)`. */
  label: string;
}

/**
 * The market of a line, from the strongest evidence the file gives: iShares `Location` (and
 * `Exchange`), else a Bloomberg exchange suffix on the ticker, else a CUSIP whose first character
 * is a digit (issued in the United States or Canada; foreign CINS codes start with a letter).
 */
export function marketOf(line: ParsedLine): Market | null {
  const location = line.location?.trim();
  if (location && location !== '-') {
    const exchange = line.exchange?.trim();
    return { countries: new Set([location.toUpperCase()]), label: exchange && exchange !== '-' ? `${location}, ${exchange}` : location };
  }
  const suffix = exchangeSuffix(line.ticker);
  if (suffix) {
    const country = EXCHANGE_SUFFIX_COUNTRY[suffix]!;
    return { countries: new Set([country]), label: `${country.toLowerCase()} (exchange code ${suffix})` };
  }
  const cusip = cusipOf(line);
  if (cusip && /^\d/.test(cusip)) return { countries: new Set(['UNITED STATES', 'CANADA']), label: 'US/Canada (from its CUSIP)' };
  return null;
}

/** True when two markets share a country. */
export function sameMarket(a: Market, b: Market): boolean {
  for (const c of a.countries) if (b.countries.has(c)) return true;
  return false;
}

const LEGAL_FORMS = new Set([
  'INC',
  'INCORPORATED',
  'CORP',
  'CORPORATION',
  'CO',
  'COMPANY',
  'LTD',
  'LIMITED',
  'PLC',
  'SA',
  'NV',
  'AG',
  'SE',
  'LLC',
  'LP',
  'THE',
  'COM',
  'COMMON',
  'STOCK',
  'SHS',
  'ORD',
]);

/**
 * Company-name key for the name fallback: upper-case, `&` as `AND`, punctuation dropped, share
 * classes kept in one spelling (`CL A`, `CLASS A`, `-A` -> `CLASS A`, so Alphabet's two classes
 * stay apart), legal-form words (`INC`, `CORP`, `PLC`...) dropped. `null` when nothing is left.
 */
export function nameKey(name: string): string | null {
  let text = ` ${name.toUpperCase().replace(/&/g, ' AND ')} `;
  text = text.replace(/\s-\s?([A-Z])\s*$/, ' CLASS $1 ').replace(/\bCL(?:ASS)?\.?\s+([A-Z])\b/g, ' CLASS $1 ');
  const words = text
    .replace(/[^A-Z0-9 ]+/g, ' ')
    .split(/\s+/)
    .filter((w) => w !== '' && !LEGAL_FORMS.has(w));
  return words.length > 0 ? words.join(' ') : null;
}

/**
 * The market most of a file's securities trade on, for lines that do not say where they trade
 * (an Irish-domiciled company in a US fund has a foreign CINS code, not a US CUSIP): the countries
 * shared by at least 90 % of the securities whose market is known, when those are at least half
 * of the file. `null` for a mixed file (an emerging-markets fund), where nothing is presumed.
 */
export function fileMarket(lines: readonly ParsedLine[]): Market | null {
  const known = lines.map(marketOf).filter((m): m is Market => m !== null);
  if (known.length === 0 || known.length * 2 < lines.length) return null;
  const counts = new Map<string, number>();
  for (const m of known) for (const c of m.countries) counts.set(c, (counts.get(c) ?? 0) + 1);
  const countries = [...counts].filter(([, n]) => n >= 0.9 * known.length).map(([c]) => c);
  if (countries.length === 0) return null;
  const names = countries.map((c) => (c === 'UNITED STATES' ? 'US' : c === 'CANADA' ? 'Canada' : c.toLowerCase()));
  return {
    countries: new Set(countries),
    label: `${names.join('/')} (presumed: the file does not say for this line, and ${names.join('/')} for 90 %+ of the others)`,
  };
}
