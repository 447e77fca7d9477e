/**
 * The processes a local stack starts reuse Node's module compile cache (`compileCacheEnv`): a
 * process given that environment really has the cache on, in Node's default folder, and the
 * caller's own choice (a folder, or `NODE_DISABLE_COMPILE_CACHE`) wins. Likewise the tools'
 * data-file inspections (`inspectionCacheEnv`): one private folder in the user's cache folder, off
 * when it is not private, unless the caller chose.
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { compileCacheDir, compileCacheEnv } from '../src/compile-cache.js';
import { inspectionCacheDir, inspectionCacheEnv } from '../src/inspection-cache.js';

const run = promisify(execFile);

describe('compileCacheEnv', () => {
  it("given an environment without a choice, names Node's default folder under the OS temporary folder", () => {
    expect(compileCacheEnv({})).toEqual({ NODE_COMPILE_CACHE: join(tmpdir(), 'node-compile-cache') });
    expect(compileCacheDir()).toBe(join(tmpdir(), 'node-compile-cache'));
  });

  it("given NODE_COMPILE_CACHE already set, the caller's folder wins", () => {
    expect(compileCacheEnv({ NODE_COMPILE_CACHE: '/var/cache/other' })).toEqual({});
  });

  it('given NODE_DISABLE_COMPILE_CACHE, adds nothing (the cache stays off)', () => {
    expect(compileCacheEnv({ NODE_DISABLE_COMPILE_CACHE: '1' })).toEqual({});
  });
});

describe('a process started with that environment', () => {
  const { NODE_COMPILE_CACHE: _dir, NODE_DISABLE_COMPILE_CACHE: _off, ...base } = process.env; // this process's own choice aside
  const cacheDirOf = async (env: NodeJS.ProcessEnv) =>
    (await run(process.execPath, ['-e', "console.log(require('node:module').getCompileCacheDir() ?? 'off')"], { env })).stdout.trim();

  it('compiles its modules through the cache folder', async () => {
    const dir = await cacheDirOf({ ...base, ...compileCacheEnv(base) });
    // Node keeps each version's entries in a subfolder of the folder it was given
    expect(dir.startsWith(compileCacheDir())).toBe(true);
  });

  it('without it, runs with the cache off', async () => {
    expect(await cacheDirOf(base)).toBe('off');
  });
});

describe('inspectionCacheEnv', () => {
  const made: string[] = [];
  afterAll(() => {
    for (const dir of made) rmSync(dir, { recursive: true, force: true });
  });
  const cacheHome = () => {
    const dir = mkdtempSync(join(tmpdir(), 'rp-xdg-'));
    made.push(dir);
    return dir;
  };

  it("given no choice, names the user's cache folder and makes it private (mode 0700)", () => {
    const home = cacheHome();
    const dir = join(home, 'runplane', 'inspections');
    expect(inspectionCacheDir({ XDG_CACHE_HOME: home })).toBe(dir);
    expect(inspectionCacheEnv({ XDG_CACHE_HOME: home })).toEqual({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: dir });
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(inspectionCacheDir({})).toBe(join(homedir(), '.cache', 'runplane', 'inspections'));
  });

  it("given RUNPLANE_TOOLS_INSPECTION_CACHE_DIR already set (a folder, or empty: off), the caller's choice wins", () => {
    expect(inspectionCacheEnv({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '/var/cache/other' })).toEqual({});
    expect(inspectionCacheEnv({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '' })).toEqual({});
  });

  it('given that folder is not private (someone made it open), then it is off and says why: the stack still starts', () => {
    const home = cacheHome();
    mkdirSync(join(home, 'runplane', 'inspections'), { recursive: true });
    chmodSync(join(home, 'runplane', 'inspections'), 0o777);
    const reasons: string[] = [];
    expect(inspectionCacheEnv({ XDG_CACHE_HOME: home }, (r) => reasons.push(r))).toEqual({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '' });
    expect(reasons).toEqual([
      `the tools' inspection folder ${join(home, 'runplane', 'inspections')} is off: others may use it (mode 777; 700 is needed)`,
    ]);
  });
});
