/**
 * A build with nothing changed must leave every dist/ file as it is (same inode, same mtime): the
 * services, the tests and the CLI import from dist/ while another `npm run build` may be running, and
 * a build that deletes and re-creates its outputs (as Nx did, restoring them from its cache) lets
 * one of them find a file missing (ERR_MODULE_NOT_FOUND). Two paths of scripts/build.mjs:
 *   - the quick path (every project's buildinfo newer than its inputs): checked on every project;
 *   - the compiler's emit: one small project (migrations) rebuilt with --force, so TypeScript emits
 *     every file again; each text equals the one on disk, so none may be rewritten.
 * The services' bundles (scripts/bundle-services.mjs, apps/<service>/dist/main.bundle.js) are
 * dist/ files too: an input of a bundle touched (a newer or an older time, the same text) makes the
 * build bundle again, and the bundle, whose text is the same, stays as it is; the next build bundles
 * nothing.
 * Needs `npm run build` first (as every test of the built apps).
 */
import { describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync, utimesSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoRoot, serviceEntry, SERVICES } from '@runplane/devstack';

const repo = repoRoot();
const run = promisify(execFile);

/** Every file under the dist/ of the given project directories, with its inode, mtime (ms) and size. */
function snapshot(projectDirs: string[]): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else {
        const stat = statSync(path);
        files.set(path, `${stat.ino} ${stat.mtimeMs} ${stat.size}`);
      }
    }
  };
  for (const dir of projectDirs) walk(join(repo, dir, 'dist'));
  return files;
}

function allProjects(): string[] {
  const dirs = ['migrations'];
  for (const parent of ['libs', 'apps']) for (const name of readdirSync(join(repo, parent))) dirs.push(join(parent, name));
  return dirs;
}

/** `npm run build` itself (so a change of the command is checked too), with `args` after `--`. */
async function build(...args: string[]): Promise<void> {
  const extra = args.length > 0 ? ['--', ...args] : [];
  await run('npm', ['run', 'build', '--silent', ...extra], { cwd: repo, timeout: 110_000 });
}

describe('npm run build with nothing changed', () => {
  it('rewrites no dist/ file of any project', async () => {
    await build();
    const before = snapshot(allProjects());
    expect(before.size).toBeGreaterThan(100);
    await build();
    expect(snapshot(allProjects())).toEqual(before);
  }, 120_000);

  it('re-emitting a project with the same texts rewrites none of its files', async () => {
    await build('migrations');
    const before = snapshot(['migrations']);
    expect([...before.keys()].some((file) => file.endsWith('index.js'))).toBe(true);
    await build('migrations', '--force');
    expect(snapshot(['migrations'])).toEqual(before);
  }, 120_000);

  it('an input of a bundle touched: bundled again, the bundle left as it is, then up to date', async () => {
    const out = 'apps/lifecycle/dist/main.bundle.js';
    const record = () => JSON.parse(readFileSync(join(repo, `${out}.inputs.json`), 'utf8')) as { inputs: Record<string, number> };
    const { bundleUpToDate } = (await import(join(repo, 'scripts/bundle-services.mjs'))) as { bundleUpToDate: (out: string) => boolean };
    await build();
    expect(bundleUpToDate(out)).toBe(true);
    // the bundle's own code, a library's and their package.json files are inputs
    const input = 'apps/lifecycle/dist/decide.js';
    expect(Object.keys(record().inputs)).toEqual(
      expect.arrayContaining([input, 'libs/eventlog/dist/event-log.js', 'apps/lifecycle/package.json', 'libs/eventlog/package.json']),
    );
    const recorded = record().inputs[input]!;
    const before = snapshot(['apps/lifecycle']);
    // newer (an edit), then older than recorded (a file put back from a copy): both are stale
    for (const time of [recorded + 1, recorded - 60_000]) {
      utimesSync(join(repo, input), new Date(time), new Date(time));
      expect(bundleUpToDate(out)).toBe(false);
      await build();
      expect(bundleUpToDate(out)).toBe(true);
      expect(record().inputs[input]).toBe(statSync(join(repo, input)).mtimeMs);
    }
    const after = snapshot(['apps/lifecycle']);
    const changed = [...after.keys()].filter((file) => after.get(file) !== before.get(file)).map((file) => file.slice(repo.length + 1));
    // only the touched input and the bundle's record of its inputs
    expect(changed.sort()).toEqual([input, `${out}.inputs.json`]);
    await build();
    expect(snapshot(['apps/lifecycle'])).toEqual(after);
  }, 120_000);

  it("puts into the tools' thread bundle the sha256 of its own text as its code version (holdings InspectionStore)", async () => {
    const { CODE_VERSION_PLACEHOLDER } = (await import(join(repo, 'scripts/bundle-services.mjs'))) as { CODE_VERSION_PLACEHOLDER: string };
    const text = readFileSync(join(repo, 'apps/tools/dist/tool-worker.bundle.js'), 'utf8');
    expect(text).not.toContain(CODE_VERSION_PLACEHOLDER);
    // the bundles are minified (whitespace and syntax): `function builtVersion(){return"<sha256>"}`
    const version = /function builtVersion\(\)\s*\{\s*return[^"]*"([0-9a-f]{64})"/.exec(text)?.[1];
    expect(version).toBeDefined();
    expect(createHash('sha256').update(text.replaceAll(version!, CODE_VERSION_PLACEHOLDER)).digest('hex')).toBe(version);
  });

  it("writes every bundle in ASCII, loads Node's built-ins through require, not ES module imports, and leaves out the packages no service calls (the start-up costs avoided)", async () => {
    const { bundles, NEVER_CALLED } = (await import(join(repo, 'scripts/bundle-services.mjs'))) as {
      bundles: () => { out: string }[];
      NEVER_CALLED: string[];
    };
    expect(NEVER_CALLED).toContain('multer');
    const { builtinModules } = await import('node:module');
    const builtins = new Set(builtinModules.flatMap((m) => [m, `node:${m}`]));
    for (const { out } of bundles()) {
      const bytes = readFileSync(join(repo, out));
      expect({ out, nonAscii: bytes.findIndex((b) => b > 0x7f) }).toEqual({ out, nonAscii: -1 });
      const imported = [...bytes.toString('latin1').matchAll(/^import [^\n]*? from ["']([^"']+)["'];/gm)].map((m) => m[1]!);
      // the banner's own `node:module`, which makes the `require` they go through
      expect({ out, builtins: imported.filter((m) => builtins.has(m)) }).toEqual({ out, builtins: ['node:module'] });
      for (const pkg of NEVER_CALLED) expect({ out, pkg, bundled: bytes.includes(`// node_modules/${pkg}/`) }).toEqual({ out, pkg, bundled: false });
    }
  });

  it('rewrites a bundle to ASCII only where an escape means the same, and refuses it elsewhere', async () => {
    const { asciiOnly } = (await import(join(repo, 'scripts/bundle-services.mjs'))) as { asciiOnly: (text: string, out: string) => string };
    // a comment and a regular expression: escaped, and the expression still matches what it matched
    const text = asciiOnly('// a — dash\nexport const re = /(µs|ms)/u;\nexport const astral = /😀/u;\n', 'x.js');
    expect(text).toBe('// a \\u2014 dash\nexport const re = /(\\u00b5s|ms)/u;\nexport const astral = /\\ud83d\\ude00/u;\n');
    const dataUrl = (code: string) => `data:text/javascript,${encodeURIComponent(code)}`;
    const escaped = (await import(dataUrl(text))) as { re: RegExp; astral: RegExp };
    expect([escaped.re.test('5µs'), escaped.astral.test('😀'), escaped.astral.test('\ud83d')]).toEqual([true, true, false]);
    // where an escape would change the code: refused, naming the bundle
    expect(() => asciiOnly('export const s = String.raw`é`;', 'b.js')).toThrow(/b\.js: .*template literal/);
    expect(() => asciiOnly("export const s = '\\é';", 'b.js')).toThrow(/follows a backslash/);
    expect(() => asciiOnly('export const re = /\\é/;', 'b.js')).toThrow(/follows a backslash/);
    expect(() => asciiOnly('// a\u2028b\n', 'b.js')).toThrow(/U\+2028/);
    expect(asciiOnly('export const plain = 1;', 'c.js')).toBe('export const plain = 1;');
  });

  it('bundles every service the local stack starts, and the stack starts the bundles', async () => {
    const { BUNDLED_SERVICES } = (await import(join(repo, 'scripts/bundle-services.mjs'))) as { BUNDLED_SERVICES: string[] };
    expect([...BUNDLED_SERVICES].sort()).toEqual([...SERVICES].sort());
    for (const name of SERVICES) expect(serviceEntry(repo, name)).toBe(join(repo, 'apps', name, 'dist', 'main.bundle.js'));
  });
});
