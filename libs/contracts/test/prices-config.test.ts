/** `RUNPLANE_MODEL_PRICES` (K7): validated at start-up into integer micro-units per million tokens; a bad value names the setting. */
import { describe, expect, it } from '@jest/globals';
import { GrantCeilingConfig, loadConfig, ModelConfig } from '@runplane/contracts';

describe('model prices setting', () => {
  it('given none, then no model is priced; given prices, then micro-units per million tokens, integers', () => {
    expect(loadConfig(ModelConfig, {}).RUNPLANE_MODEL_PRICES).toEqual({});
    const prices = loadConfig(ModelConfig, {
      RUNPLANE_MODEL_PRICES: JSON.stringify({ 'gpt-x': { inputPerMTok: 0.15, outputPerMTok: 0.6, currency: 'USD' } }),
    }).RUNPLANE_MODEL_PRICES;
    expect(prices).toEqual({ 'gpt-x': { currency: 'USD', inputMicrosPerMTok: 150_000, outputMicrosPerMTok: 600_000 } });
    expect(loadConfig(GrantCeilingConfig, {}).RUNPLANE_GRANT_CEILING_COST_MICROS).toBe(100_000_000);
  });

  it.each([
    ['not JSON', '{gpt-x: 1}'],
    ['a negative price', JSON.stringify({ m: { inputPerMTok: -1, outputPerMTok: 1, currency: 'USD' } })],
    ['a missing currency', JSON.stringify({ m: { inputPerMTok: 1, outputPerMTok: 1 } })],
    ['an unknown field', JSON.stringify({ m: { inputPerMTok: 1, outputPerMTok: 1, currency: 'USD', cached: 1 } })],
  ])('given %s, then start-up fails naming RUNPLANE_MODEL_PRICES', (_what, value) => {
    expect(() => loadConfig(ModelConfig, { RUNPLANE_MODEL_PRICES: value })).toThrow(/Invalid configuration: RUNPLANE_MODEL_PRICES/);
  });
});
