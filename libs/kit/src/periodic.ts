/**
 * A pass that runs now and then inside a more frequent loop (a clean-up every 30 s of a sweep
 * every second): {@link Periodic.due} is true at most once per `everyMs`, first `everyMs` after
 * construction.
 */
export class Periodic {
  private last: number;

  /** @param everyMs the least time between two passes, ms; @param now the clock at construction, ms since the epoch. */
  constructor(
    readonly everyMs: number,
    now = Date.now(),
  ) {
    this.last = now;
  }

  /** True when `everyMs` have passed since the last pass (or construction) at `now` (ms since the epoch); the next pass then counts from `now`. */
  due(now: number): boolean {
    if (now - this.last < this.everyMs) return false;
    this.last = now;
    return true;
  }
}
