/**
 * Each tool thread runs its start-up collection as its process says (kit memory.ts,
 * `RUNPLANE_STARTUP_COLLECTION`): an executor made after the process turned its collections off
 * starts threads that skip theirs.
 */
import { afterEach, describe, expect, it } from '@jest/globals';
import { setStartupCollection } from '@runplane/kit/memory';
import { ToolExecutor } from '../dist/executor.js';

describe('the tool threads and the start-up collection', () => {
  afterEach(() => setStartupCollection(true));

  const warmUps = async () => {
    const executor = new ToolExecutor({ threads: 2, timeoutMs: 30_000, abandonMs: 0 });
    try {
      return await executor.startupCollections;
    } finally {
      await executor.close();
    }
  };

  it('given the process default, when the executor starts its threads, then each runs its collection', async () => {
    expect(await warmUps()).toEqual([true, true]);
  });

  it('given the process turned its collections off, when the executor starts its threads, then none runs one', async () => {
    setStartupCollection(false);
    expect(await warmUps()).toEqual([false, false]);
  });
});
