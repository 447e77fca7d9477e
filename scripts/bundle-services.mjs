// The services' bundles, made by `npm run build` after TypeScript (scripts/build.mjs): each service
// runs from one file, apps/<service>/dist/main.bundle.js, made with esbuild from its compiled
// dist/main.js and everything it imports (the workspace libraries and most of node_modules).
//
// Why: a service's module graph is about 2,200 files. Loading them one by one (resolving each
// specifier: stat, package.json reads, realpath; then reading and translating the file) was about
// half of a service's start-up CPU; one file cuts a stack's start-up CPU by about 30 %
// (docs/performance.md, "Start-up"). The worker threads a service starts load bundles too:
// `heartbeat-worker.bundle.js` beside every service's main bundle (libs/eventlog heartbeats.ts looks
// for it there first) and the tools' `tool-worker.bundle.js` (apps/tools executor.ts).
//
// What stays outside a bundle (`EXTERNAL`, loaded from node_modules at run time): packages that
// find files next to their own code (piscina starts its worker from its own folder), that
// load drivers by name (pg's optional pg-native) or are big and only loaded by some commands
// (PGlite and its MikroORM driver, ExcelJS), and the optional packages Nest and Terminus ask for by name and are
// not installed (their `require` fails as it does without a bundle and they go without). A package
// that imports Nest itself (nestjs-pino) must stay inside: outside, it would load a second copy of
// Nest from node_modules, whose classes, the keys of Nest's dependency injection, are not the
// bundle's, and the service would not start ("Nest can't resolve dependencies of the LoggerModule").
//
// The two properties of scripts/build.mjs hold for bundles too: a bundle whose inputs did not change
// is not made again and not rewritten (each bundle's inputs and their mtimes are recorded beside it
// in `<bundle>.inputs.json`), and a changed bundle is written beside its target and renamed over
// it, so a service starting meanwhile loads the old bundle or the new one, never half of one.
import { createHash } from 'node:crypto';
import { tokenizer } from 'acorn';
import { builtinModules } from 'node:module';
import { readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The services that run from a bundle (deploy/k8s and devstack start `apps/<name>/dist/main.bundle.js`). */
export const BUNDLED_SERVICES = ['admission', 'runtime', 'tools', 'publication', 'recovery', 'lifecycle', 'projector'];

/** Packages left out of every bundle (see the header). */
export const EXTERNAL = [
  // MikroORM itself is bundled (the projector's): it is given its driver, entities and migrations
  // as code, and its optional extensions (seeder, entity generator) it looks up with
  // `import.meta.resolve` and goes without. Loading it from node_modules made the projector's
  // bundle take 770-1,125 ms of CPU to load, against 566-793 bundled (docs/performance.md, "Start-up").
  // `pg` stays outside by name, so the bundled driver uses the top-level `pg` (8.23.1 today), as the
  // projections' own queries do, not the copy @mikro-orm/postgresql pins in its own node_modules
  // (8.23.0), which MikroORM loaded from node_modules (admission's reads, the CLI) still uses.
  '@mikro-orm/pglite',
  '@electric-sql/*',
  'pg',
  'pg-native',
  'piscina',
  // a native addon (libsodium, the readers' signature checks: libs/eventlog ed25519.ts), loaded
  // from node_modules with its prebuilt binary
  'sodium-native',
  'exceljs',
  // optional packages of Nest (microservices transports, websockets, validation) and Terminus (ORMs)
  '@nestjs/websockets',
  '@nestjs/websockets/*',
  '@nestjs/platform-socket.io',
  '@grpc/*',
  'kafkajs',
  'mqtt',
  'amqplib',
  'amqp-connection-manager',
  'ioredis',
  'nats',
  '@fastify/*',
  'class-transformer',
  'class-transformer/*',
  'class-validator',
  'cache-manager',
  '@nestjs/typeorm',
  '@nestjs/sequelize',
  '@nestjs/mongoose',
  '@mikro-orm/nestjs',
  'typeorm',
  'sequelize',
  'mongoose',
  '@prisma/client',
];

/**
 * Workspace packages a service imports only when first needed (`import()`), left out of its bundle
 * and loaded from their own `dist/` then: inside, the packages they import from `node_modules`
 * (which an ES module bundle imports at its top) would load at start-up. Admission reads the
 * projections (MikroORM and its PostgreSQL driver) only to answer some reads: bundled, they cost
 * it about 20 MiB of idle RSS.
 */
const LAZY = { admission: ['@runplane/projections'] };

/**
 * Packages every service imports only when first needed: the OpenTelemetry SDK, loaded when
 * tracing is switched on (libs/service-kit tracing.ts); bundled, the gRPC client it imports loaded
 * at every start-up (about 6-8 MiB of idle RSS per service).
 */
const LAZY_EVERYWHERE = ['@opentelemetry/sdk-node'];

/**
 * A bundle's first line: CommonJS code inside an ES module bundle still calls `require` (Node
 * built-ins, the external packages), so the bundle defines it for its own location.
 */
const BANNER = "import { createRequire as __runplaneCreateRequire } from 'node:module'; const require = __runplaneCreateRequire(import.meta.url);";

/**
 * What esbuild puts where the code names `__RUNPLANE_CODE_VERSION__` (libs/holdings
 * inspection-store.ts), replaced in the output by the sha256 of the bundle's own text (with this
 * placeholder in it): the bundle knows the version of the code it is, whatever happens to the file
 * on disk after it was loaded. 64 characters, like the hash.
 */
export const CODE_VERSION_PLACEHOLDER = 'runplane-code-version-placeholder-'.padEnd(64, '0');

/** `text` with {@link CODE_VERSION_PLACEHOLDER} replaced by the sha256 (hex) of `text`. */
function withCodeVersion(text) {
  if (!text.includes(CODE_VERSION_PLACEHOLDER)) return text;
  const version = createHash('sha256').update(text).digest('hex');
  return text.replaceAll(CODE_VERSION_PLACEHOLDER, version);
}

/**
 * `text` with every character outside ASCII written as a `\uXXXX` escape (one per UTF-16 code
 * unit). esbuild escapes them in strings and identifiers but not in the comments it keeps, in
 * regular expression literals or in tagged templates, and one such character makes Node decode the
 * whole bundle into a two-byte string: about 15 ms more CPU per process start for the lifecycle's
 * 5.4 MB bundle (alternated, 16 starts each, with the compile cache on) and a source string twice
 * the size that V8 keeps. An escape is only text in a comment, and in a regular expression it
 * matches the same character (a pair of surrogate escapes is one code point under the `u` flag, two
 * code units without it, as the literal was). Where it would not mean the same, the bundle is
 * refused instead: the text is tokenized (acorn) to find those places.
 * @throws Error naming the bundle and the offset when a character outside ASCII stands in a template
 *   (its raw text, which a tag reads, would change), right after a backslash outside a comment (an
 *   identity escape would become a backslash and `u` text), or is U+2028 or U+2029 (in a comment the
 *   literal ends the line and an escape would not).
 */
export function asciiOnly(text, out) {
  if (!/[\u0080-\uffff]/.test(text)) return text;
  const refuse = (at, why) => {
    throw new Error(
      `${out}: a character outside ASCII at offset ${at} ${why}: write it as an escape in the source, or keep the package out of the bundle`,
    );
  };
  const lineBreak = /[\u2028\u2029]/.exec(text);
  if (lineBreak) refuse(lineBreak.index, 'is a line or paragraph separator (U+2028, U+2029)');
  for (const token of tokenizer(text, { ecmaVersion: 'latest', sourceType: 'module', allowHashBang: true })) {
    const source = text.slice(token.start, token.end);
    const at = source.search(/[\u0080-\uffff]/);
    if (at < 0) continue;
    if (token.type.label === 'template' || token.type.label === 'invalidTemplate') refuse(token.start + at, 'is in a template literal');
    const escaped = /\\[\u0080-\uffff]/.exec(source);
    if (escaped) refuse(token.start + escaped.index, 'follows a backslash');
  }
  return text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Packages that a bundled dependency imports at its top but that no Runplane service ever calls,
 * replaced in every bundle by a function that throws naming the package: `multer`, which
 * `@nestjs/platform-express` imports for its file-upload interceptors (no Runplane route takes a
 * file), with its own copies of type-is, mime-types and mime-db, about 30 ms of each process's
 * start (docs/performance.md, "Start-up").
 */
export const NEVER_CALLED = ['multer'];

/** The esbuild plugin that puts {@link NEVER_CALLED}'s stand-ins in place of those packages. */
const neverCalled = {
  name: 'never-called',
  setup(build) {
    const filter = new RegExp(`^(${NEVER_CALLED.map((p) => p.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')).join('|')})$`);
    build.onResolve({ filter }, (args) => ({ path: args.path, namespace: 'never-called' }));
    build.onLoad({ filter: /.*/, namespace: 'never-called' }, (args) => ({
      contents: `module.exports = function neverCalled() { throw new Error(${JSON.stringify(`${args.path} is not part of the Runplane service bundles (scripts/bundle-services.mjs NEVER_CALLED)`)}); };`,
      loader: 'js',
    }));
  },
};

/** Node's built-in modules, with and without the `node:` scheme. */
const BUILTINS = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));

/**
 * An esbuild plugin: every `import ... from '<built-in>'` statement in the bundled code loads the
 * built-in through `require` (the banner's), as the bundled CommonJS packages already do, instead
 * of an ES module import. Node builds an ES module facade of a built-in by reading every export,
 * which runs the lazy getters: `node:http`'s loads Node's whole internal undici (fetch) in a service
 * that never fetches. Measured on the lifecycle's bundle (loading and evaluating it, then exiting on
 * a bad setting; 8 starts each, alternated): about 50 ms of CPU less per process start, of about
 * 500 (docs/performance.md, "Start-up"). A dynamic `import()` of a built-in is left as it is. Two things
 * differ from an ES module import, neither used by any bundle: a named import of a name the built-in
 * lacks is `undefined` instead of a link error, and an entry file's `export * from` a built-in would
 * export nothing.
 */
const builtinsByRequire = {
  name: 'builtins-by-require',
  setup(build) {
    build.onResolve({ filter: /^[a-z0-9_:/]+$/ }, (args) => {
      if (!BUILTINS.has(args.path)) return undefined;
      if (args.kind === 'require-call' || args.namespace === 'builtin-by-require') return { path: args.path, external: true };
      if (args.kind !== 'import-statement') return undefined;
      return { path: args.path, namespace: 'builtin-by-require' };
    });
    build.onLoad({ filter: /.*/, namespace: 'builtin-by-require' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/** Every bundle `npm run build` makes: `{ entry, out }`, paths relative to the repository root. */
export function bundles() {
  const list = [];
  for (const name of BUNDLED_SERVICES) {
    const dist = `apps/${name}/dist`;
    list.push({ entry: `${dist}/main.js`, out: `${dist}/main.bundle.js`, lazy: LAZY[name] });
    list.push({ entry: 'libs/eventlog/dist/heartbeat-worker.js', out: `${dist}/heartbeat-worker.bundle.js` });
  }
  list.push({ entry: 'apps/tools/dist/tool-worker.js', out: 'apps/tools/dist/tool-worker.bundle.js' });
  return list;
}

/** mtime in ms, or null when the file is missing. */
function mtimeOf(file) {
  return statSync(join(root, file), { throwIfNoEntry: false })?.mtimeMs ?? null;
}

/**
 * The files whose change makes a bundle stale: the workspace files it was made from, the
 * `package.json` of each workspace they belong to (its `exports` and `imports` steer the bundling),
 * the installed packages (npm rewrites node_modules/.package-lock.json on every install; a hand edit
 * inside node_modules is not seen: `npm run build -- --force` bundles again) and this file.
 */
function watched(workspaceInputs) {
  const manifests = new Set();
  for (const file of workspaceInputs) {
    const [top, name] = file.split('/');
    if ((top === 'apps' || top === 'libs') && name) manifests.add(`${top}/${name}/package.json`);
    else if (top === 'migrations') manifests.add('migrations/package.json');
  }
  return [...workspaceInputs, ...[...manifests].sort(), 'node_modules/.package-lock.json', 'scripts/bundle-services.mjs'];
}

/**
 * True when `out` exists and each file its record lists (`<out>.inputs.json`: every watched file
 * with its mtime when the bundle was made) still has exactly that mtime: a newer one (an edit) and
 * an older one (a file put back from a copy or a cache) both make it stale.
 */
export function bundleUpToDate(out) {
  let record;
  try {
    record = JSON.parse(readFileSync(join(root, `${out}.inputs.json`), 'utf8'));
    statSync(join(root, out));
  } catch {
    return false;
  }
  const times = record?.inputs;
  if (!times || typeof times !== 'object' || Array.isArray(times) || Object.keys(times).length === 0) return false;
  return Object.entries(times).every(([file, mtime]) => typeof mtime === 'number' && mtimeOf(file) === mtime);
}

/** True when every bundle is up to date ({@link bundleUpToDate}). */
export function bundlesUpToDate() {
  return bundles().every(({ out }) => bundleUpToDate(out));
}

/**
 * Makes every bundle that is not up to date, writing each output with `write(file, text)` (the
 * build's write-if-changed-by-rename), and its inputs record beside it.
 * @param force make every bundle again, up to date or not.
 * @returns the bundles made.
 * @throws Error with esbuild's messages when an entry cannot be bundled.
 */
export async function makeBundles(write, force = false) {
  const stale = bundles().filter(({ out }) => force || !bundleUpToDate(out));
  if (stale.length === 0) return [];
  const esbuild = await import('esbuild');
  for (const { entry, out, lazy } of stale) {
    const started = Date.now();
    let result;
    try {
      result = await esbuild.build({
        absWorkingDir: root,
        entryPoints: [entry],
        outfile: out,
        bundle: true,
        platform: 'node',
        format: 'esm',
        target: 'node24',
        external: [...EXTERNAL, ...LAZY_EVERYWHERE, ...(lazy ?? [])],
        banner: { js: BANNER },
        plugins: [builtinsByRequire, neverCalled],
        define: { __RUNPLANE_CODE_VERSION__: JSON.stringify(CODE_VERSION_PLACEHOLDER) },
        // `keepNames`: Nest's dependency injection and the logs use class and function names
        keepNames: true,
        // whitespace and syntax minified, names kept (Nest's injection and the stack traces read
        // them): a bundle of about 70 % the size is less source text for each process to read,
        // decode, scan and keep in its heap (docs/performance.md, "Minified bundles")
        minifyWhitespace: true,
        minifySyntax: true,
        metafile: true,
        write: false,
        logLevel: 'silent',
      });
    } catch (error) {
      const messages = (error.errors ?? []).map((m) => `${m.location ? `${m.location.file}:${m.location.line}: ` : ''}${m.text}`);
      throw new Error(`${out} from ${entry}: ${messages.length > 0 ? messages.join('; ') : error.message}`, { cause: error });
    }
    for (const file of result.outputFiles) write(file.path, withCodeVersion(asciiOnly(file.text, out)));
    const inputs = Object.keys(result.metafile.inputs)
      .filter((file) => !file.includes('node_modules/'))
      .map((file) => relative(root, resolve(root, file)));
    // each watched file's mtime; one changed while esbuild was reading (at or after `started`, with
    // a margin for the file system's coarser clock) may be in the bundle as it was before: it is
    // recorded as 0, so the next build bundles again
    const times = {};
    for (const file of watched(inputs).sort()) {
      const mtime = mtimeOf(file);
      if (mtime !== null) times[file] = mtime >= started - 50 ? 0 : mtime;
    }
    write(join(root, `${out}.inputs.json`), `${JSON.stringify({ esbuild: esbuild.version, inputs: times }, null, 1)}\n`);
  }
  return stale.map(({ out }) => out);
}
