/**
 * What a test's wait on a Run's events wakes on: a message published on one of the Run's subjects
 * (an append; one the stream refused only costs an extra read).
 * One core NATS subscription per event log (`<prefix>.run.>`, the test's admin connection) counts
 * the messages of each Run; a wait reads the Run, and reads it again only when the count moved
 * (or after a fallback interval: a message published while the connection was down, during a NATS
 * restart, reaches no subscription). Without a watch (a closed connection, a refused subscription)
 * the waits poll every 100 ms, as they did before. Reading every Run of a test every 100-150 ms instead cost the
 * test worker and the nats-server a read of every event per poll (each subject's chain walked back
 * by direct gets), dozens of times a second per Run.
 */
import type { Subscription } from '@nats-io/nats-core';
import type { StoredEvent } from '@runplane/contracts';
import type { EventLog } from '@runplane/eventlog';

/** The longest a wait goes without reading the Run again, when nothing was seen on its subjects, ms. */
export const RUN_WAKE_FALLBACK_MS = 1_000;

/**
 * How long a woken wait lets the server store what woke it before reading, ms: a subscriber may get
 * a message before the stream has stored it (the stream is another subscriber of the subject).
 */
const STORE_SETTLE_MS = 25;

/** How often a wait reads the Run when there is no watch to wake it (the connection closed or the subscription ended), ms. */
const POLL_MS = 100;

interface Watch {
  sub: Subscription;
  /** Set when the subscription ended (the connection closed, or the server refused it): the waits poll. */
  ended: boolean;
  /** Messages seen per Run id. */
  counts: Map<string, number>;
  /** Waiters per Run id, resolved at its next message. */
  waiters: Map<string, Set<() => void>>;
}

const watches = new WeakMap<EventLog, Watch>();

/**
 * The watch of `log`'s Run subjects, subscribed on first use. One that ended is kept, not made
 * again: its waits poll every {@link POLL_MS} (as before the watch) instead of subscribing anew.
 */
function watchOf(log: EventLog): Watch {
  const known = watches.get(log);
  if (known) return known;
  const sub = log.nc.subscribe(`${log.space.prefix}.run.>`);
  const watch: Watch = { sub, ended: false, counts: new Map(), waiters: new Map() };
  // `<prefix>.run.<runId>.<owner>.<partition>`: the prefix has no dots (devstack subject spaces)
  const runToken = log.space.prefix.split('.').length + 1;
  void (async () => {
    for await (const m of sub) {
      const runId = m.subject.split('.')[runToken];
      if (runId === undefined) continue;
      watch.counts.set(runId, (watch.counts.get(runId) ?? 0) + 1);
      const ws = watch.waiters.get(runId);
      if (ws) {
        watch.waiters.delete(runId);
        for (const wake of ws) wake();
      }
    }
  })()
    .catch((e: unknown) => {
      // the server refused the subscription (the admin user may subscribe to everything:
      // libs/eventlog bus.ts): say why, once per log
      if (!log.nc.isClosed())
        process.stderr.write(
          `run-wake: the watch of ${log.space.prefix}.run.> ended (${e instanceof Error ? e.message : String(e)}); waits poll every ${POLL_MS} ms\n`,
        );
    })
    .finally(() => {
      watch.ended = true;
      for (const ws of watch.waiters.values()) for (const wake of ws) wake();
      watch.waiters.clear();
    });
  watches.set(log, watch);
  return watch;
}

/**
 * How many messages of `runId` the watch has seen so far: take it before reading the Run, and pass
 * it to {@link changedSince} after, so that a message stored during the read is not missed.
 */
export function runMark(log: EventLog, runId: string): number {
  try {
    const watch = watchOf(log);
    return watch.ended ? -1 : (watch.counts.get(runId) ?? 0);
  } catch {
    return -1; // the connection is closed or draining (a reconnecting one still subscribes): the waits poll
  }
}

/**
 * Resolves when a message of `runId` has been seen since `mark` ({@link runMark}) (at once if one
 * already was), {@link STORE_SETTLE_MS} after it, or after `fallbackMs` at the latest.
 */
export function changedSince(log: EventLog, runId: string, mark: number, fallbackMs = RUN_WAKE_FALLBACK_MS): Promise<void> {
  let watch: Watch;
  try {
    watch = watchOf(log);
  } catch {
    return new Promise((r) => setTimeout(r, Math.min(fallbackMs, POLL_MS)));
  }
  if (mark < 0 || watch.ended) return new Promise((r) => setTimeout(r, Math.min(fallbackMs, POLL_MS)));
  if ((watch.counts.get(runId) ?? 0) !== mark) return new Promise((r) => setTimeout(r, STORE_SETTLE_MS));
  return new Promise((resolve) => {
    const set = watch.waiters.get(runId) ?? new Set<() => void>();
    const wake = () => {
      clearTimeout(timer);
      set.delete(wake);
      setTimeout(resolve, STORE_SETTLE_MS);
    };
    const timer = setTimeout(wake, fallbackMs);
    set.add(wake);
    watch.waiters.set(runId, set);
  });
}

/**
 * The events of `runId` as one wait reads them again and again: the first `read()` reads the Run
 * whole, each later one only the events stored since (`EventLog.catchUp` from the last sequence of
 * each owner's subject), so a wait over a Run of n events costs one read of each, not n reads of
 * all of them (decoded, validated and their links checked each time, and a direct get each on the
 * server). When the back-links cannot be followed (a forged or garbage message on a Run subject), `catchUp` reads
 * the Run whole and that replaces what was held. One reader per wait: a wait starts from a full
 * read, so nothing one test did to the stream earlier is carried over.
 * @throws what `catchUp` throws (NATS unreachable, a read timing out); the events held stay as they were.
 */
export function runReader(log: EventLog, runId: string): { read(): Promise<StoredEvent[]> } {
  let events: StoredEvent[] = [];
  let known: Awaited<ReturnType<EventLog['catchUp']>>['lasts'] | null = null;
  return {
    async read() {
      const got = await log.catchUp(runId, known ?? {});
      events = got.full || known === null ? got.events : [...events, ...got.events].sort((a, b) => a.seq - b.seq);
      known = got.lasts;
      return events;
    },
  };
}
