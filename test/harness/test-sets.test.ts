/**
 * The two halves of `npm test` (`npm run test:unit`, `npm run test:e2e`: jest.config.js
 * `RUNPLANE_TEST_SET`) split the suite's files exactly: every file in one of them, none in both,
 * each set chosen under the checkout's root. A pattern on the absolute path (the scripts'
 * `--testPathPatterns '/(apps|libs)/[^/]+/test/'` before) also matched a checkout cloned under a
 * folder such as `/srv/apps/x/test/`, where every file counted as a unit test and none as the rest.
 */
import { describe, expect, it } from '@jest/globals';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from '@runplane/devstack';

const root = repoRoot();

/** The test files Jest selects with `RUNPLANE_TEST_SET=set` (unset when null), absolute paths. */
function listTests(set: string | null): { status: number | null; files: string[]; stderr: string } {
  const env: NodeJS.ProcessEnv = { ...process.env, NODE_OPTIONS: '--experimental-vm-modules' };
  delete env.RUNPLANE_TEST_SET;
  if (set !== null) env.RUNPLANE_TEST_SET = set;
  const r = spawnSync(process.execPath, [join(root, 'node_modules/jest/bin/jest.js'), '--listTests'], { cwd: root, env, encoding: 'utf8' });
  return { status: r.status, files: r.stdout.split('\n').filter((l) => l.endsWith('.test.ts')), stderr: r.stderr };
}

describe('RUNPLANE_TEST_SET', () => {
  it('unit and e2e partition every test file, unit the projects’ own tests, e2e the rest', () => {
    const all = listTests(null).files;
    const unit = listTests('unit').files;
    const e2e = listTests('e2e').files;
    expect(all.length).toBeGreaterThan(150);
    expect(unit.length).toBeGreaterThan(100);
    expect(e2e.length).toBeGreaterThan(40);
    expect(new Set([...unit, ...e2e])).toEqual(new Set(all));
    expect(unit.filter((f) => e2e.includes(f))).toEqual([]);
    const rel = (f: string) => f.slice(root.length + 1);
    expect(unit.map(rel).filter((f) => !/^(apps|libs)\/[^/]+\/test\//.test(f))).toEqual([]);
    expect(e2e.map(rel).filter((f) => !f.startsWith('test/'))).toEqual([]);
    expect(e2e.map(rel)).toContain('test/harness/test-sets.test.ts');
  }, 60_000);

  it('npm run test:unit and test:e2e choose their set by RUNPLANE_TEST_SET alone', () => {
    const scripts = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts['test:unit']).toContain('RUNPLANE_TEST_SET=unit ');
    expect(scripts['test:e2e']).toContain('RUNPLANE_TEST_SET=e2e ');
    for (const name of ['test:unit', 'test:e2e']) expect(scripts[name]).not.toMatch(/--testPath|--roots|--selectProjects/);
  });

  it('an unknown set fails naming the sets', () => {
    const r = listTests('units');
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('RUNPLANE_TEST_SET=units is not a test set: unit, e2e or all (or unset)');
  }, 60_000);
});
