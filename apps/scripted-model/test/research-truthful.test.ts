/**
 * The answer defects of docs/fund-research.md (a wrong figure, a guessed date or security), end to end through the policy and @runplane/holdings on small files
 * written here: dates as people write them, the file used for each fund and why, more than two
 * funds, "top N", fact-sheet facts, the unanswered list, names next to bare exchange codes, long
 * non-security lists summarised, unreadable values labelled.
 */
import { describe, expect, it, afterAll } from '@jest/globals';
import { mkdtempSync, writeFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { executeTool, HoldingsLibrary } from '@runplane/holdings';
import { extractUnanswered, researchPolicy, type WireMessage } from '../src/index.js';
import { PACK_TOOLS, research as drive } from './drive.js';

/** Folders this file made in the temporary directory: removed when it ends. */
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

const HEADER = 'Fund Ticker,Security Identifier,Holding Ticker,Shares/Par Value,MarketValue,Weight,Name,Class of Shares,Sector,Date';
function invesco(fund: string, date: string, rows: [string, string, string, string][]): string {
  return [HEADER, ...rows.map(([cusip, t, w, n]) => `${fund},${cusip},${t} ,"100","1,000.00",${w},${n},Common Stock,Tech,${date}`)].join('\n');
}
const ROWS: [string, string, string, string][] = [
  ['037833100', 'AAPL', '40.0', 'Apple Inc'],
  ['594918104', 'MSFT', '30.0', 'Microsoft Corp'],
  ['67066G104', 'NVDA', '20.0', 'NVIDIA Corp'],
  ['023135106', 'AMZN', '10.0', 'Amazon.com Inc'],
];
const ISH = [
  'iShares Example EM ETF',
  'Fund Holdings as of,"Jan 17, 2025"',
  '\u00a0',
  'Ticker,Name,Sector,Asset Class,Market Value,Weight (%),Notional Value,Quantity,Price,Location,Exchange,Currency,FX Rate,Market Currency,Accrual Date',
  '"2330","TAIWAN SEMICONDUCTOR MANUFACTURING","IT","Equity","1.00","60.00","1.00","1.00","1.00","Taiwan","Taiwan Stock Exchange","TWD","1.00","TWD","-"',
  '"HAL","HINDUSTAN AERONAUTICS LTD","Industrials","Equity","1.00","N/A","1.00","1.00","1.00","India","National Stock Exchange Of India","INR","1.00","INR","-"',
  ...['USD', 'TWD', 'INR', 'BRL', 'ZAR', 'KRW', 'MXN'].map(
    (c) => `"${c}","${c} CASH","Cash and/or Derivatives","Cash","1.00","0.50","1.00","1.00","1.00","-","-","${c}","1.00","${c}","-"`,
  ),
].join('\n');

function library(): HoldingsLibrary {
  const dir = mkdtempSync(join(tmpdir(), 'policy-truth-'));
  made.push(dir);
  writeFileSync(join(dir, 'AAA_2024-12-06.csv'), invesco('AAA', '12/06/2024', ROWS));
  writeFileSync(join(dir, 'AAA_2025-09-26.csv'), invesco('AAA', '09/26/2025', ROWS.slice(0, 3)));
  writeFileSync(join(dir, 'BBB_2024-12-20.csv'), invesco('BBB', '12/20/2024', ROWS.slice(1)));
  writeFileSync(join(dir, 'CCC_2025-01-02.csv'), invesco('CCC', '01/02/2025', ROWS.slice(2)));
  writeFileSync(join(dir, 'EMX_2025-01-17.csv'), ISH);
  writeFileSync(
    join(dir, 'VVV_factsheet.md'),
    ['## Example Total Fund | VVV', 'As of June 30, 2025', '| Expense ratio | 0.03% |', '| Benchmark | Example Index |'].join('\n'),
  );
  return new HoldingsLibrary({ dir, dataSet: 'shared' });
}

async function research(lib: HoldingsLibrary, question: string) {
  const { turns, answer } = await drive(lib, question);
  return { calls: turns, answer };
}

describe('research policy: answers that say how they chose', () => {
  const lib = library();

  it.each(['Dec 6, 2024', '6 December 2024', '2024-12-06', '12/06/2024'])(
    'a date written "%s" selects the file (before: ignored unless YYYY-MM-DD)',
    async (written) => {
      const { calls, answer } = await research(lib, `Compare AAA and BBB as of ${written}`);
      expect(calls[1]).toContainEqual({
        name: 'compare_holdings',
        arguments: { fundA: 'AAA', fundB: 'BBB', asOfA: '2024-12-06', asOfB: '2024-12-20' },
      });
      expect(answer).toContain('chosen as the file dated 2024-12-06, as asked');
      expect(answer).toContain('BBB has no file dated 2024-12-06');
      expect(answer).toContain('the nearest is BBB_2024-12-20.csv, 14 days after it');
    },
  );

  it('"end of 2024" and "as of 2018" are read too, and a missing year says how far the nearest file is', async () => {
    const end = await research(lib, 'AAA holdings at the end of 2024');
    expect(end.calls[1]).toEqual([{ name: 'get_holdings', arguments: { fund: 'AAA', asOf: '2024-12-06' } }]);
    expect(end.answer).toContain('AAA has no file dated 2024-12-31 ("end of 2024"); the nearest is AAA_2024-12-06.csv, 25 days before it');
    const old = await research(lib, 'AAA holdings as of 2018');
    expect(old.answer).toMatch(
      /AAA has no file dated within 2018-01-01 to 2018-12-31 \("as of 2018"\); the nearest is AAA_2024-12-06\.csv, \d+ days after the end of that period/,
    );
  });

  it('answers more than two funds, "top N", and fact-sheet facts; lists what it could not answer', async () => {
    const { calls, answer } = await research(lib, 'Compare AAA, BBB and CCC: top 2 holdings, and the expense ratio of AAA and VVV');
    expect(calls[1]!.filter((c) => c.name === 'compare_holdings')).toHaveLength(3);
    expect(calls[1]!.filter((c) => c.name === 'get_holdings').every((c) => c.arguments.top === 2 || c.arguments.fund === 'VVV')).toBe(true);
    expect(answer).toContain('Top 2 holdings: AAPL 40.00%, MSFT 30.00%');
    expect(answer).toContain('Overlap of AAA and CCC');
    expect(answer).toContain('Overlap of BBB and CCC');
    expect(answer).toContain('Expense ratio of VVV as the files state it: Expense ratio: 0.03% (VVV_factsheet.md, as of 2025-06-30)');
    const unanswered = extractUnanswered(answer);
    expect(unanswered).toEqual(
      expect.arrayContaining([expect.objectContaining({ part: 'expense ratio of AAA' }), expect.objectContaining({ part: 'holdings of VVV' })]),
    );
    expect(answer).not.toMatch(/get_holdings|fund_metadata|compare_holdings call/);
  });

  it('names bare exchange codes, summarises long cash lists, labels unreadable weights; no repeated reasons', async () => {
    const { answer } = await research(lib, 'What does EMX hold?');
    expect(answer).toContain('TAIWAN SEMICONDUCTOR MANUFACTURING (2330) 60.00%');
    expect(answer).toMatch(/7 non-security lines together 3\.50%, the largest/);
    expect(answer).toContain('1 line states a weight that cannot be read (HAL "N/A")');
    expect(extractUnanswered(answer)).toEqual([]);
  });

  it('one fund at two dates: the old and new files compared, the reasons given once each', async () => {
    const { calls, answer } = await research(lib, 'How has AAA changed since 2024?');
    expect(calls[1]).toContainEqual({
      name: 'compare_holdings',
      arguments: { fundA: 'AAA', fundB: 'AAA', asOfA: '2024-12-06', asOfB: '2025-09-26' },
    });
    expect(answer).toContain('AAA 2025-09-26 lacks 1 AAA 2024-12-06 name');
    const sentences = answer.split(/(?<=[.!?])\s+/).filter((x) => x.length > 40);
    expect(new Set(sentences).size).toBe(sentences.length);
  });
});

describe('research policy: the answer never claims more than the Run read (K9)', () => {
  const lib = library();

  it('a comparison question whose transcript holds only one fund read (research cut short, or another script) lists the other fund and the comparison as unanswered', async () => {
    const question = 'Compare AAA and BBB';
    const result = await executeTool(lib, 'get_holdings', { fund: 'AAA' });
    const messages: WireMessage[] = [
      { role: 'user', content: question },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'x1', type: 'function', function: { name: 'get_holdings', arguments: '{"fund":"AAA"}' } }],
      },
      { role: 'tool', tool_call_id: 'x1', content: JSON.stringify({ status: 'succeeded', result }) },
    ];
    const reply = researchPolicy(
      messages,
      PACK_TOOLS.filter((t) => t.function.name === 'get_holdings'),
    );
    const answer = reply.content ?? '';
    expect(answer).not.toContain('Every part of the question was answered');
    const parts = (extractUnanswered(answer) ?? []).map((u) => u.part);
    expect(parts).toEqual(expect.arrayContaining(['holdings of BBB', 'the comparison of AAA and BBB']));
  });

  it('both funds read but no comparison made: "No comparison was made." without claiming the data lacks them, and the comparison listed', async () => {
    const messages: WireMessage[] = [{ role: 'user', content: 'Compare AAA and BBB' }];
    const calls = [
      ['x1', 'AAA'],
      ['x2', 'BBB'],
    ] as const;
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: calls.map(([id, fund]) => ({
        id,
        type: 'function' as const,
        function: { name: 'get_holdings', arguments: JSON.stringify({ fund }) },
      })),
    });
    for (const [id, fund] of calls)
      messages.push({
        role: 'tool',
        tool_call_id: id,
        content: JSON.stringify({ status: 'succeeded', result: await executeTool(lib, 'get_holdings', { fund }) }),
      });
    const answer =
      researchPolicy(
        messages,
        PACK_TOOLS.filter((t) => t.function.name === 'get_holdings'),
      ).content ?? '';
    expect(answer).not.toContain('fewer than two');
    expect((extractUnanswered(answer) ?? []).map((u) => u.part)).toContain('the comparison of AAA and BBB');
  });
});
