/**
 * Node's module compile cache for the processes a local stack starts (services, the scripted model,
 * the CLI a test runs): V8's compiled code of every module, kept on disk and reused by the next
 * process that loads the same file unchanged, so a start compiles only what changed since.
 *
 * A service spends about 1 s of CPU to start on the 2-core machine, about 40 % of it loading
 * modules; with the cache a stack of seven services and the scripted model took 7.0-7.2 s of CPU to
 * be ready against 8.0-8.2 s without (docs/development.md, "Tests and static checks"). The suite
 * starts about fifty such stacks.
 *
 * The cache lives where Node puts it by default, `<os tmpdir>/node-compile-cache`: Node keys each
 * entry by the file's contents, its own version and its flags, so every build adds entries and the
 * OS's temporary folder is what clears stale ones. It is an optimization only: a process that cannot
 * use the folder runs without it. `NODE_COMPILE_CACHE` already set is kept, and
 * `NODE_DISABLE_COMPILE_CACHE=1` turns it off for every process started.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** The folder of {@link compileCacheEnv}: Node's own default, `<os tmpdir>/node-compile-cache`. */
export function compileCacheDir(): string {
  return join(tmpdir(), 'node-compile-cache');
}

/**
 * The environment that turns Node's compile cache on for a process the stack starts:
 * `{ NODE_COMPILE_CACHE: compileCacheDir() }`, or `{}` when `env` already names a folder (the
 * caller's wins) or sets `NODE_DISABLE_COMPILE_CACHE`.
 * @param env the environment the process would otherwise get.
 */
export function compileCacheEnv(env: NodeJS.ProcessEnv): { NODE_COMPILE_CACHE: string } | Record<string, never> {
  if (env.NODE_COMPILE_CACHE !== undefined || env.NODE_DISABLE_COMPILE_CACHE !== undefined) return {};
  return { NODE_COMPILE_CACHE: compileCacheDir() };
}
