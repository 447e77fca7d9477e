import { noProgressClock, parkedOn, type RunFacts } from '@runplane/run-facts';

/**
 * When recovery should next read a Run to judge its no-progress clock (K7), from the facts it just
 * read at `now` (epoch ms): the moment the limit runs out (its last progress plus
 * `noProgressSeconds`); `now` when it already ran out but the fence decided nothing (a conflict:
 * try again on the next sweep); `Infinity` when there is nothing to judge until something new
 * happens: the Run finished, was fenced or settled, has no limit, or is parked on a human or a
 * child (K10). A parked Run is never past the limit (the wait's expiry covers it), and its wake
 * (`wait.answered`, `child.run.settled`) is progress that restarts the clock: the caller re-arms
 * the check when that wake is delivered (`DeadlineWatcher.woken`), so a Run parked for days
 * costs one read, not one per limit.
 * @returns epoch ms, or `Infinity`.
 */
export function nextProgressCheck(facts: RunFacts, now: number): number {
  if (facts.settled || facts.fenced || facts.finished) return Infinity;
  const clock = noProgressClock(facts, new Date(now));
  if (!clock || clock.limitMs === null) return Infinity;
  if (clock.passed) return now;
  if (parkedOn(facts) !== null) return Infinity;
  return Date.parse(clock.dueAt!);
}
