/**
 * The suites that check figures against the real issuer files in `<repo root>/../shared/data/etf-holdings`
 * (read in place, never copied). Missing, they do not skip silently: each registers one failing
 * test that says where the folder was looked for and how to run without it
 * (`RUNPLANE_TESTS_WITHOUT_SHARED=1` skips them, saying so in the test name).
 */
import { existsSync } from 'node:fs';
import { describe, it } from '@jest/globals';
import { sharedDataDir } from '@runplane/holdings';

/** Where the shared issuer files are, or null when absent. */
export const SHARED_DATA_DIR: string | null = (() => {
  const dir = sharedDataDir();
  return dir !== null && existsSync(dir) ? dir : null;
})();

const optedOut = process.env.RUNPLANE_TESTS_WITHOUT_SHARED === '1';
const missing = `the shared issuer files were not found at ${sharedDataDir() ?? '<repo root>/../shared/data/etf-holdings'}: clone the project beside ../shared (as CI does), or set RUNPLANE_TESTS_WITHOUT_SHARED=1 to skip the suites that need them`;

/**
 * `describe` for a suite that needs the shared files: the suite itself when they are present; else
 * one failing test naming what is missing, or, with `RUNPLANE_TESTS_WITHOUT_SHARED=1`, a skipped suite.
 */
export function describeWithSharedData(name: string, body: (dir: string) => void): void {
  if (SHARED_DATA_DIR !== null) return describe(`${name} (${SHARED_DATA_DIR})`, () => body(SHARED_DATA_DIR));
  if (optedOut) return describe.skip(`${name} — SKIPPED (RUNPLANE_TESTS_WITHOUT_SHARED=1)`, () => it('needs ../shared', () => undefined));
  describe(name, () =>
    it('needs the shared issuer files', () => {
      throw new Error(missing);
    }),
  );
}

/** `it` for one test that needs the shared files, with the same rule as {@link describeWithSharedData}. */
export function itWithSharedData(name: string, fn: (dir: string) => Promise<void>, timeoutMs?: number): void {
  if (SHARED_DATA_DIR !== null) return it(name, () => fn(SHARED_DATA_DIR), timeoutMs);
  if (optedOut) return it.skip(`${name} — SKIPPED (RUNPLANE_TESTS_WITHOUT_SHARED=1)`, () => undefined);
  it(name, () => {
    throw new Error(missing);
  });
}
