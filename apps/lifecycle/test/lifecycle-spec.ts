/** The lifecycle's decider specification, shared by its test files: its spec, the wake, and `settles`. */
import { decide } from '@runplane/app-lifecycle';
import { spec, type Expected } from '../../../test/support/decider-spec.js';
import type { History } from '../../../test/support/history.js';

/** `spec(decide)` of the lifecycle. */
export const lifecycle = spec(decide);

/** The lifecycle's one trigger: woken by a Run's event. */
export const wake = { type: 'Wake' } as const;

/**
 * Wakes the lifecycle on `h` and asserts that it settles the Run, once, with `data` (exact, or a
 * jest matcher such as `expect.objectContaining`); returns the settlement.
 */
export const settles = (h: History, data: Extract<Expected, { type: 'run.settled' }>['data']) => {
  const [settled] = lifecycle
    .given(h)
    .when(wake)
    .then([{ type: 'run.settled', data }]);
  if (settled?.type !== 'run.settled') throw new Error('expected a settlement');
  return settled;
};
