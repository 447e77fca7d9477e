/**
 * A question put to a human (`ask_human`) or a sub-agent is not a research call (K8, K10): given a
 * scripted turn that asked a human, when the research policy replies, then it neither counts the
 * question as research done nor reports it as a failed research call: the research starts as if
 * nothing had been tried, and the answer names no failure for it.
 */
import { describe, expect, it } from '@jest/globals';
import { ToolPack } from '@runplane/contracts';
import { extractUnanswered, researchPolicy, type WireMessage, type WireTool } from '../src/index.js';

const NOW = new Date('2026-12-01T00:00:00Z');
const QUESTION = 'What does SPY hold?';
const TOOLS: WireTool[] = [...Object.keys(ToolPack), 'ask_human'].map((name) => ({
  type: 'function',
  function: { name, description: name, parameters: { type: 'object' } },
}));

/** given: the question, then one assistant turn with these calls, each answered by its tool message. */
function given(calls: { name: string; args: Record<string, unknown>; content: unknown }[]): WireMessage[] {
  return [
    { role: 'system', content: 'You are a fund research assistant.' },
    { role: 'user', content: QUESTION },
    {
      role: 'assistant',
      content: null,
      tool_calls: calls.map((c, i) => ({ id: `call_${i}`, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.args) } })),
    },
    ...calls.map((c, i): WireMessage => ({ role: 'tool', tool_call_id: `call_${i}`, content: JSON.stringify(c.content) })),
  ];
}

const askHuman = (content: unknown) => ({ name: 'ask_human', args: { question: 'Which share class?' }, content });
const answered = askHuman({ status: 'succeeded', result: { answer: 'the ETF', answeredBy: 'u1', answeredAt: '2026-12-01T00:00:00Z' } });
const unanswered = askHuman({ status: 'unknown', error: { code: 'not_answered', message: 'the question has no answer recorded' } });

describe('research policy: asking a human is not a failed research call', () => {
  it('given an answered ask_human and no research yet, when the policy replies, then it starts the research (list_funds)', () => {
    const reply = researchPolicy(given([answered]), TOOLS, NOW);
    expect(reply.toolCalls?.map((c) => c.name)).toEqual(['list_funds']);
    expect(reply.content).toBeUndefined();
  });

  it('given an ask_human with no answer recorded, when the policy replies, then it still starts the research', () => {
    expect(researchPolicy(given([unanswered]), TOOLS, NOW).toolCalls?.map((c) => c.name)).toEqual(['list_funds']);
  });

  it('given an ask_human with no answer and no research tool offered, when the policy answers, then no part is unanswered for a failed call and no failure is said', () => {
    const reply = researchPolicy(given([unanswered]), [], NOW);
    const text = reply.content ?? '';
    expect(text).toMatch(/^No research tools were available/);
    expect(text).not.toMatch(/failed|outcome unknown|the list of funds/i);
    expect(extractUnanswered(text)?.map((u) => u.reason)).toEqual(['no research tools were available']);
  });
});
