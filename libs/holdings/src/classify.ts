/**
 * Classification of holdings-table rows into securities and non-security lines (cash, money-market
 * funds, futures, cash collateral, other). Pure functions of a row's stated fields.
 */
import type { LineKind } from './types.js';

const MONEY_MARKET_NAME =
  /\b(MONEY MARKET|MMF|GOVT CASH|CSH FND|CASH MAN|TRSY OBLIG|TREASURY (PORTFOLIO|OBLIG\w*|FUND)|TREAS(URY)? SL AGENCY|LIQUIDITY FUND)\b/i;
const CASH_NAME = /^(U\.?S\.? DOLLARS?|USD CASH|CASH( AND EQUIVALENTS)?|CASH\/RECEIVABLES|ETD USD BALANCE\b.*)$/i;
const FUTURES_NAME = /\b(FUTURES?|E-?MINI)\b/i;
const COLLATERAL_NAME = /\bCASH COLLATERAL\b/i;

/**
 * Classifies an iShares row by its `Asset Class` column (then its name), never by its ticker:
 * IVV_2025-11-18 has a "CASH COLLATERAL USD JPM" line whose ticker `JPM` collides with JPMorgan.
 *
 * `Cash` -> cash, `Money Market` -> money-market, `Futures` -> futures,
 * `Cash Collateral and Margins` -> collateral, other derivative / FX classes or the
 * `Cash and/or Derivatives` sector -> other; everything else (Equity, Fixed Income...) -> security.
 */
export function classifyIsharesLine(assetClass: string | null, sector: string | null, name: string): LineKind {
  const cls = (assetClass ?? '').trim().toLowerCase();
  if (cls.startsWith('cash collateral') || COLLATERAL_NAME.test(name)) return 'collateral';
  if (cls === 'money market') return 'money-market';
  if (cls === 'futures') return 'futures';
  if (cls === 'cash') return 'cash';
  if (/^(fx|forwards?|swaps?|options?|currency)\b/.test(cls)) return 'other';
  if ((sector ?? '').trim().toLowerCase() === 'cash and/or derivatives') return 'other';
  return 'security';
}

/**
 * Classifies a row of an issuer format without an asset-class column (SSGA, Invesco, ARK) from its
 * ticker, identifier, name and (Invesco) class of shares.
 *
 * - SSGA "US DOLLAR" (ticker `-`, identifier `999USDZ92`) -> cash.
 * - ARK money-market funds (blank ticker, pseudo-CUSIP `X9USD...`) -> money-market.
 * - Blank ticker with cash / futures / collateral names -> that kind; blank ticker with no real
 *   CUSIP -> other. A blank ticker with a real CUSIP stays a security (ARK holds some unlisted names).
 * - A line with a ticker is a security unless its name is plainly cash ("USD CASH", "US DOLLAR").
 */
export function classifyLineByName(ticker: string | null, cusip: string | null, name: string, classOfShares: string | null = null): LineKind {
  const n = name.trim();
  const cls = (classOfShares ?? '').trim().toLowerCase();
  const pseudoCusip = cusip !== null && /^(999|X9)/i.test(cusip);
  if (ticker !== null) {
    if (CASH_NAME.test(n) || cls === 'cash') return 'cash';
    if (cls === 'money market') return 'money-market';
    return 'security';
  }
  if (COLLATERAL_NAME.test(n)) return 'collateral';
  if (CASH_NAME.test(n)) return 'cash';
  if (MONEY_MARKET_NAME.test(n) || cls === 'money market' || (cusip ?? '').toUpperCase().startsWith('X9USD')) {
    return 'money-market';
  }
  if (cls === 'cash' || /^999USD/i.test(cusip ?? '')) return 'cash';
  if (FUTURES_NAME.test(n) || cls === 'futures') return 'futures';
  if (cusip === null || pseudoCusip) return 'other';
  return 'security';
}
