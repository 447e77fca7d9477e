/**
 * Giving memory back to the OS. Loading a service (about 1,500 modules: Nest, zod, the NATS
 * client...) allocates far more than it keeps, and an idle process runs no full garbage collection
 * afterwards, so the dead start-up objects and the pages they occupied stay resident: 17-21 MiB of
 * RSS per service, main thread and heartbeat thread together (docs/performance.md, idle RSS). One
 * full, memory-reducing collection once a thread is ready returns them to the OS.
 *
 * The same holds after a burst of work: V8 (Node 24) keeps every 256 KiB heap page a collection
 * frees in a pool, committed and resident, for the heap to grow into again, and empties the pool
 * only on a memory-reducing collection, which its memory reducer does not start in a service whose
 * timers keep it busy now and then. After 10,000 Runs parked, the runtime's committed heap was
 * back at about 100 MiB while 183 MiB of heap pages stayed resident. {@link IdleMemoryRelease}
 * runs that collection once the service is quiet again.
 */
import { readFileSync } from 'node:fs';
import { performance, type EventLoopUtilization } from 'node:perf_hooks';
import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's `gc()` as `--expose-gc` defines it (`flavor: 'last-resort'`: collect everything and release the freed pages). */
type GcFunction = (options?: { type?: 'major' | 'minor'; execution?: 'sync' | 'async'; flavor?: 'regular' | 'last-resort' }) => void;

let gc: GcFunction | null | undefined;

/** Whether this process runs its start-up collections ({@link setStartupCollection}). */
let startupCollection = true;

/**
 * Turns this process's start-up collections on or off: service-kit sets it from
 * `RUNPLANE_STARTUP_COLLECTION` before the service starts (default on). Off, {@link releaseStartupMemory}
 * does nothing on this thread, and the worker threads started afterwards are told the same through
 * their start-up data ({@link startupCollectionOn}). For stacks that start often and live briefly
 * (the test suites): the collections cost about 1.6 s of CPU per stack of seven services, and a
 * short-lived process does not need its idle RSS back (docs/performance.md).
 */
export function setStartupCollection(on: boolean): void {
  startupCollection = on;
}

/** Whether this process runs start-up collections: what a worker thread it starts is told (`workerData`). */
export function startupCollectionOn(): boolean {
  return startupCollection;
}

/**
 * Runs one full garbage collection that also shrinks the heap and releases the freed pages to the
 * OS (V8's last-resort collection; about 50-100 ms of this thread, once). Call it when a process or
 * worker thread has finished starting and before it takes work. Works in worker threads too.
 * Without access to V8's `gc` (setting `--expose-gc` throws) it does nothing. It sets the V8 flag
 * at run time (`v8.setFlagsFromString`, which Node's documentation asks to use with care): the
 * project's Node 24 allows it, and kit's memory.test.ts checks that the collection runs there.
 * @param on whether to collect: this thread's setting ({@link setStartupCollection}) unless a worker
 *   thread passes what its process told it.
 * @returns whether a collection ran (false when `on` is false).
 */
export function releaseStartupMemory(on: boolean = startupCollection): boolean {
  return on ? releaseMemory() : false;
}

/** V8's last-resort collection (see {@link releaseStartupMemory}); false when `gc` is out of reach. */
function releaseMemory(): boolean {
  if (gc === undefined) {
    try {
      // `--expose-gc` set now applies to contexts created after it: the gc of a new context
      // collects the whole isolate (this thread's heap)
      setFlagsFromString('--expose-gc');
      gc = runInNewContext('gc') as GcFunction;
    } catch {
      gc = null;
    }
  }
  if (!gc) return false;
  gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  return true;
}

/** When a quiet service gives its freed heap pages back ({@link decideMemoryRelease}). */
export interface MemoryReleasePolicy {
  /** How often the service is looked at, ms. */
  everyMs: number;
  /**
   * Least memory worth a collection, bytes: freed heap pages (peak committed heap minus committed
   * now), committed heap holding nothing (committed minus used, beyond what the last collection
   * left), or growth of the resident memory outside the committed heap.
   */
  minBytes: number;
  /** Most event-loop utilization (0-1) over the last `everyMs` at which the service counts as quiet. */
  maxBusy: number;
}

/** Every 10 s; 32 MiB at least; quiet below 5 % event-loop utilization. */
export const DEFAULT_MEMORY_RELEASE: MemoryReleasePolicy = { everyMs: 10_000, minBytes: 32 * 2 ** 20, maxBusy: 0.05 };

/** One look at the process: committed and used V8 heap and RSS in bytes, event-loop utilization since the last look (0-1). */
export interface MemorySample {
  committed: number;
  used: number;
  rss: number;
  busy: number;
}

/** What the releaser remembers since its last collection, bytes. */
export interface MemoryReleaseState {
  /** The highest committed heap seen: what it has given back since sits in V8's page pool. */
  peakCommitted: number;
  /** RSS minus committed heap right after the last collection (or at the start). */
  outsideAfterRelease: number;
  /** Committed minus used heap right after the last collection (or at the start): what a collection cannot give back. */
  slackAfterRelease: number;
}

/**
 * Decides whether to run a memory-reducing collection now (pure): only when the service is quiet
 * (`busy <= maxBusy`), and only when at least `minBytes` can be expected back: the committed heap
 * fell that far below its peak (the freed pages are pooled, still resident), the committed heap
 * holds that much more unused space than the last collection left (pages a burst filled, now
 * mostly dead: after 10,000 parked Runs the runtime's heap stayed at 183 MiB committed for 57 used
 * in one run of two, with no page pooled), or the resident memory outside the committed heap grew
 * that much since the last collection (pages pooled between two looks). A busy service is left alone: the pages are reused by the work, and the collection's
 * pause (tens to hundreds of ms) would fall on requests.
 * @returns the state to keep (`peakCommitted` raised to the sample) and whether to collect.
 */
export function decideMemoryRelease(
  state: MemoryReleaseState,
  sample: MemorySample,
  policy: MemoryReleasePolicy,
): { state: MemoryReleaseState; release: boolean } {
  const next = { ...state, peakCommitted: Math.max(state.peakCommitted, sample.committed) };
  if (sample.busy > policy.maxBusy) return { state: next, release: false };
  const pooled = next.peakCommitted - sample.committed;
  const unused = sample.committed - sample.used - state.slackAfterRelease;
  const grownOutside = sample.rss - sample.committed - state.outsideAfterRelease;
  return { state: next, release: pooled >= policy.minBytes || unused >= policy.minBytes || grownOutside >= policy.minBytes };
}

/**
 * Gives a quiet service's freed heap pages back to the OS (see the module comment): every
 * `everyMs` it samples the committed heap, the RSS and the event-loop utilization, and when
 * {@link decideMemoryRelease} says so runs one last-resort collection (all pooled pages are
 * released) and starts counting afresh. Its timer does not keep the process alive.
 */
export class IdleMemoryRelease {
  private state: MemoryReleaseState;
  private lastLoop: EventLoopUtilization = performance.eventLoopUtilization();
  private timer: NodeJS.Timeout | null = null;
  /** Collections run so far. */
  releases = 0;

  constructor(private readonly policy: MemoryReleasePolicy = DEFAULT_MEMORY_RELEASE) {
    this.state = IdleMemoryRelease.afresh(IdleMemoryRelease.measure(0));
  }

  /** Starts looking every `everyMs`. */
  start(): this {
    this.timer ??= setInterval(() => this.check(), this.policy.everyMs).unref();
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /**
   * One look (what the timer does), with the event-loop utilization since the last look, unless
   * `busy` (0-1) is given.
   * @returns whether a collection ran.
   */
  check(busy?: number): boolean {
    const loop = performance.eventLoopUtilization();
    const measured = IdleMemoryRelease.measure(busy ?? performance.eventLoopUtilization(loop, this.lastLoop).utilization);
    this.lastLoop = loop;
    const { state, release } = decideMemoryRelease(this.state, measured, this.policy);
    this.state = state;
    if (!release || !releaseMemory()) return false;
    this.releases++;
    this.state = IdleMemoryRelease.afresh(IdleMemoryRelease.measure(0));
    return true;
  }

  private static afresh(now: MemorySample): MemoryReleaseState {
    return { peakCommitted: now.committed, outsideAfterRelease: now.rss - now.committed, slackAfterRelease: now.committed - now.used };
  }

  private static measure(busy: number): MemorySample {
    const heap = getHeapStatistics();
    return { committed: heap.total_heap_size, used: heap.used_heap_size, rss: process.memoryUsage.rss(), busy };
  }
}

/** The malloc a process runs with (see {@link allocatorInUse}). */
export type Allocator = 'jemalloc' | 'system';

/**
 * Which malloc this process runs with: `jemalloc` when a libjemalloc is mapped into it (preloaded
 * through `LD_PRELOAD`, as deploy/Dockerfile and the devstack do), else `system` (glibc's; also
 * where `/proc/self/maps` cannot be read, off Linux). glibc keeps the native memory a burst of
 * work freed in its brk heap and per-thread arenas; jemalloc gives it back within seconds
 * (docs/performance.md, parked Runs).
 * @param maps the text of `/proc/self/maps` (read when not given).
 */
export function allocatorInUse(maps?: string): Allocator {
  let text = maps;
  if (text === undefined) {
    try {
      text = readFileSync('/proc/self/maps', 'utf8');
    } catch {
      return 'system';
    }
  }
  return /\/libjemalloc[^/\n]*\.so/.test(text) ? 'jemalloc' : 'system';
}
