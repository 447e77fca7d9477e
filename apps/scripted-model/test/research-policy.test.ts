import { beforeAll, describe, expect, it } from '@jest/globals';
import { ToolPack, type CompareHoldingsResult, type GetHoldingsResult, type ListFundsResult } from '@runplane/contracts';
import { executeTool, HoldingsLibrary, ToolFailure } from '@runplane/holdings';
import { describeWithSharedData } from '../../../test/support/shared-data.js';
import { closestPair, extractUnanswered, mentionedFunds, researchPolicy, type WireMessage, type WireTool } from '../src/index.js';

const DEFAULT_QUESTION = 'Compare the holdings of SPY and QQQ: verify the disclosure date of each file and identify gaps in coverage';

/** The tool pack as the runtime offers it. */
const TOOLS: WireTool[] = Object.entries(ToolPack).map(([name, spec]) => ({
  type: 'function',
  function: { name, description: spec.description, parameters: { type: 'object' } },
}));

interface Executed {
  name: string;
  args: Record<string, unknown>;
  /** The JSON string the runtime puts in the tool message (a ToolMessageContent). */
  content: string;
}

const ok = (result: unknown) => JSON.stringify({ status: 'succeeded', result });
const failed = (status: 'failed' | 'denied' | 'unknown', code: string, message: string) => JSON.stringify({ status, error: { code, message } });

/** system + user question, then per turn an assistant message with tool calls and their tool messages. */
function conversation(question: string, turns: Executed[][]): WireMessage[] {
  const messages: WireMessage[] = [
    { role: 'system', content: 'You are a fund research assistant.' },
    { role: 'user', content: question },
  ];
  turns.forEach((turn, t) => {
    const ids = turn.map((_, i) => `call_${t}_${i}`);
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: turn.map((c, i) => ({ id: ids[i]!, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.args) } })),
    });
    turn.forEach((c, i) => messages.push({ role: 'tool', tool_call_id: ids[i]!, content: c.content }));
  });
  return messages;
}

/** The policy's tool calls as plain {name, arguments}. */
function callsOf(reply: ReturnType<typeof researchPolicy>) {
  return (reply.toolCalls ?? []).map((c) => ({ name: c.name, arguments: c.arguments }));
}

/** Passages as the product splits them: on blank lines. */
const passages = (text: string) => text.split(/\n\s*\n/);

// ---- hand-made results that follow the contract schemas ---------------------------------------

const file = (fund: string, asOf: string | null, ext = 'csv') => {
  const issuerFormat = ext === 'xlsx' ? ('ssga-xlsx' as const) : ('invesco-csv' as const);
  const name = `${fund}_${asOf ?? 'undated'}.${ext}`;
  return {
    fund,
    file: name,
    issuerFormat,
    asOf,
    provenance: {
      file: name,
      sha256: '0'.repeat(64),
      layout: issuerFormat,
      asOf,
      asOfHow: asOf ? ('preamble' as const) : ('absent' as const),
      asOfText: asOf,
    },
  };
};

const LIST: ListFundsResult = ListFundsResultOf('shared');
function ListFundsResultOf(dataSet: 'shared' | 'illustrative'): ListFundsResult {
  return {
    dataSet,
    funds: [
      { fund: 'QQQ', files: [file('QQQ', '2020-07-02'), file('QQQ', '2024-12-26'), file('QQQ', '2025-09-26')] },
      { fund: 'SPY', files: [file('SPY', '2025-09-05', 'xlsx'), file('SPY', '2025-09-30', 'xlsx'), file('SPY', '2025-11-18', 'xlsx')] },
      { fund: 'ABC', files: [file('ABC', null)] },
    ],
    otherFiles: ['SOURCES.md'],
    otherFileNotes: [{ file: 'SOURCES.md', kind: 'not-holdings', reason: 'SOURCES.md is not a holdings file.' }],
  };
}

function summary(fund: string, asOf: string, ext: string, securityCount: number, weightSum: number, cash: number | null) {
  return {
    ...file(fund, asOf, ext),
    securityCount,
    nonSecurityLines: cash === null ? [] : [{ ticker: null, name: 'US DOLLAR', cusip: null, weight: cash, kind: 'cash' as const }],
    weightSum,
    securitiesWeightSum: weightSum - (cash ?? 0),
    unreadableWeightLines: [],
  };
}

const line = (ticker: string, weight: number) => ({ ticker, name: `${ticker} Inc`, cusip: null, weight });
const NEWEST = { rule: 'newest' as const, detail: 'the newest of 3 files of the fund' };
const SPY_HAND: GetHoldingsResult = {
  ...summary('SPY', '2025-09-30', 'xlsx', 407, 100.37, 0.31),
  top: [line('NVDA', 7.91), line('MSFT', 6.72)],
  selection: NEWEST,
};
const QQQ_HAND: GetHoldingsResult = { ...summary('QQQ', '2025-09-26', 'csv', 99, 99.98, null), top: [line('NVDA', 9.61)], selection: NEWEST };
const COMPARE_HAND: CompareHoldingsResult = {
  a: summary('SPY', '2025-09-30', 'xlsx', 407, 100.37, 0.31),
  b: summary('QQQ', '2025-09-26', 'csv', 99, 99.98, null),
  daysBetween: 4,
  commonCount: 77,
  onlyInA: [line('BRKB', 1.6), line('JPM', 1.4)],
  onlyInB: [line('SHOP', 0.93), line('MELI', 0.68), line('ARM', 0.1)],
  weightOfAHeldInB: 43.21,
  weightOfBHeldInA: 91.76,
  standardOverlap: 40.5,
  commonWithUnreadableWeight: 0,
  strongestSharedIdentifier: 'cusip',
  matchedBy: { cusip: 70, isin: 0, sedol: 0, ticker: 7, name: 0 },
  selectionA: NEWEST,
  selectionB: NEWEST,
  fallbackMatches: [],
  notMatched: [],
};

describe('research policy (hand-made tool results following the contract)', () => {
  it('given a question and no tool results, when asked, then it calls list_funds', () => {
    const reply = researchPolicy(conversation(DEFAULT_QUESTION, []), TOOLS);
    expect(reply.finishReason).toBe('tool_calls');
    expect(callsOf(reply)).toEqual([{ name: 'list_funds', arguments: {} }]);
  });

  it('given list_funds, when the question names two covered funds, then get_holdings each + compare_holdings on the closest-dated pair in one turn', () => {
    const reply = researchPolicy(conversation(DEFAULT_QUESTION, [[{ name: 'list_funds', args: {}, content: ok(LIST) }]]), TOOLS);
    expect(reply.finishReason).toBe('tool_calls');
    expect(callsOf(reply)).toEqual([
      { name: 'get_holdings', arguments: { fund: 'SPY', asOf: '2025-09-30' } },
      { name: 'get_holdings', arguments: { fund: 'QQQ', asOf: '2025-09-26' } },
      { name: 'compare_holdings', arguments: { fundA: 'SPY', fundB: 'QQQ', asOfA: '2025-09-30', asOfB: '2025-09-26' } },
    ]);
  });

  it('given a date in the question that matches a file, then that file is pinned and the other fund gets its closest file', () => {
    const reply = researchPolicy(
      conversation('How did QQQ on 2024-12-26 compare with SPY?', [[{ name: 'list_funds', args: {}, content: ok(LIST) }]]),
      TOOLS,
    );
    expect(callsOf(reply)).toEqual([
      { name: 'get_holdings', arguments: { fund: 'QQQ', asOf: '2024-12-26' } },
      { name: 'get_holdings', arguments: { fund: 'SPY', asOf: '2025-09-05' } },
      { name: 'compare_holdings', arguments: { fundA: 'QQQ', fundB: 'SPY', asOfA: '2024-12-26', asOfB: '2025-09-05' } },
    ]);
  });

  it('picks the later pair on a tie and skips undated files', () => {
    const a = [file('A', '2025-01-01'), file('A', '2025-01-11'), file('A', null)];
    const b = [file('B', '2025-01-06'), file('B', null)];
    expect(closestPair(a, b)).toEqual({ asOfA: '2025-01-11', asOfB: '2025-01-06' });
    expect(closestPair([file('A', null)], b)).toEqual({});
  });

  it('reads tickers in question order, known funds in any case, and skips stop-words', () => {
    expect(mentionedFunds('Does the S&P ETF SPY (USD, NAV, CUSIP) hold what qqq and XYZQ hold? I ask AND wonder', ['SPY', 'QQQ'])).toEqual([
      'SPY',
      'QQQ',
      'XYZQ',
    ]);
  });

  it('given the tool results, when all calls have answers, then the final answer states their figures in passages', () => {
    const reply = researchPolicy(
      conversation(DEFAULT_QUESTION, [
        [{ name: 'list_funds', args: {}, content: ok(LIST) }],
        [
          { name: 'get_holdings', args: { fund: 'SPY', asOf: '2025-09-30' }, content: ok(SPY_HAND) },
          { name: 'get_holdings', args: { fund: 'QQQ', asOf: '2025-09-26' }, content: ok(QQQ_HAND) },
          { name: 'compare_holdings', args: { fundA: 'SPY', fundB: 'QQQ', asOfA: '2025-09-30', asOfB: '2025-09-26' }, content: ok(COMPARE_HAND) },
        ],
      ]),
      TOOLS,
    );
    const text = reply.content ?? '';

    expect(reply.finishReason).toBe('stop');
    expect(reply.toolCalls).toBeUndefined();
    expect(passages(text).length).toBeGreaterThanOrEqual(5);
    expect(text).toContain('SPY as of 2025-09-30');
    expect(text).toContain('407 securities plus a cash line');
    expect(text).toContain('QQQ as of 2025-09-26');
    expect(text).toContain('99 securities');
    expect(text).toContain('4 days apart');
    expect(text).toContain('77 securities in common');
    expect(text).toContain("91.8% of QQQ's weight is held in SPY");
    expect(text).toContain("43.2% of SPY's weight is held in QQQ");
    expect(text).toContain('SPY lacks 3 QQQ names');
    expect(text).toContain('SHOP, MELI, ARM');
    expect(text).toContain('100.37%');
    expect(text).toMatch(/verified from inside each file.*SPY_2025-09-30\.xlsx states 2025-09-30.*QQQ_2025-09-26\.csv states 2025-09-26/);
    expect(text).not.toMatch(/illustrative/);
    expect(text).not.toMatch(/\d{2}\/\d{2}\/\d{4}/);
  });

  it('given the illustrative data set, then the first passage says so', () => {
    const reply = researchPolicy(
      conversation(DEFAULT_QUESTION, [
        [{ name: 'list_funds', args: {}, content: ok(ListFundsResultOf('illustrative')) }],
        [{ name: 'compare_holdings', args: { fundA: 'SPY', fundB: 'QQQ' }, content: ok(COMPARE_HAND) }],
      ]),
      TOOLS,
    );
    expect(passages(reply.content ?? '')[0]).toMatch(/illustrative sample/);
  });

  it('given an unknown fund, then get_holdings is still called and the answer says it is not covered', () => {
    const question = 'Compare SPY with XYZQ';
    const second = researchPolicy(conversation(question, [[{ name: 'list_funds', args: {}, content: ok(LIST) }]]), TOOLS);
    expect(callsOf(second)).toEqual([
      { name: 'get_holdings', arguments: { fund: 'SPY', asOf: '2025-11-18' } },
      { name: 'get_holdings', arguments: { fund: 'XYZQ' } },
    ]);

    const final = researchPolicy(
      conversation(question, [
        [{ name: 'list_funds', args: {}, content: ok(LIST) }],
        [
          { name: 'get_holdings', args: { fund: 'SPY' }, content: ok(SPY_HAND) },
          { name: 'get_holdings', args: { fund: 'XYZQ' }, content: failed('failed', 'unknown_fund', 'Fund XYZQ has no holdings file.') },
        ],
      ]),
      TOOLS,
    );
    const parts = passages(final.content ?? '');
    expect(final.finishReason).toBe('stop');
    expect(parts.some((p) => p.startsWith('XYZQ is not covered by the data: Fund XYZQ has no holdings file.'))).toBe(true);
    expect(final.content).toContain('407 securities');
    expect(final.content).toContain('No comparison was made');
  });

  it('reports denied and unknown outcomes honestly, never as results', () => {
    const final = researchPolicy(
      conversation(DEFAULT_QUESTION, [
        [{ name: 'list_funds', args: {}, content: ok(LIST) }],
        [
          { name: 'get_holdings', args: { fund: 'SPY' }, content: failed('denied', 'not_granted', "get_holdings is not in this Run's grant") },
          { name: 'get_holdings', args: { fund: 'QQQ' }, content: failed('unknown', 'timeout', 'no receipt within 30 s') },
          { name: 'compare_holdings', args: { fundA: 'SPY', fundB: 'QQQ' }, content: 'plain text, not JSON' },
        ],
      ]),
      TOOLS,
    );
    const text = final.content ?? '';
    expect(text).toContain("Reading the holdings of SPY was denied (not_granted): get_holdings is not in this Run's grant.");
    expect(text).toContain('Reading the holdings of QQQ: outcome unknown, not assumed (timeout: no receipt within 30 s).');
    expect(extractUnanswered(text)?.map((u) => u.part)).toEqual(['holdings of SPY', 'holdings of QQQ', 'comparison of SPY and QQQ']);
    expect(text).toContain('The comparison of SPY and QQQ returned content that is not a tool result; it is not used.');
    expect(text).not.toMatch(/securities in common/);
  });

  it('given a question naming no fund, then it answers from list_funds without further calls', () => {
    const reply = researchPolicy(conversation('Which funds can you research?', [[{ name: 'list_funds', args: {}, content: ok(LIST) }]]), TOOLS);
    expect(reply.finishReason).toBe('stop');
    expect(reply.content).toContain('QQQ (2020-07-02, 2024-12-26, 2025-09-26)');
    expect(reply.content).toContain('ABC (ABC_undated.csv undated)');
  });

  it('starts over for a follow-up question (only messages after the last user message count)', () => {
    const messages = conversation(DEFAULT_QUESTION, [[{ name: 'list_funds', args: {}, content: ok(LIST) }]]);
    messages.push({ role: 'assistant', content: 'An earlier answer.' }, { role: 'user', content: 'And DIA?' });
    expect(callsOf(researchPolicy(messages, TOOLS))).toEqual([{ name: 'list_funds', arguments: {} }]);
  });

  it('only calls tools that are offered, and says so when none are', () => {
    const onlyHoldings = TOOLS.filter((t) => t.function.name === 'get_holdings');
    expect(callsOf(researchPolicy(conversation(DEFAULT_QUESTION, []), onlyHoldings))).toEqual([
      { name: 'get_holdings', arguments: { fund: 'SPY' } },
      { name: 'get_holdings', arguments: { fund: 'QQQ' } },
    ]);
    const none = researchPolicy(conversation(DEFAULT_QUESTION, []), undefined);
    expect(none.finishReason).toBe('stop');
    expect(none.content).toMatch(/No research tools were available/);
  });
});

// ---- real issuer files through @runplane/holdings ---------------------------------------------

describeWithSharedData('research policy on the real data (@runplane/holdings)', (dir) => {
  let library: HoldingsLibrary;
  beforeAll(() => {
    library = new HoldingsLibrary({ dir, dataSet: 'shared' });
  });

  /** Runs the tools like the runtime: a ToolFailure becomes a failed receipt. */
  async function execute(calls: ReturnType<typeof callsOf>): Promise<Executed[]> {
    return Promise.all(
      calls.map(async (c) => {
        const args = c.arguments as Record<string, unknown>;
        try {
          return { name: c.name, args, content: ok(await executeTool(library, c.name, args)) };
        } catch (e) {
          if (!(e instanceof ToolFailure)) throw e;
          return { name: c.name, args, content: failed('failed', e.code, e.message) };
        }
      }),
    );
  }

  /** The policy/tool loop: at most 5 model turns. */
  async function research(question: string): Promise<{ turns: Executed[][]; answer: string }> {
    const turns: Executed[][] = [];
    for (let i = 0; i < 5; i++) {
      const reply = researchPolicy(conversation(question, turns), TOOLS);
      if (!reply.toolCalls) return { turns, answer: reply.content ?? '' };
      turns.push(await execute(callsOf(reply)));
    }
    throw new Error('policy did not finish in 5 turns');
  }

  it('answers the default SPY/QQQ question with the figures from the files', async () => {
    const { turns, answer } = await research(DEFAULT_QUESTION);

    expect(turns.map((t) => t.map((c) => c.name))).toEqual([['list_funds'], ['get_holdings', 'get_holdings', 'compare_holdings']]);
    expect(turns[1]?.[2]?.args).toEqual({ fundA: 'SPY', fundB: 'QQQ', asOfA: '2025-09-30', asOfB: '2025-09-26' });
    expect(passages(answer).length).toBeGreaterThanOrEqual(5);
    expect(answer).toMatch(
      /SPY as of 2025-09-30 \(file SPY_2025-09-30\.xlsx, chosen as the closest dates between the funds' files \(all within 4 days of each other\)\): 503 securities plus a cash line/,
    );
    expect(answer).toContain('QQQ as of 2025-09-26 (file QQQ_2025-09-26.csv): 101 securities');
    expect(answer).toContain('The standard overlap (the smaller weight summed over common holdings) is 51.4%');
    expect(extractUnanswered(answer)).toEqual([]);
    expect(answer).toContain('the disclosure dates are 4 days apart');
    expect(answer).toContain('88 securities in common');
    expect(answer).toContain("95.2% of QQQ's weight is held in SPY");
    expect(answer).toContain("51.4% of SPY's weight is held in QQQ");
    expect(answer).toContain('SPY lacks 13 QQQ names');
    for (const t of ['SHOP', 'MELI', 'PDD', 'MSTR', 'ASML', 'MRVL', 'TRI', 'ZS', 'AZN', 'CCEP', 'TEAM', 'GFS', 'ARM']) expect(answer).toContain(t);
    expect(answer).toContain('Its weights sum to 100.25% as the file states them');
    expect(answer).toMatch(
      /verified from inside each file, not taken from file names: SPY_2025-09-30\.xlsx states 2025-09-30.*QQQ_2025-09-26\.csv states 2025-09-26/,
    );
    expect(answer).not.toMatch(/illustrative|not covered|unknown/);
  });

  it('reports a fund the data does not cover', async () => {
    const { answer } = await research('Compare QQQ and XYZQ holdings');
    // Said once, in the tool's words (before: "XYZQ is not covered by the data: Fund XYZQ is not covered by the data folder").
    expect(answer).toContain('Fund XYZQ is not covered by the data folder');
    expect(answer.match(/not covered/g)).toHaveLength(3); // the sentence, then the short reason in the closing line and its JSON
    expect(answer).toContain('QQQ as of 2025-09-26');
  });

  it('answers any covered pair (IVV and SPY on their closest dates)', async () => {
    const { turns, answer } = await research('How much do IVV and SPY overlap?');
    expect(turns[1]?.find((c) => c.name === 'compare_holdings')?.args).toEqual({
      fundA: 'IVV',
      fundB: 'SPY',
      asOfA: '2025-11-18',
      asOfB: '2025-11-18',
    });
    expect(answer).toContain('both files are dated the same day');
    expect(answer).toMatch(/\d+ securities in common/);
  });
});
