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
  ['process', 'console', 'URL', 'Buffer', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance', 'fetch'].map((name) => [
    name,
    'readonly',
  ]),
);

/** What the Run viewer's browser module uses of a browser's globals. */
const browserGlobals = Object.fromEntries(
  [
    'document',
    'window',
    'location',
    'sessionStorage',
    'fetch',
    'URL',
    'URLSearchParams',
    'TextDecoderStream',
    'AbortController',
    'Node',
    'console',
    'setTimeout',
    'clearTimeout',
    'setInterval',
  ].map((name) => [name, 'readonly']),
);

export default tseslint.config(
  {
    ignores: ['**/dist/**', '**/node_modules/**', '.nx/**', '.runplane/**', 'coverage/**'],
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
    // The Run viewer's browser module (apps/publication/viewer): a browser's globals, not Node's.
    files: ['apps/publication/viewer/**/*.js'],
    languageOptions: { sourceType: 'module', globals: browserGlobals },
  },
);
