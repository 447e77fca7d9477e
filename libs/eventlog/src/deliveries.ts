/**
 * What a service's partition consumers deliver, told to the folds it keeps (no read of
 * the log on the hot path). A service whose consumers read every subject of their partitions
 * (bus.ts `SERVICE_CONSUMERS` `'all'`) sees each of its Runs' events in stream order, one event of
 * a Run at a time (unless its consumers take them on arrival, as the projector's do: it keeps no
 * folds): its folds can be brought up to date from the deliveries alone, and a decision taken
 * while handling a delivery need not read the Run again. Everything else (an HTTP request, a
 * timer, a watch) still reads the Run from the log.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { StoredEvent } from '@runplane/contracts';

/** The delivery being handled: set around a whole-Run consumer's handler (and everything it awaits). */
export interface DeliveryScope {
  /** The Run of the delivered event. */
  runId: string;
  /** Its stream sequence. */
  seq: number;
  /** The delivered event. */
  stored: StoredEvent;
}

/** Told of every delivery of a whole-Run consumer, in order per Run, before its handler runs. */
export interface DeliveryObserver {
  /**
   * A delivered event (also a redelivery, and a copy already known: the observer tells). A
   * returned promise is awaited before the handler runs (e.g. one direct get proving a fold
   * current); it must not reject.
   */
  delivered(stored: StoredEvent): void | Promise<void>;
  /**
   * This process starts or stops consuming `partition` (start-up, the partition moved here or
   * away): what it kept of those Runs may lack events another process handles.
   */
  partitionMoved(partition: number): void;
}

/**
 * One per {@link EventLog}: the observers of its whole-Run deliveries, and the scope of the
 * delivery being handled (an `AsyncLocalStorage`, so it follows the handler's awaits, and a
 * timer or an HTTP request started elsewhere is outside it).
 */
export class DeliveryFeed {
  private readonly observers = new Set<DeliveryObserver>();
  private readonly arrivalListeners = new Set<(stored: StoredEvent) => void>();
  private readonly scope = new AsyncLocalStorage<DeliveryScope>();

  /**
   * Listens to every verified delivery of a whole-Run consumer as it arrives, before it waits
   * behind the handlers of its Run's earlier deliveries: for what must act at once whatever the
   * Run is doing (a cancel aborts the model request that the handler of an earlier delivery is
   * awaiting, K4). The delivery is still handled in order afterwards. A listener must not throw
   * and must not wait. @returns a function that removes it.
   */
  onArrival(listener: (stored: StoredEvent) => void): () => void {
    this.arrivalListeners.add(listener);
    return () => this.arrivalListeners.delete(listener);
  }

  /** Tells the {@link onArrival} listeners of a delivery that has just arrived (a listener that throws is skipped). */
  arrived(stored: StoredEvent): void {
    for (const listener of this.arrivalListeners) {
      try {
        listener(stored);
      } catch {
        // an arrival listener only hastens what the ordered handling does anyway
      }
    }
  }

  /** Adds an observer. @returns a function that removes it. */
  observe(observer: DeliveryObserver): () => void {
    this.observers.add(observer);
    return () => this.observers.delete(observer);
  }

  /** Tells every observer of a delivery (and waits for those that answer with a promise), then runs its handler inside the delivery's scope. */
  async handle<T>(stored: StoredEvent, handler: () => Promise<T>): Promise<T> {
    let waits: Promise<void>[] | undefined;
    for (const o of this.observers) {
      const wait = o.delivered(stored);
      if (wait) (waits ??= []).push(wait);
    }
    if (waits) await Promise.all(waits);
    return this.scope.run({ runId: stored.event.runId, seq: stored.seq, stored }, handler);
  }

  /** Tells every observer that a partition's consumer starts or stops here. */
  partitionMoved(partition: number): void {
    for (const o of this.observers) o.partitionMoved(partition);
  }

  /** The delivery being handled by the caller's chain of awaits, if any. */
  current(): DeliveryScope | undefined {
    return this.scope.getStore();
  }
}
