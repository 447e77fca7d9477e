/** A client's money limit (K7): granted only when this deployment can charge it (a price in its currency, within the ceiling). */
import { describe, expect, it } from '@jest/globals';
import { BudgetRefused, moneyLimitOf } from '../src/budget.js';

const price = { currency: 'USD', inputMicrosPerMTok: 3_000_000, outputMicrosPerMTok: 15_000_000 };

describe('admission: a money limit (K7)', () => {
  it('given no budget, then no money limit', () => {
    expect(moneyLimitOf(undefined, 'm', { ceilingMicros: 10 })).toBeUndefined();
    expect(moneyLimitOf({}, 'm', { price, ceilingMicros: 10 })).toBeUndefined();
  });

  it('given a priced model and a limit within the ceiling, then the grant carries it', () => {
    expect(moneyLimitOf({ maxCost: { micros: 5_000, currency: 'USD' } }, 'm', { price, ceilingMicros: 5_000 })).toEqual({
      micros: 5_000,
      currency: 'USD',
    });
  });

  it('given an unpriced model, another currency, or a limit over the ceiling, then refused naming the field and why', () => {
    const refused = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(BudgetRefused);
        return { path: (e as BudgetRefused).path, message: (e as Error).message };
      }
      throw new Error('not refused');
    };
    expect(refused(() => moneyLimitOf({ maxCost: { micros: 1, currency: 'USD' } }, 'gpt-x', { ceilingMicros: 10 }))).toEqual({
      path: 'budget.maxCost',
      message: expect.stringContaining('model gpt-x has no configured price'),
    });
    expect(refused(() => moneyLimitOf({ maxCost: { micros: 1, currency: 'EUR' } }, 'm', { price, ceilingMicros: 10 })).path).toBe(
      'budget.maxCost.currency',
    );
    expect(refused(() => moneyLimitOf({ maxCost: { micros: 11, currency: 'USD' } }, 'm', { price, ceilingMicros: 10 })).path).toBe(
      'budget.maxCost.micros',
    );
  });
});
