/**
 * Where the tools processes of local stacks keep their data-file inspections (holdings
 * `InspectionStore`, `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR`): one folder per OS user under the OS's
 * temporary folder, shared by every stack this user starts. A tool thread's first call then reads
 * what an earlier thread parsed (about 20 ms) instead of parsing the data folder again (1.3-1.7 s of
 * CPU for the shared issuer files); the test suite starts about fifty stacks.
 */
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';

/** The folder of {@link inspectionCacheEnv}: `<os tmpdir>/runplane-inspection-cache-<uid>`. */
export function inspectionCacheDir(): string {
  return join(tmpdir(), `runplane-inspection-cache-${userInfo().uid}`);
}

/**
 * The environment that gives a stack's tools process {@link inspectionCacheDir}, or `{}` when `env`
 * already sets `RUNPLANE_TOOLS_INSPECTION_CACHE_DIR` (the caller's wins; empty turns it off).
 * @param env the environment the process would otherwise get.
 */
export function inspectionCacheEnv(env: NodeJS.ProcessEnv): { RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: string } | Record<string, never> {
  if (env.RUNPLANE_TOOLS_INSPECTION_CACHE_DIR !== undefined) return {};
  return { RUNPLANE_TOOLS_INSPECTION_CACHE_DIR: inspectionCacheDir() };
}
