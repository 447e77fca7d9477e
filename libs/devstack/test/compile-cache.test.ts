/**
 * The processes a local stack starts reuse Node's module compile cache (`compileCacheEnv`): a
 * process given that environment really has the cache on, in Node's default folder, and the
 * caller's own choice (a folder, or `NODE_DISABLE_COMPILE_CACHE`) wins. Likewise the tools'
 * data-file inspections (`inspectionCacheEnv`): one folder per OS user, unless the caller chose.
 */
import { describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { tmpdir } from 'node:os';
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
  it("given an environment without a choice, names this user's folder under the OS temporary folder", () => {
    const dir = join(tmpdir(), `runplane-inspection-cache-${process.getuid!()}`);
    expect(inspectionCacheEnv({})).toEqual({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: dir });
    expect(inspectionCacheDir()).toBe(dir);
  });

  it("given RUNPLANE_TOOLS_INSPECTION_CACHE_DIR already set (a folder, or empty: off), the caller's choice wins", () => {
    expect(inspectionCacheEnv({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '/var/cache/other' })).toEqual({});
    expect(inspectionCacheEnv({ RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '' })).toEqual({});
  });
});
