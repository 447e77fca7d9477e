/** Test fixture: a holdings library over a fresh temporary folder holding the given files. */
import { afterAll } from '@jest/globals';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HoldingsLibrary } from '../src/index.js';

/** Folders made by {@link libraryOf} in the test file that imports this: removed when it ends. */
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** A `shared` holdings library over a new folder `<tmp>/holdings-<label>-XXXXXX` with `files` (name: text) in it (removed when the test file ends). */
export function libraryOf(label: string, files: Record<string, string>): HoldingsLibrary {
  const dir = mkdtempSync(join(tmpdir(), `holdings-${label}-`));
  made.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return new HoldingsLibrary({ dir, dataSet: 'shared' });
}

/** The column line of an iShares holdings file. */
const ISHARES_COLUMNS =
  'Ticker,Name,Sector,Asset Class,Market Value,Weight (%),Notional Value,Quantity,Price,Location,Exchange,Currency,FX Rate,Market Currency,Accrual Date';

/**
 * An iShares holdings file: its title, `Fund Holdings as of` stating `dateLine`, and one equity row
 * per holding `[ticker, name, weight %]` (the other values fixed and unremarkable).
 */
export function isharesFile(dateLine: string, holdings: readonly (readonly [string, string, string])[]): string {
  const row = ([ticker, name, weight]: readonly [string, string, string]) =>
    `"${ticker}","${name}","IT","Equity","1.00","${weight}","1.00","1.00","1.00","United States","NASDAQ","USD","1.00","USD","-"`;
  return ['iShares Example ETF', `Fund Holdings as of,"${dateLine}"`, '\u00a0', ISHARES_COLUMNS, ...holdings.map(row)].join('\n');
}
