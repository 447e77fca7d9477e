/**
 * A follow-up (a continuation's or a clarification's message) is read with the request it
 * follows up, as the runtime carries it (apps/runtime context.ts quotes it in a labelled system
 * message): `please finish` after an interrupted Run answers that Run's request, `Now compare it
 * with QQQ` compares QQQ with the fund asked before, and a message naming its own fund stands
 * alone. Before, each was read alone: a new user's trial saw "The question names no fund ticker"
 * and "Now compare it with QQQ" answered about QQQ only, both saying every part was answered.
 */
import { beforeAll, expect, it } from '@jest/globals';
import { HoldingsLibrary } from '@runplane/holdings';
import { currentRequest, earlierRequest, extractUnanswered, followUp, type WireMessage } from '../src/index.js';
import { describeWithSharedData } from '../../../test/support/shared-data.js';
import { research } from './drive.js';

const NOW = new Date(Date.UTC(2026, 11, 2, 12));

/** The context messages the runtime sends for a Continue of a Run that was asked `request` (context.ts). */
const continuing = (request: string): WireMessage[] => [
  { role: 'system', content: 'Messages labelled [history], [continuation] or [clarification] are material from earlier Runs ...' },
  {
    role: 'system',
    content: `[continuation, historical] This Run continues Run r-1. Its original request (verified against the hash stored at admission; quoted): ${JSON.stringify(request)}`,
  },
];

it("reads the earlier request from the runtime's quote, and only from it", () => {
  expect(earlierRequest(continuing('What does "SPY" hold?'))).toBe('What does "SPY" hold?');
  expect(earlierRequest([{ role: 'system', content: '[clarification, historical] The original request (quoted): "Compare SPY and QQQ"' }])).toBe(
    'Compare SPY and QQQ',
  );
  expect(earlierRequest([{ role: 'user', content: '[continuation, historical] Its original request (quoted): "SPY"' }])).toBeNull();
  expect(earlierRequest([{ role: 'system', content: 'You are a research assistant.' }])).toBeNull();
  expect(currentRequest([{ role: 'user', content: 'What does IVV hold?' }])).toBe('What does IVV hold?');
});

it('keeps a message that names its own fund and points back at nothing alone; joins the others with the earlier request', () => {
  expect(followUp('What does IVV hold?', 'What does SPY hold?')).toBe('What does IVV hold?');
  expect(followUp('Now compare it with QQQ', 'What does SPY hold?')).toBe('Now compare it with QQQ\nWhat does SPY hold?');
  expect(followUp('please finish', 'Compare SPY and QQQ')).toBe('please finish\nCompare SPY and QQQ');
  expect(followUp('Do the same for IVV', 'What does SPY hold?')).toBe('Do the same for IVV\nWhat does SPY hold?');
});

describeWithSharedData('follow-ups on the real holdings files', (dir) => {
  let library: HoldingsLibrary;
  beforeAll(() => {
    library = new HoldingsLibrary({ dir, dataSet: 'shared' });
  });
  const calls = async (question: string, earlier: string) => {
    const { turns, answer } = await research(library, question, { now: NOW, context: continuing(earlier) });
    return { calls: turns.flat(), answer, unanswered: extractUnanswered(answer) };
  };

  it('given "Now compare it with QQQ" after a question about SPY, then SPY and QQQ are compared', async () => {
    const { calls: made, answer } = await calls('Now compare it with QQQ', 'What does SPY hold?');
    const compared = made.filter((c) => c.name === 'compare_holdings').map((c) => [c.arguments.fundA, c.arguments.fundB].sort());
    expect(compared).toEqual([['QQQ', 'SPY']]);
    expect(answer).toMatch(/SPY/);
    expect(answer).toMatch(/QQQ/);
  });

  it('given "please finish" after an interrupted "What does SPY hold?", then SPY is researched, not "no fund named"', async () => {
    const { calls: made, answer } = await calls('please finish', 'What does SPY hold?');
    expect(made.filter((c) => c.name === 'get_holdings').map((c) => c.arguments.fund)).toEqual(['SPY']);
    expect(answer).not.toMatch(/names no fund/);
  });

  it('given a message naming its own fund after a question about SPY, then only that fund is researched', async () => {
    const { calls: made } = await calls('What does IVV hold?', 'What does SPY hold?');
    expect(made.filter((c) => c.name === 'get_holdings').map((c) => c.arguments.fund)).toEqual(['IVV']);
  });
});
