/**
 * ESLint flat config: typescript-eslint's type-aware recommended rules on every project's sources
 * and on the tests. Type information comes from the projects' own tsconfigs (and tsconfig.test.json
 * for the tests), so `npm run lint` needs the declarations `npm run build` writes.
 * Formatting is Prettier's job (`npm run format:check`), not ESLint's.
 */
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const root = import.meta.dirname;

/** Node's globals for the plain JavaScript files (the TypeScript ones get them from @types/node). */
const nodeGlobals = Object.fromEntries(
  ['process', 'console', 'URL', 'Buffer', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance'].map((name) => [
    name,
    'readonly',
  ]),
);

export default tseslint.config(
  {
    ignores: ['**/dist/**', '**/node_modules/**', '.nx/**', '.runplane/**', 'coverage/**'],
  },
  {
    // TEMP: rewritten in the decider refactor. Remove this block after merging, then fix what
    // `npm run lint` reports in these files.
    ignores: [
      'apps/*/src/decide.ts',
      'apps/*/src/*.module.ts',
      'apps/runtime/src/*.ts',
      'apps/tools/src/*.ts',
      'libs/eventlog/src/*',
      'libs/run-facts/src/*',
      'libs/service-kit/src/index.ts',
      'apps/*/test/decide.test.ts',
      'test/support/history.ts',
      'apps/admission/src/admission.controller.ts',
      'apps/publication/src/observers.controller.ts',
      'libs/client/src/index.ts',
      'apps/cli/src/*',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        // Explicit projects rather than the project service: test files live outside every
        // project's `include` and are covered by tsconfig.test.json only.
        project: ['./apps/*/tsconfig.json', './libs/*/tsconfig.json', './migrations/tsconfig.json', './tsconfig.test.json'],
        tsconfigRootDir: root,
      },
    },
    rules: {
      // `_`-prefixed parameters and variables are deliberately unused (handler signatures, rest-omit).
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      // An async function that satisfies a Promise-returning signature without awaiting (fakes,
      // no-op stops) is normal here; no-floating-promises and no-misused-promises catch the hazards.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // Plain JavaScript (configs, scripts): no type information.
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: nodeGlobals },
  },
  {
    // TEMP: rewritten in the decider refactor. Not itself rewritten, but it imports
    // test/support/history.ts and is therefore outside tsconfig.test.json until that file is
    // back in; linted without type information meanwhile. Remove after merging.
    files: ['libs/projections/test/embedded.test.ts'],
    extends: [tseslint.configs.disableTypeChecked],
  },
);
