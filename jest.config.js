/**
 * One root configuration over every project (STACK-NOTES: one Jest process beats one per project on
 * 2 cores). `npm test` (scripts/test.sh) runs it twice, the projects' own tests with 6 workers and
 * then the rest with 3; `maxWorkers` below is what a bare `npx jest` (and `npm test -- <args>`)
 * uses. TypeScript goes through @swc/jest as native ESM (Nest 12 is ESM-only), so the scripts set
 * NODE_OPTIONS=--experimental-vm-modules.
 */
/**
 * The test files of each set, under `<rootDir>` (a pattern on the absolute path, as
 * `--testPathPatterns` takes, would also match a clone under, say, `/srv/apps/x/test/`):
 * `RUNPLANE_TEST_SET=unit` the projects' own tests (`npm run test:unit`), `e2e` every other file
 * (`npm run test:e2e`), unset every file.
 */
const TEST_SETS = {
  unit: ['<rootDir>/apps/*/test/**/*.test.ts', '<rootDir>/libs/*/test/**/*.test.ts'],
  e2e: ['<rootDir>/test/**/*.test.ts'],
  all: ['<rootDir>/apps/*/test/**/*.test.ts', '<rootDir>/libs/*/test/**/*.test.ts', '<rootDir>/test/**/*.test.ts'],
};

function unknownTestSet(name) {
  throw new Error(`RUNPLANE_TEST_SET=${name} is not a test set: unit, e2e or all (or unset)`);
}

export default {
  testEnvironment: '<rootDir>/test/support/code-cache-environment.js',
  extensionsToTreatAsEsm: ['.ts'],
  transform: {
    '^.+\\.ts$': [
      '@swc/jest',
      {
        jsc: {
          parser: { syntax: 'typescript', decorators: true },
          transform: { legacyDecorator: true, decoratorMetadata: true },
          target: 'es2023',
        },
        module: { type: 'es6' },
      },
    ],
  },
  moduleNameMapper: {
    '^@runplane/app-([^/]+)$': '<rootDir>/apps/$1/src/index.ts',
    '^@runplane/([^/]+)$': '<rootDir>/libs/$1/src/index.ts',
    '^@runplane/([^/]+)/([^/]+)$': '<rootDir>/libs/$1/src/$2.ts',
    '^(\\.{1,2}/.*)\\.js$': '$1',
  },
  testMatch: TEST_SETS[process.env.RUNPLANE_TEST_SET ?? 'all'] ?? unknownTestSet(process.env.RUNPLANE_TEST_SET),
  // the suite's shared nats-server (the supported release; sets NATS_URL for every test file)
  globalSetup: '<rootDir>/test/support/global-setup.js',
  globalTeardown: '<rootDir>/test/support/global-teardown.js',
  // the longest files first, also in a fresh clone (test/support/test-costs.json)
  testSequencer: '<rootDir>/test/support/sequencer.js',
  maxWorkers: 2,
  // How long a worker may take to exit once its files are done before Jest kills it and prints "A
  // worker process has failed to exit gracefully". Jest's 500 ms is too short here: measured on a
  // loaded 2-core machine, every unit worker's event loop was empty when Jest ended it (no handle
  // but its own pipes, no timer), yet the process took 0.6-1.4 s to end (the teardown of a worker
  // that has loaded ~30 files' modules), so all six were killed after every full unit run and the
  // warning pointed at a leak that was not there (docs/development.md).
  workerGracefulExitTimeout: 5000,
  testTimeout: 120000,
};
