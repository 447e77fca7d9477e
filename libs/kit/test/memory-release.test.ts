/**
 * Giving a quiet service's freed heap pages back (kit memory.ts): the decision, given/when/then,
 * and on a real Node process a burst of ~200 MiB of objects whose freed pages a regular full
 * collection leaves resident in V8's page pool, given back by one look of {@link IdleMemoryRelease}.
 */
import { describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { decideMemoryRelease, DEFAULT_MEMORY_RELEASE, type MemoryReleaseState } from '@runplane/kit/memory';

const MiB = 2 ** 20;
const policy = DEFAULT_MEMORY_RELEASE; // 32 MiB, quiet below 5 %
const given = (state: MemoryReleaseState) => ({
  /** `usedMiB` defaults to the committed heap less the 10 MiB the last collection left unused. */
  when: (committedMiB: number, rssMiB: number, busy: number, usedMiB = committedMiB - 10) =>
    decideMemoryRelease(state, { committed: committedMiB * MiB, used: usedMiB * MiB, rss: rssMiB * MiB, busy }, policy),
});
/** After a start or a collection: 40 MiB committed (10 of them unused), 80 MiB resident outside the heap. */
const settled: MemoryReleaseState = { peakCommitted: 40 * MiB, outsideAfterRelease: 80 * MiB, slackAfterRelease: 10 * MiB };

describe('decideMemoryRelease', () => {
  it('given a heap that grew to 180 MiB and fell back to 100, when the service is quiet, then collect', () => {
    const during = given(settled).when(180, 300, 0.9);
    expect(during.release).toBe(false); // busy: only the peak is noted
    expect(during.state.peakCommitted).toBe(180 * MiB);
    expect(given(during.state).when(100, 300, 0.01).release).toBe(true);
  });
  it('given the same fall, when the service is busy, then leave it (the work reuses the pages; the pause would hit requests)', () => {
    expect(given({ ...settled, peakCommitted: 180 * MiB }).when(100, 300, 0.2).release).toBe(false);
  });
  it('given a fall smaller than 32 MiB and no growth outside the heap, then leave it', () => {
    expect(given({ ...settled, peakCommitted: 60 * MiB }).when(40, 120, 0).release).toBe(false);
  });
  it('given a burst between two looks (no peak seen) whose pages stayed resident outside the committed heap, when quiet, then collect', () => {
    expect(given(settled).when(40, 160, 0).release).toBe(true); // 120 MiB outside, 40 more than after the last collection
  });
  it('given a heap still committed at its peak but mostly dead (183 MiB committed, 57 used: nothing pooled yet), when quiet, then collect', () => {
    const during = given(settled).when(183, 250, 0.9, 170);
    expect(during.release).toBe(false); // busy
    expect(given(during.state).when(183, 250, 0.01, 57).release).toBe(true); // nothing pooled, nothing grown outside the heap
    expect(given(during.state).when(183, 250, 0.2, 57).release).toBe(false); // not while busy
  });
  it('given unused committed heap that the last collection could not give back, then leave it (no collection every look of an idle service)', () => {
    const afterCollection: MemoryReleaseState = { peakCommitted: 100 * MiB, outsideAfterRelease: 80 * MiB, slackAfterRelease: 45 * MiB };
    expect(given(afterCollection).when(100, 180, 0, 55).release).toBe(false); // 45 MiB unused, as the collection left it
    expect(given(afterCollection).when(100, 180, 0, 20).release).toBe(true); // 80 unused: 35 more than it left
  });
});

describe('IdleMemoryRelease on a real process', () => {
  const fixture = fileURLToPath(new URL('./fixtures/heap-burst.mjs', import.meta.url));
  const run = (...args: string[]) =>
    JSON.parse(
      execFileSync(process.execPath, ['--expose-gc', '--max-semi-space-size=4', fixture, ...args], {
        encoding: 'utf8',
        env: { ...process.env, NODE_OPTIONS: '' },
      }),
    ) as {
      rssBefore: number;
      rssAfter: number;
      committed: number;
      released: boolean;
    };

  /**
   * The burst, run until its regular collection left the freed pages resident (what the case is
   * about): on a loaded machine V8's background unmapper has once given most of them back on its own
   * (52 MiB left above the heap), and then there is nothing for the release to show. At most 3 tries.
   */
  const burstLeftResident = (...args: string[]) => {
    let sample = run(...args);
    for (let tries = 1; tries < 3 && sample.rssBefore - sample.committed <= 100 * MiB; tries++) sample = run(...args);
    return sample;
  };

  it('given a burst of ~200 MiB freed by a regular full collection (its pages still resident), when the quiet service is looked at, then the pages go back to the OS', () => {
    const kept = burstLeftResident();
    // the regular collection shrank the committed heap but the pages stayed resident, and without
    // the release they stay
    expect(kept.rssBefore - kept.committed).toBeGreaterThan(100 * MiB);
    expect(kept.rssAfter).toBeGreaterThan(kept.rssBefore - 20 * MiB);
    const given = burstLeftResident('release');
    expect(given.rssBefore - given.committed).toBeGreaterThan(100 * MiB);
    expect(given.released).toBe(true);
    expect(given.rssAfter).toBeLessThan(given.rssBefore - 100 * MiB);
  });
});
