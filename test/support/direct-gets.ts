/**
 * Counts the direct gets an EventLog sends (the unit of a Run read's cost, docs/event-log.md):
 * wraps `log.jsm.direct.getMessage` until `restore()`.
 */
import type { EventLog } from '@runplane/eventlog';

export interface DirectGetCounter {
  /** Direct gets sent since the counter started or was last reset. */
  readonly count: number;
  reset(): void;
  /** Puts the original function back. */
  restore(): void;
}

/** Starts counting `log`'s direct gets. */
export function countDirectGets(log: EventLog): DirectGetCounter {
  const direct = log.jsm.direct;
  const original = direct.getMessage.bind(direct);
  let count = 0;
  direct.getMessage = (...args: Parameters<typeof original>) => {
    count++;
    return original(...args);
  };
  return {
    get count() {
      return count;
    },
    reset: () => {
      count = 0;
    },
    restore: () => {
      direct.getMessage = original;
    },
  };
}
