/**
 * Header specifications of the four issuer layouts (column names as the issuers write them,
 * including the older Invesco names of QQQ_2018 and the iShares `Shares`/`Quantity` rename).
 */
import type { IssuerFormat } from '@runplane/contracts';
import type { HeaderSpec } from './table.js';

/** SSGA xlsx: `Name, Ticker, Identifier (CUSIP), SEDOL, Weight, Sector, Shares Held, Local Currency`. */
export const SSGA_HEADER: HeaderSpec = {
  required: ['name', 'ticker', 'cusip', 'weight'],
  aliases: {
    name: ['name'],
    ticker: ['ticker'],
    cusip: ['identifier', 'identifier (cusip)', 'cusip'],
    isin: ['isin'],
    sedol: ['sedol'],
    weight: ['weight', 'weight (%)'],
    sector: ['sector'],
    shares: ['shares held'],
  },
};

/** iShares csv: `Ticker, Name, Sector, Asset Class, Market Value, Weight (%), ..., Quantity|Shares, ...`. */
const ISHARES_HEADER: HeaderSpec = {
  required: ['ticker', 'name', 'assetClass', 'weight'],
  aliases: {
    ticker: ['ticker'],
    name: ['name'],
    sector: ['sector'],
    assetClass: ['asset class'],
    marketValue: ['market value'],
    weight: ['weight (%)'],
    shares: ['quantity', 'shares'],
    price: ['price'],
    location: ['location', 'location of risk'],
    exchange: ['exchange'],
    cusip: ['cusip'],
    isin: ['isin'],
    sedol: ['sedol'],
  },
};

/** Invesco csv: `Fund Ticker, Security Identifier, Holding Ticker, Shares/Par Value, MarketValue, Weight, Name, Class of Shares, Sector, Date` (and the 2018 names). */
const INVESCO_HEADER: HeaderSpec = {
  required: ['fund', 'ticker', 'weight', 'name'],
  aliases: {
    fund: ['fund ticker', 'fundticker'],
    cusip: ['security identifier', 'security identifier (cusip)', 'securitynum'],
    ticker: ['holding ticker', 'holdingsticker', 'holdings ticker'],
    shares: ['shares/par value', 'shares'],
    marketValue: ['marketvalue', 'market value'],
    weight: ['weight'],
    name: ['name'],
    classOfShares: ['class of shares'],
    sector: ['sector'],
    date: ['date'],
  },
};

/** ARK csv: `date, fund, company, ticker, cusip, shares, "market value ($)", "weight (%)"`. */
const ARK_HEADER: HeaderSpec = {
  required: ['date', 'fund', 'name', 'ticker', 'weight'],
  aliases: {
    date: ['date'],
    fund: ['fund'],
    name: ['company'],
    ticker: ['ticker'],
    cusip: ['cusip'],
    shares: ['shares'],
    marketValue: ['market value ($)', 'market value'],
    weight: ['weight (%)', 'weight(%)', 'weight'],
  },
};

/** Each layout's issuer as users know it, and each column role in plain words (for "unknown layout" reasons). */
export const ISSUER_NAMES: Record<IssuerFormat, string> = {
  'ssga-xlsx': 'SPDR (State Street) workbook',
  'ishares-csv': 'iShares csv',
  'invesco-csv': 'Invesco csv',
  'ark-csv': 'ARK csv',
};
export const ROLE_WORDS: Record<string, string> = {
  ticker: 'a ticker column ("Ticker" / "Holding Ticker")',
  name: 'a security name column ("Name" / "company")',
  cusip: 'an identifier column ("Identifier" / "CUSIP")',
  weight: 'a weight column ("Weight (%)" / "Weight")',
  assetClass: 'an "Asset Class" column',
  fund: 'a fund ticker column ("Fund Ticker" / "fund")',
  date: 'a "date" column',
};

/** The csv layouts, in the order they are tried when sniffing. */
export const CSV_FORMATS: readonly { format: Exclude<IssuerFormat, 'ssga-xlsx'>; header: HeaderSpec }[] = [
  { format: 'ishares-csv', header: ISHARES_HEADER },
  { format: 'invesco-csv', header: INVESCO_HEADER },
  { format: 'ark-csv', header: ARK_HEADER },
];
