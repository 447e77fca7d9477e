/** The shipped illustrative sample (libs/holdings/sample): invented funds AAA (Invesco layout) and BBB (ARK layout). */
import { describe, it, expect, beforeAll } from '@jest/globals';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CompareHoldingsResult, FundMetadataResult, GetHoldingsResult, ListFundsResult } from '@runplane/contracts';
import { executeTool, HoldingsLibrary, resolveDataFolder, SAMPLE_DIR, ToolFailure } from '../src/index.js';

async function failure(promise: Promise<unknown>): Promise<ToolFailure> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ToolFailure) return error;
    throw error;
  }
  throw new Error('expected a ToolFailure');
}

describe('illustrative sample', () => {
  let library: HoldingsLibrary;
  beforeAll(() => {
    const folder = resolveDataFolder({ RUNPLANE_DATA_DIR: SAMPLE_DIR });
    expect(folder.dataSet).toBe('illustrative');
    library = new HoldingsLibrary(folder);
  });

  it('lists both funds, dated from inside the files, and the README as another file', async () => {
    const result = ListFundsResult.parse(await executeTool(library, 'list_funds', {}));
    expect(result).toMatchObject({
      dataSet: 'illustrative',
      funds: [
        { fund: 'AAA', files: [{ fund: 'AAA', file: 'ILLUSTRATIVE-AAA_2025-01-31.csv', issuerFormat: 'invesco-csv', asOf: '2025-01-31' }] },
        { fund: 'BBB', files: [{ fund: 'BBB', file: 'ILLUSTRATIVE-BBB_2025-01-30.csv', issuerFormat: 'ark-csv', asOf: '2025-01-30' }] },
      ],
      otherFiles: ['README.md'],
    });
    expect(result.funds[0]!.files[0]!.provenance).toEqual({
      file: 'ILLUSTRATIVE-AAA_2025-01-31.csv',
      sha256: createHash('sha256')
        .update(readFileSync(join(SAMPLE_DIR, 'ILLUSTRATIVE-AAA_2025-01-31.csv')))
        .digest('hex'),
      layout: 'invesco-csv',
      asOf: '2025-01-31',
      asOfHow: 'row-date-column',
      asOfText: '01/31/2025',
    });
  });

  it('gets holdings with the money-market line classified, not dropped', async () => {
    const bbb = GetHoldingsResult.parse(await executeTool(library, 'get_holdings', { fund: 'bbb' }));
    expect(bbb.securityCount).toBe(6);
    expect(bbb.nonSecurityLines).toEqual([
      { ticker: null, name: 'ILLUSTRATIVE MONEY MARKET FUND', cusip: 'X9USDILLU', weight: 1, kind: 'money-market' },
    ]);
    expect(bbb.unreadableWeightLines).toEqual([]);
    expect(bbb.selection.rule).toBe('newest');
    expect(bbb.weightSum).toBeCloseTo(100, 6);
    expect(bbb.securitiesWeightSum).toBeCloseTo(99, 6);
    expect(bbb.top[0]).toMatchObject({ ticker: 'ICO1', name: 'ILLUSTRATIVE CO 1', cusip: 'ILLUS0001', weight: 30 });

    const aaa = GetHoldingsResult.parse(await executeTool(library, 'get_holdings', { fund: 'AAA', asOf: '2025-01-31' }));
    expect(aaa.securityCount).toBe(8);
    expect(aaa.nonSecurityLines).toEqual([]);
    expect(aaa.top.map((l) => l.ticker)).toEqual(['ICO1', 'ICO2', 'ICO3', 'ICO4.B', 'ICO5', 'ICO6', 'ICO7', 'ICO8']);
  });

  it('compares the two funds by CUSIP', async () => {
    const result = CompareHoldingsResult.parse(await executeTool(library, 'compare_holdings', { fundA: 'AAA', fundB: 'BBB' }));
    expect(result.daysBetween).toBe(1);
    expect(result.commonCount).toBe(3);
    expect(result.matchedBy).toEqual({ cusip: 3, isin: 0, sedol: 0, ticker: 0, name: 0 });
    expect(result.fallbackMatches).toEqual([]);
    expect(result.weightOfAHeldInB).toBeCloseTo(52, 6);
    expect(result.weightOfBHeldInA).toBeCloseTo(65, 6);
    expect(result.onlyInA.map((l) => l.ticker)).toEqual(['ICO2', 'ICO5', 'ICO6', 'ICO7', 'ICO8']);
    expect(result.onlyInB.map((l) => l.ticker)).toEqual(['ICO9', 'ICO10', 'ICO11']);
  });

  it('has no facts for AAA but does not fail', async () => {
    expect(FundMetadataResult.parse(await executeTool(library, 'fund_metadata', { fund: 'AAA' }))).toMatchObject({ fund: 'AAA', facts: [] });
  });

  it('reports typed failures', async () => {
    const unknownFund = await failure(executeTool(library, 'get_holdings', { fund: 'XYZ' }));
    expect(unknownFund.code).toBe('unknown_fund');
    expect(unknownFund.message).toBe('Fund XYZ is not covered by the data folder: it has holdings files for AAA, BBB.');

    const noDate = await failure(executeTool(library, 'compare_holdings', { fundA: 'AAA', fundB: 'BBB', asOfB: '2025-02-28' }));
    expect(noDate.code).toBe('no_file_for_date');
    expect(noDate.message).toContain('2025-01-30');

    const badArgs = await failure(executeTool(library, 'get_holdings', { fund: 'AAA', asOf: '31/01/2025' }));
    expect(badArgs.code).toBe('bad_arguments');
    expect(badArgs.message).toContain('date must be YYYY-MM-DD');

    expect((await failure(executeTool(library, 'get_holdings', {}))).code).toBe('bad_arguments');
    expect((await failure(executeTool(library, 'list_funds', { extra: true }))).code).toBe('bad_arguments');
    expect((await failure(executeTool(library, 'buy_shares', {}))).code).toBe('unknown_tool');
    expect((await failure(executeTool(library, 'fund_metadata', { fund: 'ZZZ' }))).code).toBe('unknown_fund');
  });

  it('treats missing arguments of list_funds as {}', async () => {
    await expect(executeTool(library, 'list_funds', undefined)).resolves.toMatchObject({ dataSet: 'illustrative' });
  });
});
