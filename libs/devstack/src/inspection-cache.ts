/**
 * Where the tools processes of local stacks keep their data-file inspections (holdings
 * `InspectionStore`, `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR`): one folder in this user's cache
 * folder, shared by every stack the user starts. A tool thread's first call then reads what an
 * earlier thread parsed (40-60 ms) instead of parsing the data folder again (1.1-1.7 s of CPU for
 * the shared issuer files); the test suite starts about fifty stacks.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { privateStoreFolder } from '@runplane/holdings/inspection-store';

/** The folder of {@link inspectionCacheEnv}: `$XDG_CACHE_HOME/runplane/inspections`, else `~/.cache/runplane/inspections`. */
export function inspectionCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'runplane', 'inspections');
}

/**
 * The environment that gives a stack's tools process {@link inspectionCacheDir} (made, mode 0700,
 * when missing), or `{}` when `env` already sets `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR` (the
 * caller's wins; empty turns it off). When that folder cannot be made or is not private (holdings
 * `privateStoreFolder`), it is off (`''`): the stack starts, its threads parse for themselves, and
 * `onRefused` gets why.
 * @param env the environment the process would otherwise get.
 */
export function inspectionCacheEnv(
  env: NodeJS.ProcessEnv,
  onRefused: (reason: string) => void = () => undefined,
): { RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: string } | Record<string, never> {
  if (env.RUNPLANE_TOOLS_INSPECTION_CACHE_DIR !== undefined) return {};
  const dir = inspectionCacheDir(env);
  const unsafe = privateStoreFolder(dir);
  if (unsafe) {
    onRefused(`the tools' inspection folder ${dir} is off: ${unsafe}`);
    return { RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: '' };
  }
  return { RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: dir };
}
