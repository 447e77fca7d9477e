/**
 * Beating one heartbeat key (./heartbeats.ts): the loop both placements run, the worker thread's
 * (./heartbeat-worker.ts, on its own connection) and the main thread's (on the process's own).
 * Kept free of anything but the KV calls so that the worker's bundle stays small.
 */
import type { KV } from '@nats-io/kv';

/** A key being beaten. */
export interface Beating {
  /** Settles once the first write was tried, whether NATS took it or not. */
  readonly tried: Promise<void>;
  /** Resolves with the first write NATS took (never rejects: a failed write is tried again on the next tick). */
  readonly written: Promise<void>;
  /** Stops the ticks and deletes the key (a failed delete is ignored: the key then goes stale on its own). */
  stop(): Promise<void>;
}

/**
 * Writes `body` under `key` at once and then every `everyMs` ms. A write that fails (NATS
 * unreachable) is tried again on the next tick; a write still waiting on NATS is not doubled by the
 * next tick (no pile-up during an outage).
 * @param unref true on a process's main thread: the ticks alone do not keep the process alive.
 */
export function beatKey(kv: Pick<KV, 'put' | 'delete'>, key: string, body: string, everyMs: number, unref = false): Beating {
  let beating = false;
  let stopped = false;
  let markWritten!: () => void;
  const written = new Promise<void>((resolve) => (markWritten = resolve));
  const beat = async (): Promise<void> => {
    if (beating || stopped) return;
    beating = true;
    try {
      await kv.put(key, body);
      markWritten();
    } catch {
      // NATS unreachable: the next tick tries again (recovery does not count an outage against anyone)
    } finally {
      beating = false;
    }
  };
  const tried = beat();
  const timer = setInterval(() => void beat(), everyMs);
  if (unref) timer.unref();
  return {
    tried,
    written,
    async stop() {
      stopped = true;
      clearInterval(timer);
      await kv.delete(key).catch(() => undefined);
    },
  };
}
