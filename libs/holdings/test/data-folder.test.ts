import { describe, it, expect, afterAll } from '@jest/globals';
import { copyFileSync, mkdtempSync, existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findRepoRoot, HoldingsLibrary, resolveDataFolder, SAMPLE_DIR, sharedDataDir, ToolFailure } from '../src/index.js';

/** Folders this file made in the temporary directory: removed when it ends. */
const made: string[] = [];
afterAll(() => {
  for (const dir of made) rmSync(dir, { recursive: true, force: true });
});

describe('resolveDataFolder', () => {
  it('finds the repo root by nx.json and the sample next to the sources', () => {
    const root = findRepoRoot();
    expect(root).not.toBeNull();
    expect(existsSync(join(root!, 'nx.json'))).toBe(true);
    expect(existsSync(join(SAMPLE_DIR, 'README.md'))).toBe(true);
  });

  it('uses RUNPLANE_DATA_DIR when set: shared unless it is the sample', () => {
    const dir = mkdtempSync(join(tmpdir(), 'holdings-'));
    made.push(dir);
    expect(resolveDataFolder({ RUNPLANE_DATA_DIR: dir })).toEqual({ dir, dataSet: 'shared' });
    expect(resolveDataFolder({ RUNPLANE_DATA_DIR: SAMPLE_DIR }).dataSet).toBe('illustrative');
    expect(() => resolveDataFolder({ RUNPLANE_DATA_DIR: join(dir, 'missing') })).toThrow(/not a directory/);
  });

  it('falls back to ../shared when present, else to the illustrative sample', () => {
    const shared = sharedDataDir();
    const expected = shared !== null && existsSync(shared) ? { dir: shared, dataSet: 'shared' } : { dir: SAMPLE_DIR, dataSet: 'illustrative' };
    expect(resolveDataFolder({})).toEqual(expected);
  });

  it('reports an empty folder as no funds, and an unreadable one as a typed failure', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'holdings-empty-'));
    made.push(empty);
    await expect(new HoldingsLibrary({ dir: empty, dataSet: 'shared' }).listFunds()).resolves.toEqual({
      dataSet: 'shared',
      funds: [],
      otherFiles: [],
      otherFileNotes: [],
    });
    const missing = new HoldingsLibrary({ dir: join(empty, 'nope'), dataSet: 'shared' });
    await expect(missing.listFunds()).rejects.toBeInstanceOf(ToolFailure);
    await expect(missing.listFunds()).rejects.toMatchObject({ code: 'unreadable_file' });
  });

  it('recognises holdings files by content, not by extension', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'holdings-sniff-'));
    made.push(dir);
    copyFileSync(join(SAMPLE_DIR, 'ILLUSTRATIVE-BBB_2025-01-30.csv'), join(dir, 'export.txt'));
    copyFileSync(join(SAMPLE_DIR, 'README.md'), join(dir, 'notes.csv'));
    const listed = await new HoldingsLibrary({ dir, dataSet: 'shared' }).listFunds();
    expect(listed.funds).toMatchObject([{ fund: 'BBB', files: [{ fund: 'BBB', file: 'export.txt', issuerFormat: 'ark-csv', asOf: '2025-01-30' }] }]);
    expect(listed.otherFiles).toEqual(['notes.csv']);
  });
});
