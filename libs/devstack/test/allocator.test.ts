/**
 * Every service process runs with jemalloc where the machine has it: the devstack preloads it
 * (`serviceAllocatorEnv`) and the image does (deploy/Dockerfile); the two must say the same. A
 * process started with that environment really maps jemalloc, and kit's `allocatorInUse` (the
 * `runplane_process_allocator_info` metric) says so.
 */
import { describe, expect, it } from '@jest/globals';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { IMAGE_JEMALLOC, JEMALLOC_CANDIDATES, repoRoot, SERVICE_MALLOC_CONF, serviceAllocatorEnv } from '@runplane/devstack';
import { allocatorInUse } from '@runplane/kit/memory';

const run = promisify(execFile);

describe('serviceAllocatorEnv', () => {
  it('given a jemalloc on the machine, preloads the first one found with the services MALLOC_CONF', () => {
    const found = new Set(['/usr/lib/aarch64-linux-gnu/libjemalloc.so.2', '/usr/lib64/libjemalloc.so.2']);
    expect(serviceAllocatorEnv({}, (p) => found.has(p))).toEqual({
      LD_PRELOAD: '/usr/lib/aarch64-linux-gnu/libjemalloc.so.2',
      MALLOC_CONF: SERVICE_MALLOC_CONF,
    });
  });

  it('given none, leaves the environment alone (glibc malloc)', () => {
    expect(serviceAllocatorEnv({}, () => false)).toEqual({});
  });

  it("given LD_PRELOAD already set, even empty, the caller's choice wins; a MALLOC_CONF already set is kept", () => {
    expect(serviceAllocatorEnv({ LD_PRELOAD: '' }, () => true)).toEqual({});
    expect(serviceAllocatorEnv({ LD_PRELOAD: '/opt/other.so' }, () => true)).toEqual({});
    expect(serviceAllocatorEnv({ MALLOC_CONF: 'narenas:1' }, () => true)).toEqual({ LD_PRELOAD: IMAGE_JEMALLOC, MALLOC_CONF: 'narenas:1' });
  });
});

describe('the image and the devstack', () => {
  it('deploy/Dockerfile installs libjemalloc2, links it where the devstack looks first and sets the same LD_PRELOAD and MALLOC_CONF', () => {
    const dockerfile = readFileSync(join(repoRoot(), 'deploy', 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/apt-get install [^\n]*libjemalloc2/);
    expect(dockerfile).toContain(`ln -s "/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2" ${IMAGE_JEMALLOC}`);
    expect(dockerfile).toMatch(new RegExp(`LD_PRELOAD=${IMAGE_JEMALLOC.replace(/\./g, '\\.')}\\b`));
    expect(dockerfile).toMatch(new RegExp(`MALLOC_CONF=${SERVICE_MALLOC_CONF}\\s*$`, 'm'));
    expect(JEMALLOC_CANDIDATES[0]).toBe(IMAGE_JEMALLOC);
  });
});

describe('a process started with the services environment', () => {
  const env = serviceAllocatorEnv({});
  const withJemalloc = env.LD_PRELOAD !== undefined;

  it(`runs with ${withJemalloc ? 'jemalloc' : "glibc's malloc (no jemalloc on this machine)"}, and allocatorInUse says which`, async () => {
    const script = `import { allocatorInUse } from '@runplane/kit/memory'; const m = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8'); console.log(JSON.stringify({ mapped: /libjemalloc/.test(m), said: allocatorInUse() }));`;
    const { LD_PRELOAD: _preload, MALLOC_CONF: _conf, ...base } = process.env; // this process's own choice aside
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: repoRoot(), env: { ...base, ...env } });
    expect(JSON.parse(stdout)).toEqual({ mapped: withJemalloc, said: withJemalloc ? 'jemalloc' : 'system' });
    expect(withJemalloc).toBe(JEMALLOC_CANDIDATES.some((p) => existsSync(p)));
  });

  it('allocatorInUse reads a maps text: jemalloc only when a libjemalloc is mapped', () => {
    expect(allocatorInUse('7f00-7f01 r-xp 00000000 fe:00 1 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n')).toBe('jemalloc');
    expect(allocatorInUse('7f00-7f01 r-xp 00000000 fe:00 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n')).toBe('system');
  });
});
