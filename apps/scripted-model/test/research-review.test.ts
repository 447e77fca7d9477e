/**
 * The defects a fresh-user review found in the research answers, each with the reviewer's example on
 * small files written here (never copies of ../shared data), with the clock fixed:
 * A. a bare year after "compared with"; B. quarters, relative dates and unreadable date phrases;
 * C. a requested date a fund's undated files cannot meet; D. requested dates (`today` included)
 * met only by far-away files; E. reasons said once; and exact unreadable-weight sentences.
 */
import { describe, expect, it, afterAll } from '@jest/globals';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HoldingsLibrary } from '@runplane/holdings';
import { APPROXIMATE_AFTER_DAYS, extractUnanswered } from '../src/index.js';
import { research as drive } from './drive.js';
import { isharesFile } from '../../../libs/holdings/test/folder.js';

/** Folders this file made in the temporary directory: removed when it ends. */
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

/** The machine date of the review, fixed. */
const NOW = new Date(Date.UTC(2026, 10, 30, 9));

const HEADER = 'Fund Ticker,Security Identifier,Holding Ticker,Shares/Par Value,MarketValue,Weight,Name,Class of Shares,Sector,Date';
function invesco(fund: string, date: string, rows: readonly (readonly [string, string, string, string])[]): string {
  return [HEADER, ...rows.map(([cusip, t, w, n]) => `${fund},${cusip},${t} ,"100","1,000.00",${w},${n},Common Stock,Tech,${date}`)].join('\n');
}
const ROWS = [
  ['037833100', 'AAPL', '40.0', 'Apple Inc'],
  ['594918104', 'MSFT', '30.0', 'Microsoft Corp'],
  ['67066G104', 'NVDA', '20.0', 'NVIDIA Corp'],
  ['023135106', 'AMZN', '10.0', 'Amazon.com Inc'],
] as const;
const ishares = (dateLine: string): string =>
  isharesFile(dateLine, [
    ['AAPL', 'APPLE INC', '60.00'],
    ['MSFT', 'MICROSOFT CORP', '40.00'],
  ]);

function folder(files: Record<string, string>): HoldingsLibrary {
  const dir = mkdtempSync(join(tmpdir(), 'policy-review-'));
  made.push(dir);
  for (const [name, text] of Object.entries(files)) writeFileSync(join(dir, name), text);
  return new HoldingsLibrary({ dir, dataSet: 'shared' });
}

async function research(lib: HoldingsLibrary, question: string, now = NOW) {
  const { turns, answer } = await drive(lib, question, { now });
  return { calls: turns, answer, unanswered: extractUnanswered(answer) ?? [] };
}

/** Sentences of the prose (the closing unanswered passage left out) said more than once. */
function repeatedSentences(answer: string): string[] {
  const prose = answer.slice(0, answer.search(/(Every part of the question was answered|Not answered)/));
  const sentences = prose.split(/(?<=[.!?])\s+/).filter((x) => x.length > 30);
  return sentences.filter((x, i) => sentences.indexOf(x) !== i);
}

const AAA = {
  'AAA_2024-03-28.csv': invesco('AAA', '03/28/2024', ROWS),
  'AAA_2025-09-26.csv': invesco('AAA', '09/26/2025', ROWS.slice(0, 3)),
  'BBB_2024-03-29.csv': invesco('BBB', '03/29/2024', ROWS.slice(1)),
  'BBB_2025-09-30.csv': invesco('BBB', '09/30/2025', ROWS.slice(1)),
};

describe('research policy after the fresh-user review of the research answers', () => {
  it('A: a bare year after "compared with" is a date; the day asked with no file says how far the nearest is', async () => {
    const lib = folder({
      'KKK_2021-10-28.csv': invesco('KKK', '10/28/2021', ROWS),
      'KKK_2024-03-28.csv': invesco('KKK', '03/28/2024', ROWS.slice(1)),
      'KKK_2024-06-04.csv': invesco('KKK', '06/04/2024', ROWS.slice(2)),
    });
    const { calls, answer, unanswered } = await research(
      lib,
      "What were KKK's top 5 holdings on 6 December 2024, and what does KKK hold now compared with 2021?",
    );
    // Before: both calls used 2024-06-04 and the answer said "both dates lead to the same file".
    expect(calls[1]).toEqual([
      { name: 'get_holdings', arguments: { fund: 'KKK', asOf: '2021-10-28', top: 5 } },
      { name: 'get_holdings', arguments: { fund: 'KKK', asOf: '2024-06-04', top: 5 } },
      { name: 'compare_holdings', arguments: { fundA: 'KKK', fundB: 'KKK', asOfA: '2021-10-28', asOfB: '2024-06-04' } },
    ]);
    expect(answer).not.toContain('same file');
    expect(answer).toContain('KKK has no file dated 2024-12-06 ("on 6 December 2024"); the nearest is KKK_2024-06-04.csv, 185 days before it');
    expect(answer).toContain('the newest file dated within 2021, as asked ("compared with 2021")');
    expect(answer).toContain(
      'the nearest is KKK_2024-06-04.csv, 185 days before it; it is also the nearest to 2026-11-30 ("now", read as the current date, 2026-11-30), 909 days before it',
    );
    expect(answer).toContain('KKK 2024-06-04 lacks 2 KKK 2021-10-28 names');
    // D: both far-away dates are answered only approximately, with the distance.
    expect(unanswered).toEqual([
      {
        part: 'KKK as of 2024-12-06 ("on 6 December 2024")',
        reason: 'answered only approximately, from KKK_2024-06-04.csv, 185 days away (more than 31)',
      },
      { part: 'KKK as of 2026-11-30 ("now")', reason: 'answered only approximately, from KKK_2024-06-04.csv, 909 days away (more than 31)' },
    ]);
    expect(answer).not.toContain('Every part of the question was answered');
    expect(repeatedSentences(answer)).toEqual([]);
  });

  it('B: a quarter is read as its last day and said so; "Q1" is not a fund', async () => {
    const { calls, answer, unanswered } = await research(folder(AAA), 'Compare AAA and BBB in Q1 2024');
    expect(calls[1]).toContainEqual({
      name: 'compare_holdings',
      arguments: { fundA: 'AAA', fundB: 'BBB', asOfA: '2024-03-28', asOfB: '2024-03-29' },
    });
    expect(answer).toContain('("Q1 2024", read as the end of that quarter, 2024-03-31)');
    expect(answer).not.toMatch(/\bQ\b/);
    expect(unanswered).toEqual([]);
    expect(answer).toContain('Every part of the question was answered.');
  });

  it('B: "as of last year" is read against the clock passed in, and says which year it took', async () => {
    const { calls, answer } = await research(folder(AAA), 'What did AAA hold as of last year?');
    expect(calls[1]).toEqual([{ name: 'get_holdings', arguments: { fund: 'AAA', asOf: '2025-09-26' } }]);
    expect(answer).toContain('("last year", read as the year 2025, relative to the current date (2026-11-30))');
  });

  it.each([
    ['2025-09-31', 'there is no such day'],
    ['Q5 2024', 'not a quarter with a year that can be read (Q1-Q4 and a year)'],
  ])('B: a date phrase that cannot be read (%s) is said in the answer and the unanswered list, never ignored', async (written, reason) => {
    const { answer, unanswered } = await research(folder(AAA), `Compare AAA and BBB on ${written}`);
    // Before: questionDates returned [], the closest-dates pair was used without a word, {"unanswered":[]}.
    expect(answer).toContain(`A date in the question could not be used: "${written}" (${reason}); the files were chosen as if it were not written.`);
    expect(unanswered).toEqual([{ part: `the date "${written}"`, reason }]);
    expect(answer).not.toContain('holdings of Q');
  });

  it('C: a requested date that only undated files could meet is passed on and reported; no file is picked by its name', async () => {
    const lib = folder({
      'BDX_2024-01-01.csv': ishares('the 45th of Smarch'),
      'BDX_2025-11-18.csv': ishares('13/45/2025'),
      'USX_2025-11-18.csv': invesco('USX', '11/18/2025', ROWS),
    });
    const { calls, answer, unanswered } = await research(lib, 'Compare BDX and USX as of January 1, 2024');
    expect(calls[1]).toContainEqual({ name: 'get_holdings', arguments: { fund: 'BDX', asOf: '2024-01-01' } });
    expect(calls[1]).toContainEqual({
      name: 'compare_holdings',
      arguments: { fundA: 'BDX', fundB: 'USX', asOfA: '2024-01-01', asOfB: '2025-11-18' },
    });
    // Before: BDX_2025-11-18.csv "chosen as its only files state no readable date", {"unanswered":[]}.
    expect(answer).not.toContain('chosen as its only files');
    expect(answer.match(/Fund BDX has no holdings file as of 2024-01-01/g)).toHaveLength(1);
    expect(answer).toContain('The comparison of BDX and USX failed for the same reason.');
    expect(answer).toContain('BDX_2024-01-01.csv, BDX_2025-11-18.csv state no readable date');
    expect(unanswered).toContainEqual({ part: 'holdings of BDX as of 2024-01-01', reason: 'no file of BDX dated 2024-01-01' });
    expect(unanswered).toContainEqual({ part: 'comparison of BDX and USX', reason: 'no file of BDX dated 2024-01-01' });
    expect(answer).not.toContain('Every part of the question was answered');
    expect(repeatedSentences(answer)).toEqual([]);
  });

  it('C: without a date, the tool refuses to choose between undated files rather than let their names decide', async () => {
    const lib = folder({ 'BDX_2024-01-01.csv': ishares('the 45th of Smarch'), 'BDX_2025-11-18.csv': ishares('13/45/2025') });
    const { calls, answer, unanswered } = await research(lib, 'What does BDX hold?');
    expect(calls[1]).toEqual([{ name: 'get_holdings', arguments: { fund: 'BDX' } }]);
    expect(answer).toContain('Fund BDX has 2 holdings files and none states a readable date');
    expect(answer).toContain('the dates in file names are not used');
    expect(unanswered).toEqual([{ part: 'holdings of BDX', reason: 'none of its files states a readable date, so none can be chosen' }]);
  });

  it(`D: "today" is the clock's date; a file more than ${APPROXIMATE_AFTER_DAYS} days away is listed as approximate, a near one is not`, async () => {
    const lib = folder(AAA);
    const far = await research(lib, 'What does AAA hold today?');
    expect(far.calls[1]).toEqual([{ name: 'get_holdings', arguments: { fund: 'AAA', asOf: '2025-09-26' } }]);
    expect(far.answer).toContain('AAA has no file dated 2026-11-30 ("today", read as the current date, 2026-11-30)');
    expect(far.unanswered).toEqual([
      { part: 'AAA as of 2026-11-30 ("today")', reason: 'answered only approximately, from AAA_2025-09-26.csv, 430 days away (more than 31)' },
    ]);
    expect(far.answer).toContain(
      'Answered only approximately: AAA as of 2026-11-30 ("today") (from AAA_2025-09-26.csv, 430 days away (more than 31)).',
    );
    expect(far.answer).toContain('Largest holdings: AAPL 40.00%'); // the figures are kept
    const near = await research(lib, 'What does AAA hold today?', new Date(Date.UTC(2025, 9, 10)));
    expect(near.unanswered).toEqual([]);
    expect(near.answer).toContain('14 days before it');
    expect(near.answer).toContain('Every part of the question was answered.');
  });

  it('D: a year with no file for either fund is approximate for each, with its distance', async () => {
    const { unanswered, answer } = await research(folder(AAA), 'Compare AAA and BBB as of 2018');
    expect(unanswered.map((u) => u.part)).toEqual(['AAA as of 2018', 'BBB as of 2018']);
    expect(unanswered.every((u) => /^answered only approximately, from \w+_2024-03-2\d\.csv, \d+ days away/.test(u.reason))).toBe(true);
    expect(answer).not.toContain('Every part of the question was answered');
  });

  it('E: a fund not covered and a file in an unknown layout are explained once; the unanswered list gives short reasons', async () => {
    const lib = folder({ ...AAA, 'ODD_2025-11-18.csv': 'Ticker,Name,Price\nAAPL,Apple,1.00\n' });
    const { answer, unanswered } = await research(lib, 'Compare EEM, ODD and AAA');
    expect(answer).not.toContain('not covered by the data: Fund');
    expect(answer).not.toContain('ODD_2025-11-18.csv: ODD_2025-11-18.csv');
    expect(answer.match(/Fund EEM is not covered by the data folder/g)).toHaveLength(1);
    expect(unanswered.every((u) => u.reason.length <= 80)).toBe(true);
    expect(unanswered).toContainEqual({ part: 'holdings of EEM', reason: 'not covered by the data' });
    expect(repeatedSentences(answer)).toEqual([]);
  });

  it('unreadable weights among common holdings: the sentence counts each side exactly, and the figures left short say "at least"', async () => {
    const lib = folder({
      'AAA_2025-09-26.csv': invesco('AAA', '09/26/2025', ROWS),
      'DDD_2025-09-26.csv': invesco('DDD', '09/26/2025', [
        ['037833100', 'AAPL', '50.0', 'Apple Inc'],
        ['594918104', 'MSFT', 'N/A', 'Microsoft Corp'],
        ['67066G104', 'NVDA', '-', 'NVIDIA Corp'],
        ['30303M102', 'META', 'N/A', 'Meta Platforms'],
        ['02079K305', 'GOOGL', '20.0', 'Alphabet Inc'],
      ]),
    });
    const { answer } = await research(lib, 'Compare AAA and DDD');
    expect(answer).toContain(
      "The standard overlap (the smaller weight summed over common holdings) is at least 40.0%; at least 50.0% of DDD's weight is held in AAA; 90.0% of AAA's weight is held in DDD.",
    );
    expect(answer).toContain(
      "2 common holdings have a weight that cannot be read in one file or both: 2 in DDD's file (left out of DDD's weight held in AAA); the standard overlap leaves out those 2 pairs",
    );
    expect(answer).toContain("AAA lacks 2 DDD names (at least 20.0% of DDD's weight, a lower bound: 1 of them has a weight that cannot be read)");
    expect(answer).toContain("DDD lacks 1 AAA name (10.0% of AAA's weight)");
  });
});
