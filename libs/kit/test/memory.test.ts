/**
 * The start-up collection (kit memory.ts) is a full one: an object nothing refers to is gone after it.
 * A process started with `RUNPLANE_STARTUP_COLLECTION=false` (service-kit `setStartupCollection`)
 * runs none on its thread, and tells its worker threads so (`startupCollectionOn`).
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { releaseStartupMemory, setStartupCollection, startupCollectionOn } from '@runplane/kit/memory';

/** A WeakRef to an object made and dropped inside the call: only the WeakRef is left. */
async function droppedObject(): Promise<WeakRef<number[][]>> {
  const ref = ((): WeakRef<number[][]> => new WeakRef(Array.from({ length: 1000 }, (_, i) => [i])))();
  // a WeakRef keeps its target for the rest of the job that made or read it
  await new Promise((r) => setImmediate(r));
  return ref;
}

describe('releaseStartupMemory', () => {
  afterEach(() => setStartupCollection(true));

  it('given an object nothing refers to any more, when called, then a full collection ran and the object is gone', async () => {
    const ref = await droppedObject();
    expect(startupCollectionOn()).toBe(true);
    expect(releaseStartupMemory()).toBe(true);
    expect(ref.deref()).toBeUndefined();
  });

  it('given the start-up collection turned off for the process, when called, then it collects nothing and says so', () => {
    setStartupCollection(false);
    expect(startupCollectionOn()).toBe(false);
    expect(releaseStartupMemory()).toBe(false);
  });

  it('given a worker told to collect (its own process setting aside), when called with that, then the collection runs', async () => {
    setStartupCollection(false);
    const ref = await droppedObject();
    expect(releaseStartupMemory(true)).toBe(true);
    expect(ref.deref()).toBeUndefined();
    expect(releaseStartupMemory(false)).toBe(false);
  });
});
