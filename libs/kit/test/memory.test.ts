/**
 * The start-up collection (kit memory.ts) is a full one: an object nothing refers to is gone after it.
 */
import { describe, expect, it } from '@jest/globals';
import { releaseStartupMemory } from '@runplane/kit/memory';

describe('releaseStartupMemory', () => {
  it('given an object nothing refers to any more, when called, then a full collection ran and the object is gone', async () => {
    // made and dropped inside the function: only the WeakRef is left
    const ref = ((): WeakRef<number[][]> => new WeakRef(Array.from({ length: 1000 }, (_, i) => [i])))();
    // a WeakRef keeps its target for the rest of the job that made or read it
    await new Promise((r) => setImmediate(r));
    expect(releaseStartupMemory()).toBe(true);
    expect(ref.deref()).toBeUndefined();
  });
});
