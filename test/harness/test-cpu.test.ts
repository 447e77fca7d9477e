/**
 * `RUNPLANE_TEST_CPU_FILE` (the suite's test environment, test/support/code-cache-environment.js):
 * a Jest run with it set appends one line per test file, the file's path under the checkout, the
 * worker's CPU over it, its reaped children's and its wall time; `scripts/test-cpu.js` sums them up
 * (docs/development.md).
 */
import { afterAll, describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from '@runplane/devstack';

const root = repoRoot();
const dir = mkdtempSync(join(tmpdir(), 'rp-test-cpu-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A pure test file of a few hundred milliseconds. */
const FILE = 'apps/admission/test/budget.test.ts';

/** Jest over {@link FILE} in band, with `RUNPLANE_TEST_CPU_FILE` set to `cpuFile`. */
function jestWith(cpuFile: string) {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '--experimental-vm-modules', RUNPLANE_TEST_SET: 'unit' };
  env.RUNPLANE_TEST_CPU_FILE = cpuFile;
  return spawnSync(process.execPath, [join(root, 'node_modules/jest/bin/jest.js'), '-i', FILE], { cwd: root, env, encoding: 'utf8' });
}

describe('RUNPLANE_TEST_CPU_FILE', () => {
  it('given a file, then each test file adds one line with its CPU and wall time, and test-cpu.js sums them up', () => {
    const cpuFile = join(dir, 'cpu.jsonl');
    const r = jestWith(cpuFile);
    expect(r.status).toBe(0);
    const lines = readFileSync(cpuFile, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(1);
    const line = JSON.parse(lines[0]!) as { file: string; ownMs: number; childrenMs: number; wallMs: number };
    expect(line.file).toBe(FILE);
    expect(line.ownMs).toBeGreaterThan(0);
    expect(line.childrenMs).toBeGreaterThanOrEqual(0);
    expect(line.wallMs).toBeGreaterThanOrEqual(line.ownMs / 2); // one thread does most of a worker's work
    const sum = spawnSync(process.execPath, [join(root, 'scripts/test-cpu.js'), cpuFile], { encoding: 'utf8' });
    expect(sum.status).toBe(0);
    expect(sum.stdout).toMatch(/^1 files: CPU \d+\.\d s \(Jest workers \d+\.\d s, their children \d+\.\d s\)\n/);
    expect(sum.stdout).toContain(FILE);
  }, 60_000);

  it('test-cpu.js without a file says how to call it', () => {
    const r = spawnSync(process.execPath, [join(root, 'scripts/test-cpu.js')], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('usage: node scripts/test-cpu.js <cpu.jsonl> [--top N]');
  }, 60_000);
});
