/**
 * The malloc every service process runs with: jemalloc, preloaded, where the machine has it.
 *
 * glibc's malloc keeps the native memory a burst of work freed: after 10,000 Runs parked the
 * runtime's brk heap had grown from 18 to 41 MiB and its thread arenas from 25 to 39 MiB, and they
 * stayed resident at idle (the runtime +51 to +54 MiB in four runs). With jemalloc preloaded it
 * grew 1 to 9 MiB over the same parks (four runs), and W1's CPU per Run was glibc's with the
 * options below (docs/performance.md, parked Runs).
 * {@link SERVICE_MALLOC_CONF}: two arenas instead of four per core (jemalloc's own idle footprint
 * stays near glibc's: 2-4 MiB more per service), and a background thread that returns freed pages
 * after jemalloc's default 10 s even when the process is idle (jemalloc otherwise purges only when
 * it allocates). Faster purging (`dirty_decay_ms:1000,muzzy_decay_ms:0`) cost W1 about 15 % more
 * CPU per Run and was not kept.
 *
 * The same two variables are set in deploy/Dockerfile (which installs `libjemalloc2` and links it
 * at {@link IMAGE_JEMALLOC}); a test keeps the two equal.
 */
import { existsSync } from 'node:fs';

/** `MALLOC_CONF` of every service process (jemalloc's options; glibc ignores the variable). */
export const SERVICE_MALLOC_CONF = 'narenas:2,background_thread:true';

/** Where deploy/Dockerfile links the image's jemalloc (the same path on every architecture). */
export const IMAGE_JEMALLOC = '/usr/local/lib/libjemalloc.so.2';

/**
 * Where a jemalloc is looked for, in order: the image's link, Debian and Ubuntu's `libjemalloc2`
 * (amd64, arm64), Fedora and RHEL's `jemalloc`.
 */
export const JEMALLOC_CANDIDATES: readonly string[] = [
  IMAGE_JEMALLOC,
  '/usr/lib/x86_64-linux-gnu/libjemalloc.so.2',
  '/usr/lib/aarch64-linux-gnu/libjemalloc.so.2',
  '/usr/lib64/libjemalloc.so.2',
];

/**
 * The environment that preloads jemalloc into a service process: `{ LD_PRELOAD, MALLOC_CONF }` with
 * the first of {@link JEMALLOC_CANDIDATES} that exists, or `{}` when there is none (the process
 * runs with glibc's malloc, which works, with more native memory kept after bursts) or when `env`
 * already sets `LD_PRELOAD` (the caller's choice wins; `LD_PRELOAD=` with nothing runs glibc's).
 * A `MALLOC_CONF` already in `env` is kept.
 * @param env the environment the process would otherwise get.
 * @param exists file test (default `fs.existsSync`).
 */
export function serviceAllocatorEnv(env: NodeJS.ProcessEnv, exists: (path: string) => boolean = existsSync): NodeJS.ProcessEnv {
  if (env.LD_PRELOAD !== undefined) return {};
  const lib = JEMALLOC_CANDIDATES.find((p) => exists(p));
  if (lib === undefined) return {};
  return { LD_PRELOAD: lib, MALLOC_CONF: env.MALLOC_CONF ?? SERVICE_MALLOC_CONF };
}
