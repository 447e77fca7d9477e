/**
 * The money limit a client asks for a new Run (`PostMessageBody.budget`, K7), checked against what
 * this deployment can charge, pure: the model must have a configured price
 * (`RUNPLANE_MODEL_PRICES`) in the limit's currency, and the limit must be within the grant
 * ceiling (`RUNPLANE_GRANT_CEILING_COST_MICROS`). Admission refuses anything else (400), so that
 * no Run is admitted with a limit nothing could charge.
 */
import type { Money, RunBudget, TokenPrice } from '@runplane/contracts';

/** The money settings of admission: the Runs' model's price (absent: unpriced) and the ceiling, micro-units. */
export interface MoneySettings {
  price?: TokenPrice;
  ceilingMicros: number;
}

/** A requested money limit admission cannot grant: `path` in the body and why. */
export class BudgetRefused extends Error {
  constructor(
    readonly path: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The grant's `maxCost` for `budget`, or undefined when none is asked.
 * @throws BudgetRefused when the model is unpriced, priced in another currency, or the limit is over the ceiling.
 */
export function moneyLimitOf(budget: RunBudget | undefined, model: string, money: MoneySettings): Money | undefined {
  const asked = budget?.maxCost;
  if (!asked) return undefined;
  if (!money.price)
    throw new BudgetRefused('budget.maxCost', `model ${model} has no configured price (RUNPLANE_MODEL_PRICES): a money limit cannot be charged`);
  if (money.price.currency !== asked.currency)
    throw new BudgetRefused('budget.maxCost.currency', `model ${model} is priced in ${money.price.currency}, not ${asked.currency}`);
  if (asked.micros > money.ceilingMicros)
    throw new BudgetRefused('budget.maxCost.micros', `${asked.micros} is over this deployment's ceiling of ${money.ceilingMicros} micro-units`);
  return { micros: asked.micros, currency: asked.currency };
}
