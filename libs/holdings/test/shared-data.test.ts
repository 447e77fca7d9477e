/**
 * The real issuer files in <repo root>/../shared/data/etf-holdings (read in place, never copied).
 * Expected figures come from that folder's SOURCES.md (Rows / Wsum columns) and from the brief's
 * checked SPY-vs-QQQ figures. When the folder is absent the suite fails saying so
 * (`test/support/shared-data.ts`; `RUNPLANE_TESTS_WITHOUT_SHARED=1` skips it).
 */
import { describe, it, expect, beforeAll } from '@jest/globals';
import { join } from 'node:path';
import { CompareHoldingsResult, FundMetadataResult, GetHoldingsResult, ListFundsResult } from '@runplane/contracts';
import { compareFiles, executeTool, HoldingsLibrary, parseHoldingsFile, type ParsedHoldingsFile } from '../src/index.js';
import { describeWithSharedData } from '../../../test/support/shared-data.js';

/** file -> [fund, format, asOf, rows, securities, non-security kinds in file order, weight sum at 2 dp]. */
const EXPECTED: Record<string, [string, string, string, number, number, string[], string]> = {
  'SPY_2025-09-05.xlsx': ['SPY', 'ssga-xlsx', '2025-09-05', 504, 503, ['cash'], '99.91'],
  'SPY_2025-09-30.xlsx': ['SPY', 'ssga-xlsx', '2025-09-30', 504, 503, ['cash'], '100.25'],
  'SPY_2025-11-18.xlsx': ['SPY', 'ssga-xlsx', '2025-11-18', 504, 503, ['cash'], '99.95'],
  'DIA_2024-02-14.xlsx': ['DIA', 'ssga-xlsx', '2024-02-14', 31, 30, ['cash'], '99.87'],
  'IVV_2024-12-06.csv': ['IVV', 'ishares-csv', '2024-12-06', 508, 503, ['cash', 'money-market', 'collateral', 'cash', 'futures'], '99.98'],
  'IVV_2025-11-18.csv': ['IVV', 'ishares-csv', '2025-11-18', 508, 503, ['money-market', 'cash', 'collateral', 'collateral', 'futures'], '99.92'],
  'QQQ_2020-07-02.csv': ['QQQ', 'invesco-csv', '2020-07-02', 103, 103, [], '100.00'],
  'QQQ_2024-12-26.csv': ['QQQ', 'invesco-csv', '2024-12-26', 101, 101, [], '100.00'],
  'QQQ_2025-09-26.csv': ['QQQ', 'invesco-csv', '2025-09-26', 101, 101, [], '100.00'],
  'ARKK_2021-10-28.csv': ['ARKK', 'ark-csv', '2021-10-28', 45, 44, ['money-market'], '100.01'],
  'ARKK_2024-03-28.csv': ['ARKK', 'ark-csv', '2024-03-28', 38, 37, ['money-market'], '99.99'],
  'ARKK_2024-06-04.csv': ['ARKK', 'ark-csv', '2024-06-04', 36, 35, ['money-market'], '100.02'],
};

describeWithSharedData('shared issuer files', (dir) => {
  let library: HoldingsLibrary;
  let files: Map<string, ParsedHoldingsFile>;

  beforeAll(async () => {
    library = new HoldingsLibrary({ dir, dataSet: 'shared' });
    files = new Map((await library.holdingsFiles()).map((f) => [f.file, f])); // each file parsed once
  });

  it('recognises exactly the issuer files of SOURCES.md as holdings files', () => {
    expect([...files.keys()].sort()).toEqual(Object.keys(EXPECTED).sort());
  });

  it.each(Object.entries(EXPECTED))('%s: fund, format, as-of, rows, securities, non-security lines, weight sum', (name, expected) => {
    const [fund, format, asOf, rows, securities, kinds, wsum] = expected;
    const file = files.get(name)!;
    expect(file.fund).toBe(fund);
    expect(file.issuerFormat).toBe(format);
    expect(file.asOf).toBe(asOf);
    expect(file.lines).toHaveLength(rows);
    expect(file.lines.filter((l) => l.kind === 'security')).toHaveLength(securities);
    expect(file.lines.filter((l) => l.kind !== 'security').map((l) => l.kind)).toEqual(kinds);
    expect(file.lines.filter((l) => l.weight === null)).toEqual([]);
    expect(file.lines.reduce((sum, l) => sum + (l.weight ?? 0), 0).toFixed(2)).toBe(wsum);
  });

  it('reads the fund from inside the file except for iShares (file-name prefix)', () => {
    for (const file of files.values()) {
      expect(file.fundSource).toBe(file.issuerFormat === 'ishares-csv' ? 'file-name' : 'inside-file');
    }
  });

  it('parseHoldingsFile reads an SSGA workbook directly (DIA: price-weighted, equal share counts)', async () => {
    const dia = await parseHoldingsFile(join(dir, 'DIA_2024-02-14.xlsx'));
    expect(dia.fundName).toBe('SPDR® Dow Jones® Industrial Average ETF Trust');
    expect([dia.asOf, dia.asOfHow, dia.asOfText]).toEqual(['2024-02-14', 'preamble', 'As of 14-Feb-2024']);
    const stocks = dia.lines.filter((l) => l.kind === 'security');
    expect(new Set(stocks.map((l) => l.shares))).toEqual(new Set([5619462]));
    expect(stocks.every((l) => l.sector === null && /^[0-9A-Z]{9}$/.test(l.cusip ?? ''))).toBe(true);
  });

  it('lists funds and puts scrapes, fact sheets and the overview table into otherFiles', async () => {
    const result = ListFundsResult.parse(await executeTool(library, 'list_funds', {}));
    expect(result.dataSet).toBe('shared');
    expect(result.funds.map((f) => f.fund)).toEqual(['ARKK', 'DIA', 'IVV', 'QQQ', 'SPY']);
    expect(result.funds.find((f) => f.fund === 'QQQ')!.files.map((f) => f.asOf)).toEqual(['2020-07-02', '2024-12-26', '2025-09-26']);
    expect(result.otherFiles).toEqual(
      expect.arrayContaining([
        'ETF-overviews_stockanalysis_committed-2021-10-28.csv',
        'VOO_factsheet_2025-06-30.md',
        'VOO_stockanalysis-top-holdings_2021-07-09_to_2022-07-05.csv',
        'XLK_stockanalysis-holdings_2021-08-31_to_2021-09-01.csv',
      ]),
    );
    expect(result.otherFiles.some((name) => name.startsWith('SPY_'))).toBe(false);
  });

  describe('checked figures: SPY_2025-09-30.xlsx vs QQQ_2025-09-26.csv', () => {
    let result: CompareHoldingsResult;
    beforeAll(async () => {
      result = CompareHoldingsResult.parse(await executeTool(library, 'compare_holdings', { fundA: 'SPY', fundB: 'QQQ' }));
    });

    it('without dates picks the pair with the closest as-of dates', () => {
      expect(result.a.file).toBe('SPY_2025-09-30.xlsx');
      expect(result.b.file).toBe('QQQ_2025-09-26.csv');
      expect(result.daysBetween).toBe(4);
    });

    it('SPY: 503 securities plus one cash line, as of 2025-09-30', () => {
      expect(result.a.asOf).toBe('2025-09-30');
      expect(result.a.securityCount).toBe(503);
      expect(result.a.nonSecurityLines).toMatchObject([{ ticker: null, name: 'US DOLLAR', cusip: '999USDZ92', weight: 0.260806, kind: 'cash' }]);
      expect(result.a.weightSum.toFixed(2)).toBe('100.25');
    });

    it('QQQ: 101 securities, as of 2025-09-26', () => {
      expect(result.b.asOf).toBe('2025-09-26');
      expect(result.b.securityCount).toBe(101);
      expect(result.b.nonSecurityLines).toEqual([]);
    });

    it('88 in common (all by CUSIP); 95.2 % of QQQ held in SPY; 51.4 % of SPY held in QQQ; 13 QQQ names SPY lacks', () => {
      expect(result.commonCount).toBe(88);
      expect(result.matchedBy).toEqual({ cusip: 88, isin: 0, sedol: 0, ticker: 0, name: 0 });
      expect(result.strongestSharedIdentifier).toBe('cusip');
      expect(result.fallbackMatches).toEqual([]);
      expect(result.weightOfBHeldInA.toFixed(1)).toBe('95.2');
      expect(result.weightOfAHeldInB.toFixed(1)).toBe('51.4');
      expect(result.onlyInB).toHaveLength(13);
      expect(result.onlyInA).toHaveLength(503 - 88);
      expect(result.onlyInB.map((l) => l.ticker)).toEqual([
        'SHOP',
        'MELI',
        'PDD',
        'MSTR',
        'ASML',
        'MRVL',
        'TRI',
        'ZS',
        'AZN',
        'CCEP',
        'TEAM',
        'GFS',
        'ARM',
      ]);
    });

    it('gives the same figures with explicit dates, in either order, and when matching by ticker only', async () => {
      const dated = CompareHoldingsResult.parse(
        await executeTool(library, 'compare_holdings', { fundA: 'QQQ', fundB: 'spy', asOfA: '2025-09-26', asOfB: '2025-09-30' }),
      );
      expect([dated.commonCount, dated.weightOfAHeldInB.toFixed(1), dated.weightOfBHeldInA.toFixed(1)]).toEqual([88, '95.2', '51.4']);
      const newest = { rule: 'newest', detail: 'test' } as const;
      const byTicker = compareFiles({ ...files.get('SPY_2025-09-30.xlsx')!, hasCusips: false }, files.get('QQQ_2025-09-26.csv')!, newest, newest);
      expect(byTicker.matchedBy).toEqual({ cusip: 0, isin: 0, sedol: 0, ticker: 88, name: 0 });
      expect(byTicker.weightOfBHeldInA).toBeCloseTo(result.weightOfBHeldInA, 9);
    });
  });

  it('with one date given, pairs it with the closest file of the other fund', async () => {
    const result = CompareHoldingsResult.parse(await executeTool(library, 'compare_holdings', { fundA: 'SPY', fundB: 'QQQ', asOfA: '2025-09-05' }));
    expect([result.a.file, result.b.file, result.daysBetween]).toEqual(['SPY_2025-09-05.xlsx', 'QQQ_2025-09-26.csv', 21]);
    const arkk = CompareHoldingsResult.parse(await executeTool(library, 'compare_holdings', { fundA: 'ARKK', fundB: 'QQQ', asOfB: '2020-07-02' }));
    expect([arkk.a.file, arkk.daysBetween]).toEqual(['ARKK_2021-10-28.csv', 483]);
  });

  it('matches SSGA BRK.B to iShares BRKB by normalised ticker (iShares has no CUSIP)', async () => {
    const result = CompareHoldingsResult.parse(await executeTool(library, 'compare_holdings', { fundA: 'SPY', fundB: 'IVV' }));
    expect([result.a.file, result.b.file, result.daysBetween]).toEqual(['SPY_2025-11-18.xlsx', 'IVV_2025-11-18.csv', 0]);
    expect(result.commonCount).toBe(503);
    expect(result.matchedBy).toEqual({ cusip: 0, isin: 0, sedol: 0, ticker: 503, name: 0 });
    expect(result.strongestSharedIdentifier).toBe('ticker');
    expect(result.onlyInA).toEqual([]);
    expect(result.onlyInB).toEqual([]);
  });

  it('keeps IVV\'s "CASH COLLATERAL USD JPM" line apart from JPMorgan (same ticker)', async () => {
    const ivv = GetHoldingsResult.parse(await executeTool(library, 'get_holdings', { fund: 'IVV' }));
    expect(ivv.asOf).toBe('2025-11-18');
    expect(ivv.nonSecurityLines.find((l) => l.ticker === 'JPM')).toMatchObject({ name: 'CASH COLLATERAL USD JPM', kind: 'collateral' });
    expect(ivv.top.find((l) => l.ticker === 'JPM')).toMatchObject({ name: 'JPMORGAN CHASE & CO' });
  });

  it('CUSIP matching follows FB -> META, and a changed CUSIP (LRCX split) falls back to the ticker on the same market, listed', () => {
    const newest = { rule: 'newest', detail: 'test' } as const;
    const result = compareFiles(files.get('QQQ_2020-07-02.csv')!, files.get('QQQ_2025-09-26.csv')!, newest, newest);
    expect(result.onlyInA.map((l) => l.ticker)).not.toContain('FB');
    expect(result.onlyInA.map((l) => l.ticker)).not.toContain('LRCX');
    expect(result.onlyInB.map((l) => l.ticker)).not.toContain('LRCX');
    expect(result.commonCount).toBe(68);
    expect(result.matchedBy).toMatchObject({ cusip: 67, ticker: 1 });
    expect(result.fallbackMatches).toEqual([
      expect.objectContaining({ method: 'ticker', why: expect.stringContaining('CUSIP differs (512807108 in A, 512807306 in B)') }),
    ]);
  });

  it('fund_metadata reads preambles, the overview table and fact sheets', async () => {
    const spy = FundMetadataResult.parse(await executeTool(library, 'fund_metadata', { fund: 'SPY' }));
    expect(spy.facts).toContainEqual({ field: 'Fund Name', value: 'SPDR® S&P 500® ETF Trust', source: 'SPY_2025-11-18.xlsx', asOf: '2025-11-18' });
    expect(spy.sources.map((s) => [s.file, s.layout, s.asOfHow])).toContainEqual([
      'ETF-overviews_stockanalysis_committed-2021-10-28.csv',
      'overview-csv',
      'absent',
    ]);
    expect(spy.facts).toContainEqual({
      field: 'Assets ($M)',
      value: '411570.0',
      source: 'ETF-overviews_stockanalysis_committed-2021-10-28.csv',
      asOf: null,
    });
    expect(spy.facts).toContainEqual({
      field: 'Expense ratio (%)',
      value: '0.09',
      source: 'ETF-overviews_stockanalysis_committed-2021-10-28.csv',
      asOf: null,
    });

    const ivv = FundMetadataResult.parse(await executeTool(library, 'fund_metadata', { fund: 'ivv' }));
    expect(ivv.facts).toContainEqual({ field: 'Inception Date', value: 'May 15, 2000', source: 'IVV_2025-11-18.csv', asOf: '2025-11-18' });
    expect(ivv.facts).toContainEqual({ field: 'Shares Outstanding', value: '957,950,000.00', source: 'IVV_2024-12-06.csv', asOf: '2024-12-06' });
    expect(ivv.facts).toContainEqual({ field: 'Shares Outstanding', value: '1,061,000,000.00', source: 'IVV_2025-11-18.csv', asOf: '2025-11-18' });

    const voo = FundMetadataResult.parse(await executeTool(library, 'fund_metadata', { fund: 'VOO' }));
    const sheet = voo.facts.filter((f) => f.source === 'VOO_factsheet_2025-06-30.md');
    expect(sheet).toEqual(
      expect.arrayContaining([
        { field: 'Benchmark', value: 'S&P 500 Index', source: 'VOO_factsheet_2025-06-30.md', asOf: '2025-06-30' },
        { field: 'Expense ratio', value: '0.03%', source: 'VOO_factsheet_2025-06-30.md', asOf: '2025-06-30' },
        { field: 'Inception date', value: '2010-09-07', source: 'VOO_factsheet_2025-06-30.md', asOf: '2025-06-30' },
      ]),
    );
  });

  it('rejects funds without holdings files, naming the covered funds', async () => {
    await expect(executeTool(library, 'get_holdings', { fund: 'XYZ' })).rejects.toMatchObject({
      code: 'unknown_fund',
      message: 'Fund XYZ is not covered by the data folder: it has holdings files for ARKK, DIA, IVV, QQQ, SPY.',
    });
    await expect(executeTool(library, 'get_holdings', { fund: 'VOO' })).rejects.toMatchObject({ code: 'unknown_fund' });
    await expect(executeTool(library, 'get_holdings', { fund: 'SPY', asOf: '2025-10-01' })).rejects.toMatchObject({ code: 'no_file_for_date' });
  });
});
