/**
 * Between several files of a fund none of which states a readable date there is no newest: the
 * tools refuse to choose rather than let the dates in the file names decide (docs/fund-research.md "Files and layouts").
 */
import { describe, expect, it } from '@jest/globals';
import { executeTool, HoldingsLibrary } from '../src/index.js';
import { isharesFile, libraryOf } from './folder.js';

const ishares = (dateLine: string): string => isharesFile(dateLine, [['AAPL', 'APPLE INC', '100.00']]);

const folder = (files: Record<string, string>): HoldingsLibrary => libraryOf('undated', files);

describe('undated files', () => {
  // The same two files under names whose dates are in either order: the outcome must not change.
  it.each([
    ['BDX_2024-01-01.csv', 'BDX_2025-11-18.csv'],
    ['BDX_2025-11-18.csv', 'BDX_2024-01-01.csv'],
  ])('get_holdings and compare_holdings refuse to pick between %s and %s without a date', async (first, second) => {
    const lib = folder({ [first]: ishares('the 45th of Smarch'), [second]: ishares('13/45/2025'), 'USX_2025-11-18.csv': ishares('Nov 18, 2025') });
    const refusal = {
      code: 'no_readable_date',
      message: expect.stringMatching(
        /^Fund BDX has 2 holdings files and none states a readable date \((?=.*"the 45th of Smarch" is not a readable date)(?=.*"13\/45\/2025" is not a readable date).*the dates in file names are not used\.$/,
      ),
    };
    await expect(executeTool(lib, 'get_holdings', { fund: 'BDX' })).rejects.toMatchObject(refusal);
    await expect(executeTool(lib, 'compare_holdings', { fundA: 'BDX', fundB: 'USX' })).rejects.toMatchObject(refusal);
    await expect(executeTool(lib, 'get_holdings', { fund: 'BDX', asOf: '2024-01-01' })).rejects.toMatchObject({ code: 'no_file_for_date' });
  });

  it('a fund with one undated file still reads it, and says it is the only file', async () => {
    const lib = folder({ 'BDX_2025-11-18.csv': ishares('the 45th of Smarch') });
    const result = (await executeTool(lib, 'get_holdings', { fund: 'BDX' })) as { file: string; asOf: string | null; selection: { detail: string } };
    expect(result).toMatchObject({ file: 'BDX_2025-11-18.csv', asOf: null, selection: { detail: 'the only file of the fund' } });
  });
});
