/**
 * Issuer-format quirks on small hand-written texts (not copies of the issuer files): BOM,
 * preambles, the single non-breaking-space line, footers, ragged rows, older header names.
 */
import { describe, it, expect } from '@jest/globals';
import { parseHoldingsCsvText, sniffCsvFormat, ToolFailure } from '../src/index.js';

const NBSP = '\u00a0';

const ISHARES = [
  '\uFEFFiShares Example ETF',
  'Fund Holdings as of,"Dec 06, 2024"',
  'Inception Date,"May 15, 2000"',
  'Shares Outstanding,"957,950,000.00"',
  'Stock,"-"',
  NBSP,
  'Ticker,Name,Sector,Asset Class,Market Value,Weight (%),Notional Value,Quantity,Price,Location,Exchange,Currency,FX Rate,Market Currency,Accrual Date',
  '"JPM","JPMORGAN CHASE & CO","Financials","Equity","1,000.00","60.50","1,000.00","1,234.00","10.00","United States","New York Stock Exchange Inc.","USD","1.00","USD","-"',
  '"BRKB","BERKSHIRE HATHAWAY INC CLASS B","Financials","Equity","500.00","39.00","500.00","5.00","100.00","United States","New York Stock Exchange Inc.","USD","1.00","USD","-"',
  '"JPM","CASH COLLATERAL USD JPM","Cash and/or Derivatives","Cash Collateral and Margins","21.04","0.00","21.04","21.00","100.00","United States","-","USD","1.00","USD","Dec 18, 2013"',
  '"ESZ5","S&P500 EMINI DEC 25","Cash and/or Derivatives","Futures","0.00","0.00","1,598,851,800.00","4,816.00","6,639.75","-","Index And Options Market","USD","1.00","USD","-"',
  NBSP,
  '"A quoted disclaimer, with commas, that is not a holding."',
  'Holdings subject to change, see the "prospectus" for more.',
].join('\n');

describe('iShares csv', () => {
  const parsed = parseHoldingsCsvText(ISHARES, '/data/XYZ_holdings.csv');

  it('reads the preamble (date, facts) and takes the fund from the file name', () => {
    expect(parsed.issuerFormat).toBe('ishares-csv');
    expect(parsed.asOf).toBe('2024-12-06');
    expect(parsed.fund).toBe('XYZ');
    expect(parsed.fundSource).toBe('file-name');
    expect(parsed.fundName).toBe('iShares Example ETF');
    expect(parsed.preambleFacts).toEqual([
      { field: 'Fund Name', value: 'iShares Example ETF' },
      { field: 'Fund Holdings as of', value: 'Dec 06, 2024' },
      { field: 'Inception Date', value: 'May 15, 2000' },
      { field: 'Shares Outstanding', value: '957,950,000.00' },
    ]);
  });

  it('stops at the non-breaking-space line and keeps the JPM collateral line apart from JPMorgan', () => {
    expect(parsed.lines.map((l) => [l.ticker, l.kind])).toEqual([
      ['JPM', 'security'],
      ['BRKB', 'security'],
      ['JPM', 'collateral'],
      ['ESZ5', 'futures'],
    ]);
    expect(parsed.lines[0]).toMatchObject({ weight: 60.5, shares: 1234, cusip: null, sector: 'Financials' });
    expect(parsed.hasCusips).toBe(false);
  });

  it('is undated when the preamble is missing (EEM-style)', () => {
    const noPreamble = ISHARES.split('\n').slice(6).join('\n');
    const eem = parseHoldingsCsvText(noPreamble, 'EEM_undated.csv');
    expect(eem.asOf).toBeNull();
    expect(eem.fund).toBe('EEM');
    expect(eem.lines).toHaveLength(4);
  });
});

describe('Invesco csv', () => {
  it('reads the 2020+ layout: trailing ticker spaces, per-row date, fund inside', () => {
    const text = [
      'Fund Ticker,Security Identifier,Holding Ticker,Shares/Par Value,MarketValue,Weight,Name,Class of Shares,Sector,Date',
      'QQQ,67066G104,NVDA ,"204,259,829","36,397,058,929.51",9.507,NVIDIA Corp,Common Stock,Information Technology,09/26/2025',
      'QQQ,02079K305,GOOGL ,"1","1.00",2.5,Alphabet Inc,Common Stock,Communication Services,09/26/2025',
      '',
    ].join('\r\n');
    const parsed = parseHoldingsCsvText(text, 'whatever.txt');
    expect(parsed).toMatchObject({ issuerFormat: 'invesco-csv', fund: 'QQQ', fundSource: 'inside-file', asOf: '2025-09-26', hasCusips: true });
    expect(parsed.lines[0]).toMatchObject({ ticker: 'NVDA', cusip: '67066G104', weight: 9.507, shares: 204259829, kind: 'security' });
    expect(parsed.lines).toHaveLength(2);
  });

  it('reads the 2018 header names', () => {
    const text = [
      'FundTicker,SecurityNum,HoldingsTicker,Shares,MarketValue,Weight,Name,Sector,Date',
      'QQQ,30303M102,FB ,"10","100.00",4.2,Facebook Inc,Communication Services,03/01/2018',
    ].join('\n');
    const parsed = parseHoldingsCsvText(text, 'QQQ_2018.csv');
    expect(parsed.asOf).toBe('2018-03-01');
    expect(parsed.lines[0]).toMatchObject({ ticker: 'FB', cusip: '30303M102', weight: 4.2 });
  });
});

describe('ARK csv', () => {
  it('reads percent weights, the money-market line and stops at the quoted disclaimer', () => {
    const text = [
      'date,fund,company,ticker,cusip,shares,"market value ($)","weight (%)"',
      '06/04/2024,ARKK,"TESLA INC",TSLA,88160R101,"4,125,293","$727,247,902.97",11.75%',
      '06/04/2024,ARKK,"GOLDMAN FS TRSY OBLIG INST 468",,X9USDGSFT,"11,064,247","$11,064,246.51",0.18%',
      '"Investors should carefully consider the investment objectives, risks, charges and expenses."',
    ].join('\n');
    const parsed = parseHoldingsCsvText(text, 'ARKK_x.csv');
    expect(parsed).toMatchObject({ issuerFormat: 'ark-csv', fund: 'ARKK', asOf: '2024-06-04' });
    expect(parsed.lines.map((l) => [l.ticker, l.cusip, l.weight, l.kind])).toEqual([
      ['TSLA', '88160R101', 11.75, 'security'],
      [null, 'X9USDGSFT', 0.18, 'money-market'],
    ]);
    expect(parsed.lines[0]!.marketValue).toBe(727247902.97);
  });
});

describe('sniffing', () => {
  it('recognises layouts by content and rejects other csv files', () => {
    expect(sniffCsvFormat(ISHARES)).toBe('ishares-csv');
    expect(sniffCsvFormat(',Assets,NAV,Expense\nSPY,1,2,3\n')).toBeNull();
    expect(sniffCsvFormat(',AAPL,MSFT,SUM\n08/31/2021,21.5,20.4,100\n')).toBeNull();
    expect(() => parseHoldingsCsvText('# a markdown file\n', 'x.md')).toThrow(ToolFailure);
  });
});
