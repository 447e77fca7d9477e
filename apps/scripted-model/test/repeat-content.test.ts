/** A scenario reply of several megabytes without a scenario of that size: `repeatContent` (a test tool for K8). */
import { describe, expect, it } from '@jest/globals';
import { actionFor, parseScenario } from '../src/scenario.js';

describe('scenario: repeatContent', () => {
  it('sends the content that many times in a row; without it, once', () => {
    const scenario = parseScenario({ steps: [{ reply: { content: 'One.\n\n', repeatContent: 3 } }, { reply: { content: 'Two.' } }] });
    const first = actionFor(scenario, 0);
    expect(first.kind === 'reply' && first.reply).toEqual({ content: 'One.\n\nOne.\n\nOne.\n\n' });
    const second = actionFor(scenario, 1);
    expect(second.kind === 'reply' && second.reply).toEqual({ content: 'Two.' });
  });

  it('refuses a count below 1', () => {
    expect(() => parseScenario({ steps: [{ reply: { content: 'x', repeatContent: 0 } }] })).toThrow(/repeatContent/);
  });
});
