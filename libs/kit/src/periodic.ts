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

/**
 * Takes at most `batch` items per pass from a list that changes between passes, in turn: each pass
 * starts where the last one stopped (by position, wrapping), so every item is reached within
 * `ceil(length / batch)` passes while no single pass does more than `batch` of work (a clean-up
 * pass that reads a Run per item: recovery's over 10,000 parked Runs).
 */
export class InTurn {
  private cursor = 0;

  /** @param batch most items per pass (at least 1). */
  constructor(readonly batch: number) {}

  /** The next pass's items: all of them when there are at most `batch`, else `batch` of them from where the last pass stopped. */
  next<T>(items: readonly T[]): T[] {
    if (items.length <= this.batch) return [...items];
    const start = this.cursor % items.length;
    this.cursor = start + this.batch;
    const out = items.slice(start, start + this.batch);
    if (out.length < this.batch) out.push(...items.slice(0, this.batch - out.length));
    return out;
  }
}
