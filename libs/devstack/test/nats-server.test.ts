/**
 * The nats-server a local stack starts (libs/devstack nats-server.ts): only 2.12 or later, the
 * newest cached one, fetched on first use, and one line saying how to get one when it cannot be had.
 */
import { describe, expect, it } from '@jest/globals';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureNatsServerBinary, findNatsServerBinary, natsServerVersion, repoRoot } from '@runplane/devstack';

const machine = ['/usr/sbin/nats-server', '/usr/bin/nats-server'].find((p) => existsSync(p) && natsServerVersion(p)?.startsWith('2.9.'));
const current = findNatsServerBinary(repoRoot(), {});

/** A checkout-like folder whose `.cache/nats-server/<version>/nats-server` link to the given binaries. */
function fakeRoot(cached: Record<string, string>, fetchScript = 'echo "fetch-nats-server: no network" >&2; exit 1'): string {
  const root = mkdtempSync(join(tmpdir(), 'rp-natsbin-'));
  for (const [version, bin] of Object.entries(cached)) {
    mkdirSync(join(root, '.cache', 'nats-server', version), { recursive: true });
    symlinkSync(bin, join(root, '.cache', 'nats-server', version, 'nats-server'));
  }
  mkdirSync(join(root, 'scripts'));
  writeFileSync(join(root, 'scripts', 'fetch-nats-server.sh'), `#!/usr/bin/env bash\n${fetchScript}\n`);
  chmodSync(join(root, 'scripts', 'fetch-nats-server.sh'), 0o755);
  return root;
}

describe('the nats-server a local stack starts', () => {
  it('is a cached 2.12 or later, never an older one (the machine 2.9.10 cached beside it is passed over)', () => {
    expect(current).not.toBeNull();
    const root = fakeRoot({ ...(machine ? { '2.9.10': machine } : {}), [current!.version]: current!.bin });
    try {
      expect(findNatsServerBinary(root, {})).toMatchObject({ version: current!.version });
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  (machine ? it : it.skip)('refuses RUNPLANE_NATS_SERVER_BIN naming an older release, saying how to get one', () => {
    expect(() => findNatsServerBinary(repoRoot(), { RUNPLANE_NATS_SERVER_BIN: machine })).toThrow(
      /is nats-server 2\.9\.\d+, older than 2\.12\.0: run scripts\/fetch-nats-server\.sh/,
    );
  });

  it('fetches on first use, and fails with one line saying how to get one when the fetch fails', () => {
    const root = fakeRoot(machine ? { '2.9.10': machine } : {});
    try {
      let message = '';
      try {
        ensureNatsServerBinary(root, {});
      } catch (e) {
        message = (e as Error).message;
      }
      expect(message).toMatch(/^No nats-server 2\.12\.0 or later could be had \(fetch-nats-server: no network\): run scripts\/fetch-nats-server\.sh/);
      expect(message.split('\n')).toHaveLength(1);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
    // a fetch that caches one: used at once
    const fetching = fakeRoot(
      {},
      `mkdir -p .cache/nats-server/${current!.version} && ln -s ${current!.bin} .cache/nats-server/${current!.version}/nats-server`,
    );
    try {
      expect(ensureNatsServerBinary(fetching, {})).toMatchObject({ version: current!.version });
    } finally {
      rmSync(fetching, { recursive: true, force: true });
    }
  });
});
