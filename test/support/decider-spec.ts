/**
 * The one given/when/then helper every owner's decider tests use (after emmett's DeciderSpecification):
 *
 *   spec(decide).given(history).when(trigger).then([{ type, data }, ...])
 *   spec(decide).given(history).when(trigger).thenNothing()
 *   spec(decide).given(history).when(trigger).thenThrows(MessageConflict)
 *
 * `given` takes the Run's prior events (a {@link History} or stored events), `when` the trigger and
 * optionally the clock, and `then` asserts the emitted events' types and data, in order (jest
 * asymmetric matchers allowed inside `data`). Every emitted event must carry the decision clock
 * as `occurredAt`: a decider never reads the time itself.
 */
import { expect } from '@jest/globals';
import type { EventData, EventType, RunEvent, StoredEvent } from '@runplane/contracts';
import { foldRun, type RunFacts } from '@runplane/run-facts';
import { History } from './history.js';

/** The clock deciders get in tests unless `when(trigger, now)` says otherwise. */
export const NOW = new Date('2026-01-01T00:00:00.000Z');

/** An owner's decider, as every owner exports it from `apps/<owner>/src/decide.ts`. */
export type Decider<T> = (facts: RunFacts, trigger: T, now: Date) => RunEvent[];

/** An expected emitted event: its type and data. */
export type Expected = { [K in EventType]: { type: K; data: EventData<K> | ReturnType<typeof expect.objectContaining> } }[EventType];

export interface Then {
  /** Asserts the emitted events (type and data, in order); returns them for further checks. */
  then(expected: Expected[]): RunEvent[];
  /** Asserts that nothing is emitted. */
  thenNothing(): void;
  /** Asserts that deciding throws (an error class, message or regex, as jest's toThrow). */
  thenThrows(error?: Parameters<ReturnType<typeof expect>['toThrow']>[0]): void;
}

/**
 * What recovery appends when it fences an execution: `run.fenced` on the tools subject, then on
 * the runtime subject, each with `data` (everything but the subject). K6.
 */
export const bothFenced = (data: Omit<EventData<'run.fenced'>, 'fencedSubject'>) =>
  (['tools', 'runtime'] as const).map((fencedSubject) => ({ type: 'run.fenced' as const, data: { fencedSubject, ...data } }));

/** Starts a given/when/then specification of `decide`. */
export function spec<T>(decide: Decider<T>) {
  return {
    given(prior: History | readonly StoredEvent[] = new History()) {
      const events = prior instanceof History ? prior.events : prior;
      const runId = prior instanceof History ? prior.runId : (events[0]?.event.runId ?? 'run-1');
      const facts = foldRun(runId, events);
      return {
        when(trigger: T, now: Date = NOW): Then {
          const run = () => decide(facts, trigger, now);
          return {
            then(expected) {
              const got = run();
              expect(got.map((e) => ({ type: e.type, data: e.data }))).toEqual(expected);
              for (const e of got) expect(e.occurredAt).toBe(now.toISOString());
              return got;
            },
            thenNothing() {
              expect(run()).toEqual([]);
            },
            thenThrows(error) {
              expect(run).toThrow(error);
            },
          };
        },
      };
    },
  };
}
