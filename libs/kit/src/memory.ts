/**
 * Giving back what start-up left behind. Loading a service (about 1,500 modules: Nest, zod, the
 * NATS client...) allocates far more than it keeps, and an idle process runs no full garbage
 * collection afterwards, so the dead start-up objects and the pages they occupied stay resident:
 * 17-21 MiB of RSS per service, main thread and heartbeat thread together (docs/performance.md,
 * idle RSS). One full, memory-reducing collection once a thread is ready returns them to the OS.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/** V8's `gc()` as `--expose-gc` defines it (`flavor: 'last-resort'`: collect everything and release the freed pages). */
type GcFunction = (options?: { type?: 'major' | 'minor'; execution?: 'sync' | 'async'; flavor?: 'regular' | 'last-resort' }) => void;

let gc: GcFunction | null | undefined;

/**
 * Runs one full garbage collection that also shrinks the heap and releases the freed pages to the
 * OS (V8's last-resort collection; about 50-100 ms of this thread, once). Call it when a process or
 * worker thread has finished starting and before it takes work. Works in worker threads too.
 * Without access to V8's `gc` (setting `--expose-gc` throws) it does nothing. It sets the V8 flag
 * at run time (`v8.setFlagsFromString`, which Node's documentation asks to use with care): the
 * project's Node 24 allows it, and kit's memory.test.ts checks that the collection runs there.
 * @returns whether a collection ran.
 */
export function releaseStartupMemory(): boolean {
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
