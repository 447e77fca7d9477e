/**
 * The defect kinds of docs/fund-research.md (wrong figures, guessed dates and securities), each on small files written here (not copies of the issuer files):
 * security identity across markets and over time, dates as issuers write them, unreadable values,
 * unknown layouts, and the provenance every result carries. "Before" notes what the code did.
 */
import { describe, it, expect } from '@jest/globals';
import { createHash } from 'node:crypto';
import { CompareHoldingsResult, GetHoldingsResult, ListFundsResult } from '@runplane/contracts';
import { executeTool, HoldingsLibrary, parseHoldingsCsvText, parseStatedDate, ToolFailure } from '../src/index.js';
import { libraryOf } from './folder.js';

const ISHARES_HEADER =
  'Ticker,Name,Sector,Asset Class,Market Value,Weight (%),Notional Value,Quantity,Price,Location,Exchange,Currency,FX Rate,Market Currency,Accrual Date';
const ishares = (date: string | null, rows: string[]) =>
  [
    '\uFEFFiShares Example ETF',
    ...(date === null ? [] : [`Fund Holdings as of,"${date}"`]),
    'Inception Date,"Apr 07, 2003"',
    '\u00a0',
    ISHARES_HEADER,
    ...rows,
  ].join('\n');
const iRow = (ticker: string, name: string, weight: string, location: string, exchange: string) =>
  `"${ticker}","${name}","Industrials","Equity","1,000.00","${weight}","1,000.00","10.00","100.00","${location}","${exchange}","USD","1.00","USD","-"`;

const INVESCO_HEADER = 'Fund Ticker,Security Identifier,Holding Ticker,Shares/Par Value,MarketValue,Weight,Name,Class of Shares,Sector,Date';
const invesco = (fund: string, date: string, rows: [string, string, string, string][]) =>
  [
    INVESCO_HEADER,
    ...rows.map(([cusip, ticker, weight, name]) => `${fund},${cusip},${ticker} ,"100","1,000.00",${weight},${name},Common Stock,Energy,${date}`),
  ].join('\n');

const folder = (files: Record<string, string>): HoldingsLibrary => libraryOf('truth', files);

describe('security identity', () => {
  // An emerging-markets iShares file: HAL (India), BDO (Philippines), PKO (Poland) share tickers with US companies.
  const EM = ishares('Jan 17, 2025', [
    iRow('HAL', 'HINDUSTAN AERONAUTICS LTD', '0.40', 'India', 'National Stock Exchange Of India'),
    iRow('BDO', 'BDO UNIBANK INC', '0.10', 'Philippines', 'Philippine Stock Exchange Inc.'),
    iRow('PKO', 'PKO BANK POLSKI SA', '0.20', 'Poland', 'Warsaw Stock Exchange/Equities/Main Market'),
    iRow('2330', 'TAIWAN SEMICONDUCTOR MANUFACTURING', '9.00', 'Taiwan', 'Taiwan Stock Exchange'),
  ]);
  const US = invesco('USF', '01/17/2025', [
    ['406216101', 'HAL', '1.0', 'Halliburton Co'],
    ['055643103', 'BDO', '1.0', 'BDO Example Corp'],
    ['69340Q107', 'PKO', '1.0', 'PKO Example Inc'],
    ['037833100', 'AAPL', '97.0', 'Apple Inc'],
  ]);

  it('a ticker shared by companies on different markets is not a holding in common (before: 3 in common)', async () => {
    const lib = folder({ 'EEM_2025-01-17.csv': EM, 'USF_2025-01-17.csv': US });
    const r = CompareHoldingsResult.parse(await executeTool(lib, 'compare_holdings', { fundA: 'EEM', fundB: 'USF' }));
    expect(r.commonCount).toBe(0);
    expect(r.standardOverlap).toBe(0);
    expect(r.strongestSharedIdentifier).toBe('ticker');
    expect(r.notMatched.map((p) => p.a.ticker)).toEqual(['HAL', 'BDO', 'PKO']);
    expect(r.notMatched[0]!.why).toMatch(
      /same ticker HAL on different markets \(India, National Stock Exchange Of India in A, US\/Canada \(from its CUSIP\) in B\)/,
    );
  });

  it('an identifier that changed falls back in the stated order and is listed (before: LRCX and DKNG reported missing)', async () => {
    const old = invesco('QQX', '07/02/2020', [
      ['512807108', 'LRCX', '2.0', 'Lam Research Corp'],
      ['26142R104', 'DKNG UW', '1.0', 'DraftKings Inc'],
      ['30303M102', 'FB', '4.0', 'Facebook Inc'],
      ['11111A101', 'OLDX', '3.0', 'Renamed Holdings Inc'],
    ]);
    const now = invesco('QQX', '09/26/2025', [
      ['512807306', 'LRCX', '1.0', 'Lam Research Corp'],
      ['26142V105', 'DKNG', '0.5', 'DraftKings Inc'],
      ['30303M102', 'META', '3.0', 'Meta Platforms Inc'],
      ['22222B202', 'NEWX', '2.5', 'Renamed Holdings Inc'],
    ]);
    const lib = folder({ 'QQX_2020.csv': old, 'QQX_2025.csv': now });
    const r = CompareHoldingsResult.parse(
      await executeTool(lib, 'compare_holdings', { fundA: 'QQX', fundB: 'QQX', asOfA: '2020-07-02', asOfB: '2025-09-26' }),
    );
    expect(r.commonCount).toBe(4);
    expect(r.onlyInA).toEqual([]);
    expect(r.matchedBy).toEqual({ cusip: 1, isin: 0, sedol: 0, ticker: 2, name: 1 });
    expect(r.fallbackMatches.map((m) => [m.a.ticker, m.method])).toEqual([
      ['LRCX', 'ticker'],
      ['DKNG UW', 'ticker'],
      ['OLDX', 'name'],
    ]);
    expect(r.fallbackMatches[0]!.why).toContain('CUSIP differs (512807108 in A, 512807306 in B)');
    // standard overlap: min weights 1.0 + 0.5 + 3.0 + 2.5
    expect(r.standardOverlap).toBeCloseTo(7, 9);
    expect(r.weightOfAHeldInB).toBeCloseTo(10, 9);
  });
});

describe('dates inside files', () => {
  it('reads the forms issuers use', () => {
    for (const text of ['Nov 18, 2025', '11/18/2025', '18-Nov-2025', 'As of 18-Nov-2025', '2025-11-18'])
      expect(parseStatedDate(text)).toBe('2025-11-18');
    expect(parseStatedDate('sometime in autumn')).toBeNull();
  });

  it('a date line that cannot be read is reported, never undated or dated from the file name (before: undated)', async () => {
    const parsed = parseHoldingsCsvText(
      ishares('next business day', [iRow('AAA', 'A CO', '100', 'United States', 'NASDAQ')]),
      '/d/XYZ_2025-11-18.csv',
    );
    expect([parsed.asOf, parsed.asOfHow, parsed.asOfText]).toEqual([null, 'unreadable', 'next business day']);
    expect(parsed.asOfSource).toMatch(/cannot be read as a date/);
    const undated = parseHoldingsCsvText(ishares(null, [iRow('AAA', 'A CO', '100', 'United States', 'NASDAQ')]), '/d/XYZ_2025-11-18.csv');
    expect([undated.asOf, undated.asOfHow]).toEqual([null, 'absent']);
    const dayFirst = parseHoldingsCsvText(ishares('18-Nov-2025', [iRow('AAA', 'A CO', '100', 'United States', 'NASDAQ')]), '/d/XYZ.csv');
    expect([dayFirst.asOf, dayFirst.asOfHow]).toEqual(['2025-11-18', 'preamble']);
  });
});

describe('values that cannot be read', () => {
  const text = ishares('Nov 18, 2025', [
    iRow('AAA', 'A CO', '60.00', 'United States', 'NASDAQ'),
    iRow('BBB', 'B CO', 'N/A', 'United States', 'NASDAQ'),
    iRow('CCC', 'C CO', '-', 'United States', 'NASDAQ'),
    iRow('DDD', 'D CO', '', 'United States', 'NASDAQ'),
    iRow('EEE', 'E CO', 'see note', 'United States', 'NASDAQ'),
    iRow('FFF', 'F CO', '30.00', 'United States', 'NASDAQ'),
  ]);

  it('are kept and marked, never 0; sums say how much is unreadable (before: weight 0, sums silent)', async () => {
    const lib = folder({ 'UNR_2025-11-18.csv': text });
    const r = GetHoldingsResult.parse(await executeTool(lib, 'get_holdings', { fund: 'UNR' }));
    expect(r.securityCount).toBe(6);
    expect(r.weightSum).toBe(90);
    expect(r.unreadableWeightLines.map((l) => [l.ticker, l.weight, l.unreadable?.[0]?.text])).toEqual([
      ['BBB', null, 'N/A'],
      ['CCC', null, '-'],
      ['DDD', null, ''],
      ['EEE', null, 'see note'],
    ]);
    expect(r.top.map((l) => l.ticker)).toEqual(['AAA', 'FFF']);
  });

  it('comparison figures count the pairs they leave out', async () => {
    const other = ishares('Nov 18, 2025', [
      iRow('AAA', 'A CO', '50.00', 'United States', 'NASDAQ'),
      iRow('BBB', 'B CO', '50.00', 'United States', 'NASDAQ'),
    ]);
    const lib = folder({ 'UNR_2025-11-18.csv': text, 'OTH_2025-11-18.csv': other });
    const r = CompareHoldingsResult.parse(await executeTool(lib, 'compare_holdings', { fundA: 'UNR', fundB: 'OTH' }));
    expect([r.commonCount, r.commonWithUnreadableWeight, r.standardOverlap]).toEqual([2, 1, 50]);
  });
});

describe('unknown layouts and provenance', () => {
  it('says which column is missing, in plain words (before: "not a holdings file of a known issuer layout")', async () => {
    const noWeight = ['Ticker,Name,Sector,Asset Class,Market Value', '"AAA","A CO","Tech","Equity","1.00"'].join('\n');
    expect(() => parseHoldingsCsvText(noWeight, '/d/ZZZ.csv')).toThrow(ToolFailure);
    expect(() => parseHoldingsCsvText(noWeight, '/d/ZZZ.csv')).toThrow(
      /row 1 looks like the header of an iShares csv file but lacks a weight column/,
    );
    const lib = folder({ 'ZZZ_2025-01-01.csv': noWeight });
    const listed = ListFundsResult.parse(await executeTool(lib, 'list_funds', {}));
    expect(listed.otherFileNotes).toEqual([
      { file: 'ZZZ_2025-01-01.csv', kind: 'not-holdings', reason: expect.stringMatching(/lacks a weight column/) },
    ]);
    await expect(executeTool(lib, 'get_holdings', { fund: 'ZZZ' })).rejects.toMatchObject({
      message: expect.stringMatching(/lacks a weight column/),
    });
  });

  it('every result names the file read, its sha256, layout and how its date was established', async () => {
    const text = ishares('Nov 18, 2025', [iRow('AAA', 'A CO', '100', 'United States', 'NASDAQ')]);
    const lib = folder({ 'PRV_x.csv': text });
    const r = GetHoldingsResult.parse(await executeTool(lib, 'get_holdings', { fund: 'PRV' }));
    expect(r.provenance).toEqual({
      file: 'PRV_x.csv',
      sha256: createHash('sha256').update(text).digest('hex'),
      layout: 'ishares-csv',
      asOf: '2025-11-18',
      asOfHow: 'preamble',
      asOfText: 'Nov 18, 2025',
    });
    expect(r.selection).toEqual({ rule: 'newest', detail: 'the only file of the fund' });
  });
});
