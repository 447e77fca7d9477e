// `npm run build`: compiles every workspace (apps/*, libs/*, migrations) into its dist/ with the
// TypeScript solution builder (`tsc -b` in one process, through the project references), type errors
// failing the build. Two properties the services, the tests and the CLI rely on:
//   - nothing changed, nothing written: the up-to-date check reads each project's tsbuildinfo and
//     the sources' times, and an output whose new text equals the file on disk is not rewritten
//     (same inode, same mtime);
//   - no moment without a file: a changed output is written beside its target and renamed over it
//     (rename(2) is atomic), so another process importing from dist/ meanwhile sees the old file or
//     the new one, never a missing or half-written one.
// When every project's tsbuildinfo is newer than all of its inputs (see `upToDate`), it exits without
// loading TypeScript (about 5 s of a `npm run runplane -- <command>` on a busy 2-core machine).
// Then it makes the services' bundles that are out of date (scripts/bundle-services.mjs: each service
// runs from one file, apps/<service>/dist/main.bundle.js), under the same two properties.
// Exit code 1 with the diagnostics on stderr when a project does not compile or a bundle cannot be made.
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import module from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundlesUpToDate, makeBundles } from './bundle-services.mjs';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** The workspaces to build: every apps/<name>, libs/<name> and migrations with a tsconfig.json. */
function projects() {
  const dirs = ['migrations'];
  for (const parent of ['libs', 'apps']) {
    for (const name of readdirSync(join(root, parent)).sort()) dirs.push(join(parent, name));
  }
  return dirs.map((dir) => join(root, dir, 'tsconfig.json')).filter((file) => existsSync(file));
}

/** The newest mtime (ms) of `path` and, for a directory, of everything under it (a deletion changes its directory's mtime). */
function newest(path) {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (stat === undefined) return Number.POSITIVE_INFINITY;
  let time = stat.mtimeMs;
  if (stat.isDirectory()) {
    for (const name of readdirSync(path)) time = Math.max(time, newest(join(path, name)));
  }
  return time;
}

/**
 * True when the buildinfo was written by this TypeScript `version` and records nothing left to do:
 * no errors, no pending check or emit (the fields `tsc -b` looks at before calling a project out of
 * date; a failed build leaves them, so it is not taken for a finished one).
 */
function settled(buildInfoFile, version) {
  let info;
  try {
    info = JSON.parse(readFileSync(buildInfoFile, 'utf8'));
  } catch {
    return false;
  }
  const pending = ['changeFileSet', 'semanticDiagnosticsPerFile', 'emitDiagnosticsPerFile', 'affectedFilesPendingEmit'];
  return (
    info.version === version &&
    !info.errors &&
    !info.checkPending &&
    info.pendingEmit === undefined &&
    pending.every((key) => !(Array.isArray(info[key]) && info[key].length > 0))
  );
}

/**
 * True when no project needs the compiler: each one's dist/tsconfig.tsbuildinfo exists and is newer
 * than its src/ (files and directories), its tsconfig.json and package.json, tsconfig.base.json and
 * the installed TypeScript. The same rule `tsc -b` applies first ("newest input is older than
 * output"); anything else (a stale or missing buildinfo) goes to the compiler.
 */
function upToDate(configs) {
  const { version } = JSON.parse(readFileSync(join(root, 'node_modules/typescript/package.json'), 'utf8'));
  const shared = Math.max(newest(join(root, 'tsconfig.base.json')), newest(join(root, 'node_modules/typescript/package.json')));
  return configs.every((config) => {
    const dir = dirname(config);
    const buildInfoFile = join(dir, 'dist/tsconfig.tsbuildinfo');
    const built = statSync(buildInfoFile, { throwIfNoEntry: false });
    if (built === undefined) return false;
    const inputs = Math.max(shared, newest(config), newest(join(dir, 'package.json')), newest(join(dir, 'src')));
    return inputs < built.mtimeMs && settled(buildInfoFile, version);
  });
}

/** Writes `data` to `file` unless it already holds exactly that text; a new text goes in by rename. */
function writeIfChanged(file, data) {
  try {
    if (readFileSync(file, 'utf8') === data) return;
  } catch {
    // missing or unreadable: write it
  }
  mkdirSync(dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  try {
    writeFileSync(temporary, data);
    renameSync(temporary, file);
  } catch (error) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

// Arguments: project directories to build (default: all); --force re-emits every file of them (a
// file whose text is unchanged is still left as it is); --verbose prints the compiler's status.
const args = process.argv.slice(2);
const force = args.includes('--force');
const verbose = args.includes('--verbose');
const chosen = args.filter((arg) => !arg.startsWith('--')).map((dir) => join(resolve(dir), 'tsconfig.json'));
const configs = chosen.length > 0 ? chosen : projects();
/** Makes the bundles that are out of date (all with --force); exit code 1 with esbuild's messages when one cannot be made. */
async function bundle() {
  try {
    // --force on chosen projects leaves the bundles to their up-to-date check
    const made = await makeBundles(writeIfChanged, force && chosen.length === 0);
    if (verbose && made.length > 0) process.stdout.write(`bundled: ${made.join(', ')}\n`);
  } catch (error) {
    process.stderr.write(`build: a service bundle could not be made: ${error.message}\n`);
    process.exit(1);
  }
}

if (!force && upToDate(configs)) {
  if (!bundlesUpToDate()) await bundle();
  process.exit(0);
}

// Node's compile cache makes loading TypeScript's 9 MB compiler much cheaper from the second run on.
module.enableCompileCache?.();
const { default: ts } = await import('typescript');

const formatHost = {
  getCanonicalFileName: (name) => name,
  getCurrentDirectory: () => root,
  getNewLine: () => '\n',
};
const report = (diagnostic) => process.stderr.write(ts.formatDiagnosticsWithColorAndContext([diagnostic], formatHost));
const status = (diagnostic) => {
  if (verbose) process.stdout.write(`${ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n')}\n`);
};

const host = ts.createSolutionBuilderHost(ts.sys, undefined, report, status);
host.writeFile = (file, data) => writeIfChanged(file, data);
const builder = ts.createSolutionBuilder(host, configs, { verbose, force });
const exitStatus = builder.build();
if (exitStatus !== ts.ExitStatus.Success) {
  process.stderr.write('build: TypeScript reported errors (above)\n');
  process.exit(1);
}
await bundle();
