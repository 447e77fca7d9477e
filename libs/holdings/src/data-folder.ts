/**
 * Where the tool pack reads its files from: the shared real issuer files next to the checkout, or
 * the small invented sample shipped with this library.
 */
import { existsSync, realpathSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Which data set a folder holds: `shared` = real issuer files; `illustrative` = the shipped invented sample. */
export type DataSet = 'shared' | 'illustrative';

/** A data folder and the data set it holds. */
export interface DataFolder {
  dir: string;
  dataSet: DataSet;
}

const here = dirname(fileURLToPath(import.meta.url));

/**
 * The shipped sample folder `libs/holdings/sample/`: beside this module's folder (`src/` or
 * `dist/`), or, in a service's bundle (scripts/bundle-services.mjs, where this code runs from
 * `apps/<service>/dist/*.bundle.js`), the installed package's.
 */
export const SAMPLE_DIR = import.meta.url.endsWith('.bundle.js')
  ? resolve(dirname(fileURLToPath(import.meta.resolve('@runplane/holdings'))), '..', 'sample')
  : resolve(here, '..', 'sample');

/**
 * The repository root: the nearest ancestor of `start` (default: this module's folder) that holds
 * `nx.json`; `null` when there is none.
 */
export function findRepoRoot(start: string = here): string | null {
  let dir = resolve(start);
  for (;;) {
    if (existsSync(join(dir, 'nx.json'))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return null;
    dir = parent;
  }
}

/** `<repo root>/../shared/data/etf-holdings`, or `null` when the repo root is unknown. */
export function sharedDataDir(repoRoot: string | null = findRepoRoot()): string | null {
  return repoRoot === null ? null : resolve(repoRoot, '..', 'shared', 'data', 'etf-holdings');
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function samePath(a: string, b: string): boolean {
  try {
    return realpathSync(a) === realpathSync(b);
  } catch {
    return resolve(a) === resolve(b);
  }
}

/**
 * Chooses the data folder:
 * 1. `RUNPLANE_DATA_DIR` when set (data set `shared`, unless it is the shipped sample folder);
 * 2. else `<repo root>/../shared/data/etf-holdings` when it exists (repo root = nearest ancestor of
 *    this module with `nx.json`), data set `shared`;
 * 3. else the shipped sample `libs/holdings/sample/`, data set `illustrative`.
 *
 * @throws Error when `RUNPLANE_DATA_DIR` is set but is not a directory.
 */
export function resolveDataFolder(env: NodeJS.ProcessEnv = process.env): DataFolder {
  const configured = env['RUNPLANE_DATA_DIR']?.trim();
  if (configured) {
    const dir = resolve(configured);
    if (!isDirectory(dir)) throw new Error(`RUNPLANE_DATA_DIR=${configured} is not a directory.`);
    return { dir, dataSet: samePath(dir, SAMPLE_DIR) ? 'illustrative' : 'shared' };
  }
  const shared = sharedDataDir();
  if (shared !== null && isDirectory(shared)) return { dir: shared, dataSet: 'shared' };
  return { dir: SAMPLE_DIR, dataSet: 'illustrative' };
}
