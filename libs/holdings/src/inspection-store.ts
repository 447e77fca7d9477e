/**
 * Inspections kept on disk ({@link InspectionStore}): what a data folder's files turned out to be,
 * shared by every tool thread and every tools process that uses the same folder on one machine.
 *
 * Why: a tool thread inspects the whole folder on its first call (`list_funds`, `get_holdings`...),
 * and parsing the shared issuer files (about 1 MB: the SSGA workbooks through exceljs, the large CSV
 * files) takes a fresh thread 1.1-1.7 s of CPU, most of it cold code, while reading the same
 * inspections back takes 40-60 ms. A tools process has two such threads, and the test suite starts
 * about fifty tools processes. The in-memory cache by content digest (library.ts) serves one
 * thread only.
 *
 * An entry is found by everything its inspection depends on: the file's bytes (sha256), its name
 * and path, and the code that parsed it ({@link holdingsCodeVersion}: this library's code as the
 * thread loaded it, and the versions of exceljs, csv-parse, chrono-node and Node), so a changed
 * file or a new build never reads an old entry. Entries are written whole (a temporary file renamed
 * over the entry) with a checksum, and read with V8's serializer (an inspection holds `undefined`
 * fields that JSON would drop); an entry that does not check out is parsed again and rewritten. An
 * inspection made `other` by an unexpected error (exceljs not loading, say) is not kept.
 *
 * Whoever can write the folder decides what the tools answer, so the store uses a folder only when
 * this process's user owns it, no one else may read or write it (mode 0700, which it creates), it
 * is no symbolic link, and every folder above it is owned by root or this user and writable by no
 * one else unless sticky (as `/tmp`); otherwise it is off and every thread parses for itself.
 */
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deserialize, serialize } from 'node:v8';
import type { Inspection } from './library.js';

/** Versions (code of other builds) kept beside the current one, the most recently opened; older ones are removed on open. */
const KEPT_VERSIONS = 3;
/** A `.partial` file older than this was left by a writer that died: removed on open, ms. */
const STALE_PARTIAL_MS = 10 * 60_000;
/** The first bytes of an entry: the format's name and version. */
const MAGIC = Buffer.from('rp-inspection-1\n');
/** The packages besides this library whose code decides an inspection. */
const PARSER_PACKAGES = ['exceljs', 'csv-parse', 'chrono-node'];

/**
 * In a service's bundle: the sha256 of the bundle's own text, put there by the build
 * (scripts/bundle-services.mjs); not defined anywhere else.
 */
declare const __RUNPLANE_CODE_VERSION__: string | undefined;

/** The version the build put into this bundle, or null when this code does not run from a bundle. */
function builtVersion(): string | null {
  return typeof __RUNPLANE_CODE_VERSION__ === 'string' ? __RUNPLANE_CODE_VERSION__ : null;
}

/**
 * The files whose contents version an inspection outside a bundle: this library's own modules
 * (`dist/*.js`, or `src/*.ts` under Jest).
 */
function codeFiles(): string[] {
  const self = fileURLToPath(import.meta.url);
  return readdirSync(dirname(self))
    .filter((f) => /\.(js|ts)$/.test(f) && !f.endsWith('.d.ts'))
    .sort()
    .map((f) => join(dirname(self), f));
}

/** The installed version of `name` as seen from this module, or `none`. */
function packageVersion(name: string): string {
  try {
    let dir = dirname(createRequire(import.meta.url).resolve(name));
    for (;;) {
      const manifest = join(dir, 'package.json');
      const text = statSync(manifest, { throwIfNoEntry: false }) ? readFileSync(manifest, 'utf8') : null;
      if (text) {
        const pkg = JSON.parse(text) as { name?: string; version?: string };
        if (pkg.name === name) return pkg.version ?? 'unknown';
      }
      const parent = dirname(dir);
      if (parent === dir) return 'none';
      dir = parent;
    }
  } catch {
    return 'none';
  }
}

/**
 * The version of the parsing code in the files as they are on disk now: a sha256 (hex) over
 * {@link codeFiles} and the versions of {@link PARSER_PACKAGES} and Node.
 * @throws Error when a code file cannot be read.
 */
export function codeVersionOf(files: readonly string[]): string {
  const hash = createHash('sha256');
  for (const f of files) hash.update(`${f}\0`).update(readFileSync(f)).update('\0');
  for (const p of PARSER_PACKAGES) hash.update(`${p} ${packageVersion(p)}\0`);
  return hash.update(`node ${process.version}`).digest('hex');
}

let loadedVersion: string | null | undefined;

/**
 * The version of the parsing code this thread runs. In a service's bundle, the one the build put
 * into it: the sha256 of the bundle's text, plus the versions of exceljs (loaded from node_modules)
 * and Node, exact whatever happens to the file later. Elsewhere (the libraries' `dist/` under
 * tests, `src/` under Jest) {@link codeVersionOf} the library's files, taken at the first call and
 * kept: call it as the code loads (the tool threads' module does, at its top level; 2-6 ms), and a
 * build that lands while the thread loads can still lend its version to older code. Null when the
 * files could not be read (the store is then off).
 */
export function holdingsCodeVersion(): string | null {
  if (loadedVersion === undefined) {
    try {
      const built = builtVersion();
      loadedVersion = built
        ? createHash('sha256')
            .update(`${built}\0exceljs ${packageVersion('exceljs')}\0node ${process.version}`)
            .digest('hex')
        : codeVersionOf(codeFiles());
    } catch {
      loadedVersion = null;
    }
  }
  return loadedVersion;
}

/**
 * Why a folder cannot hold inspections, or null when it can (see the module comment): it is a real
 * directory (no symbolic link) owned by `uid` with no permission for anyone else, and no one else
 * can move it: every folder above it, as named and as the symbolic links among them resolve, is
 * owned by root or `uid` and writable by no one else unless sticky, and each such link is root's
 * or `uid`'s (`/var` linked to `/private/var`, a linked home or `~/.cache`, pass).
 * @param uid the user that must own it (default: this process's).
 */
export function unsafeStoreFolder(dir: string, uid: number | undefined = process.getuid?.()): string | null {
  const path = resolve(dir); // no trailing slash: lstat would follow a symbolic link to the folder
  const info = lstatSync(path, { throwIfNoEntry: false });
  if (!info) return 'it does not exist';
  if (!info.isDirectory()) return 'it is not a directory (or is a symbolic link)';
  if (uid !== undefined && info.uid !== uid) return `it is owned by uid ${info.uid}, not this process's (${uid})`;
  if ((info.mode & 0o077) !== 0) return `others may use it (mode ${(info.mode & 0o777).toString(8)}; 700 is needed)`;
  const byOther = (owner: number) => uid !== undefined && owner !== 0 && owner !== uid;
  const unsafeAbove = (folder: string, follow: boolean): string | null => {
    for (let parent = folder; ; parent = dirname(parent)) {
      const up = lstatSync(parent);
      if (up.isSymbolicLink()) {
        if (byOther(up.uid)) return `${parent} above it is a symbolic link owned by uid ${up.uid}`;
      } else {
        if (byOther(up.uid)) return `${parent} above it is owned by uid ${up.uid}`;
        if ((up.mode & 0o022) !== 0 && (up.mode & 0o1000) === 0)
          return `others may rename it: ${parent} above it is writable by others and not sticky (mode ${(up.mode & 0o7777).toString(8)})`;
      }
      if (dirname(parent) === parent) return follow ? unsafeAbove(realpathSync(folder), false) : null;
    }
  };
  // the folders as named (where the links are), then the real ones the links lead to
  return unsafeAbove(dirname(path), true);
}

/**
 * Makes `dir` (mode 0700) when it is missing, then says why it cannot hold inspections
 * ({@link unsafeStoreFolder}), or null when it can; a folder that cannot be made gives the reason
 * of the failure. Never throws.
 */
export function privateStoreFolder(dir: string): string | null {
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return unsafeStoreFolder(dir);
  } catch (e) {
    return (e as Error).message;
  }
}

/** Whether `value` has the shape of an inspection of bytes `sha256` named `name` (what a read entry must be). */
function isInspectionOf(value: unknown, sha256: string, name: string): value is Inspection {
  if (typeof value !== 'object' || value === null) return false;
  const i = value as { kind?: unknown; name?: unknown; sha256?: unknown; parsed?: unknown; table?: unknown; sheet?: unknown; reason?: unknown };
  if (i.name !== name) return false;
  const isObject = (x: unknown) => typeof x === 'object' && x !== null;
  switch (i.kind) {
    case 'holdings': {
      if (!isObject(i.parsed)) return false;
      const parsed = i.parsed as { sha256?: unknown; fund?: unknown; lines?: unknown };
      return parsed.sha256 === sha256 && typeof parsed.fund === 'string' && Array.isArray(parsed.lines);
    }
    case 'overview':
      return i.sha256 === sha256 && isObject(i.table);
    case 'factsheet':
      return i.sha256 === sha256 && isObject(i.sheet);
    case 'other':
      return typeof i.reason === 'string';
    default:
      return false;
  }
}

/**
 * Inspections on disk under `<dir>/<version>/<key>` (see the module comment). No method throws: a
 * tool thread parses instead.
 */
export class InspectionStore {
  /** Entries read back (a parse saved). */
  hits = 0;
  /** Entries written. */
  writes = 0;

  private constructor(private readonly folder: string) {}

  /**
   * The store in `dir` for code `version`, or null (with why, in `onRefused`) when `dir` is empty,
   * not private ({@link unsafeStoreFolder}), the version is unknown, or the code on disk is no
   * longer the code this thread loaded (a build since). Creates `dir` (mode 0700) when missing,
   * marks the version's folder as used now, and removes the folders of all but the
   * {@link KEPT_VERSIONS} most recently used other versions and `.partial` files that writers
   * which died left behind.
   * @param version the code's version (default {@link holdingsCodeVersion}; a test passes its own).
   */
  static open(dir: string, version?: string, onRefused?: (reason: string) => void): InspectionStore | null {
    if (!dir) return null;
    try {
      const loaded = version ?? holdingsCodeVersion();
      if (loaded === null || !/^[0-9a-f]{64}$/.test(loaded)) return refuse(onRefused, `${dir}: the version of the parsing code is unknown`);
      // outside a bundle, the files this thread loaded may have been rebuilt since
      if (version === undefined && builtVersion() === null && codeVersionOf(codeFiles()) !== loaded)
        return refuse(onRefused, `${dir}: the parsing code on disk changed since this thread loaded it (a new build)`);
      const unsafe = privateStoreFolder(dir);
      if (unsafe) return refuse(onRefused, `${dir} cannot hold inspections: ${unsafe}`);
      const current = loaded;
      const folder = join(resolve(dir), current);
      mkdirSync(folder, { recursive: true, mode: 0o700 });
      const now = new Date();
      utimesSync(folder, now, now);
      try {
        tidy(resolve(dir), current);
      } catch {
        // housekeeping only (a folder another process is removing, say): the store still works
      }
      return new InspectionStore(folder);
    } catch (e) {
      return refuse(onRefused, `${dir} cannot hold inspections: ${(e as Error).message}`);
    }
  }

  /** The inspection kept for a file's bytes (`sha256`), `path` and `name`, or null when none checks out. */
  get(sha256: string, path: string, name: string): Inspection | null {
    let fd: number | null = null;
    try {
      // no symbolic link, nothing that could block (a FIFO): a regular file or nothing
      fd = openSync(this.entry(sha256, path, name), constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
      if (!fstatSync(fd).isFile()) return null;
      const bytes = readFileSync(fd);
      const head = MAGIC.length;
      if (bytes.length < head + 32 || !bytes.subarray(0, head).equals(MAGIC)) return null;
      const payload = bytes.subarray(head + 32);
      if (
        !createHash('sha256')
          .update(payload)
          .digest()
          .equals(bytes.subarray(head, head + 32))
      )
        return null;
      const kept: unknown = deserialize(payload);
      if (!isInspectionOf(kept, sha256, name)) return null;
      this.hits++;
      return kept;
    } catch {
      return null; // none yet, or unreadable: parsed again
    } finally {
      if (fd !== null) closeSync(fd);
    }
  }

  /** Keeps `inspection` of a file's bytes (`sha256`), `path` and `name`; a failed write is skipped. */
  put(sha256: string, path: string, name: string, inspection: Inspection): void {
    const entry = this.entry(sha256, path, name);
    const partial = `${entry}.${randomBytes(6).toString('hex')}.partial`;
    try {
      const payload = serialize(inspection);
      writeFileSync(partial, Buffer.concat([MAGIC, createHash('sha256').update(payload).digest(), payload]), { mode: 0o600 });
      renameSync(partial, entry);
      this.writes++;
    } catch {
      try {
        unlinkSync(partial);
      } catch {
        // never written
      }
    }
  }

  private entry(sha256: string, path: string, name: string): string {
    return join(this.folder, createHash('sha256').update(`${sha256}\0${path}\0${name}`).digest('hex'));
  }
}

function refuse(onRefused: ((reason: string) => void) | undefined, reason: string): null {
  try {
    onRefused?.(reason);
  } catch {
    // the caller's report failed: the store is off all the same
  }
  return null;
}

/** Removes the version folders of `dir` other than `current` but the most recently used few, and stale `.partial` files in `current`'s. */
function tidy(dir: string, current: string): void {
  const others = readdirSync(dir)
    .filter((v) => v !== current && /^[0-9a-f]{64}$/.test(v))
    .map((v) => ({ v, at: statSync(join(dir, v), { throwIfNoEntry: false })?.mtimeMs ?? 0 }))
    .sort((a, b) => b.at - a.at);
  for (const { v } of others.slice(KEPT_VERSIONS)) rmSync(join(dir, v), { recursive: true, force: true, maxRetries: 2 });
  const folder = join(dir, current);
  for (const f of readdirSync(folder)) {
    if (!f.endsWith('.partial')) continue;
    const at = statSync(join(folder, f), { throwIfNoEntry: false })?.mtimeMs;
    if (at !== undefined && Date.now() - at > STALE_PARTIAL_MS) rmSync(join(folder, f), { force: true });
  }
}
