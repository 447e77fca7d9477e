/**
 * Inspections kept on disk ({@link InspectionStore}): what a data folder's files turned out to be,
 * shared by every tool thread and every tools process that uses the same folder on one machine.
 *
 * Why: a tool thread inspects the whole folder on its first call (`list_funds`, `get_holdings`...),
 * and parsing the shared issuer files (about 1 MB: the SSGA workbooks through exceljs, the large CSV
 * files) takes a fresh thread 1.3-1.7 s of CPU, most of it cold code, while reading the same
 * inspections back takes about 20 ms. A tools process has two such threads, and the test suite
 * starts about fifty tools processes. The in-memory cache by content digest (library.ts) serves
 * one thread only.
 *
 * An entry is found by everything its inspection depends on: the file's bytes (sha256), its name
 * and path, and the code that parsed it ({@link holdingsCodeVersion}: this library's code, exceljs's
 * version, Node's), so a changed file or a new build never reads an old entry. Entries are written
 * whole (a temporary file renamed over the entry) and read with V8's serializer (an inspection holds
 * `undefined` fields that JSON would drop); an entry that cannot be read is parsed again.
 *
 * Whoever can write the folder decides what the tools answer, so the store uses a folder only when
 * this process's user owns it and no one else may read or write it (mode 0700, which it creates);
 * otherwise it is off and every thread parses for itself.
 */
import { createHash, randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { deserialize, serialize } from 'node:v8';
import type { Inspection } from './library.js';

/** Versions (code of other builds) kept beside the current one; older ones are removed on open. */
const KEPT_VERSIONS = 3;

/**
 * The version of the code that parses data files: a sha256 (hex) over this library's code (the
 * service bundle it runs from, else the library's own modules), exceljs's version and Node's.
 * Computed once per thread (about 2 ms for a bundle of 1 MB).
 */
export function holdingsCodeVersion(): string {
  versionMemo ??= computeVersion();
  return versionMemo;
}
let versionMemo: string | undefined;

function computeVersion(): string {
  const self = fileURLToPath(import.meta.url);
  const hash = createHash('sha256');
  // in a service's bundle (scripts/bundle-services.mjs) every parser is in this one file
  const files = self.endsWith('.bundle.js')
    ? [self]
    : readdirSync(dirname(self))
        .filter((f) => /\.(js|ts)$/.test(f) && !f.endsWith('.d.ts'))
        .sort()
        .map((f) => join(dirname(self), f));
  for (const f of files) hash.update(f.slice(dirname(self).length)).update(readFileSync(f));
  let excel = 'unknown';
  try {
    excel = (createRequire(import.meta.url)('exceljs/package.json') as { version: string }).version;
  } catch {
    // not installed here: a workbook cannot be parsed, whatever the entry says
  }
  return hash.update(`\0exceljs ${excel}\0node ${process.version}`).digest('hex');
}

/** Why a folder cannot hold inspections, or null when it can (owned by this user, mode 0700, a real directory). */
export function unsafeStoreFolder(dir: string): string | null {
  const info = lstatSync(dir, { throwIfNoEntry: false });
  if (!info) return 'it does not exist';
  if (!info.isDirectory()) return 'it is not a directory (or is a symbolic link)';
  if (typeof process.getuid === 'function' && info.uid !== process.getuid()) return `it is owned by uid ${info.uid}, not this process's`;
  if ((info.mode & 0o077) !== 0) return `others may use it (mode ${(info.mode & 0o777).toString(8)}; 700 is needed)`;
  return null;
}

/**
 * Inspections on disk under `<dir>/<version>/<key>` (see the module comment). Every method is
 * synchronous and never throws: a tool thread parses instead.
 */
export class InspectionStore {
  /** Entries read back (a parse saved). */
  hits = 0;
  /** Entries written. */
  writes = 0;

  private constructor(private readonly folder: string) {}

  /**
   * The store in `dir` for code `version`, or null (with why, in `onRefused`) when `dir` is empty
   * or not private ({@link unsafeStoreFolder}). Creates `dir` (mode 0700) when missing, and removes
   * the folders of all but the {@link KEPT_VERSIONS} most recently used other versions.
   * @param version {@link holdingsCodeVersion} (a test may pass its own).
   */
  static open(dir: string, version: string = holdingsCodeVersion(), onRefused?: (reason: string) => void): InspectionStore | null {
    if (!dir) return null;
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const unsafe = unsafeStoreFolder(dir);
      if (unsafe) {
        onRefused?.(`${dir} cannot hold inspections: ${unsafe}`);
        return null;
      }
      const folder = join(dir, version);
      mkdirSync(folder, { recursive: true, mode: 0o700 });
      pruneOtherVersions(dir, version);
      return new InspectionStore(folder);
    } catch (e) {
      onRefused?.(`${dir} cannot hold inspections: ${(e as Error).message}`);
      return null;
    }
  }

  /** The inspection kept for a file's bytes (`sha256`), `path` and `name`, or null. */
  get(sha256: string, path: string, name: string): Inspection | null {
    try {
      const kept = deserialize(readFileSync(this.entry(sha256, path, name))) as Inspection;
      if (typeof kept !== 'object' || kept === null || kept.name !== name || typeof kept.kind !== 'string') return null;
      this.hits++;
      return kept;
    } catch {
      return null; // none yet, or unreadable: parsed again
    }
  }

  /** Keeps `inspection` of a file's bytes (`sha256`), `path` and `name`; a failed write is skipped. */
  put(sha256: string, path: string, name: string, inspection: Inspection): void {
    const entry = this.entry(sha256, path, name);
    const partial = `${entry}.${randomBytes(6).toString('hex')}.partial`;
    try {
      writeFileSync(partial, serialize(inspection), { mode: 0o600 });
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

/** Removes the version folders of `dir` other than `current`, keeping the most recently changed few. */
function pruneOtherVersions(dir: string, current: string): void {
  const others = readdirSync(dir)
    .filter((v) => v !== current && /^[0-9a-f]{64}$/.test(v))
    .map((v) => ({ v, at: statSync(join(dir, v), { throwIfNoEntry: false })?.mtimeMs ?? 0 }))
    .sort((a, b) => b.at - a.at);
  for (const { v } of others.slice(KEPT_VERSIONS)) rmSync(join(dir, v), { recursive: true, force: true });
}
