/**
 * The services' Node flags live in two homes, the devstack (local stacks, tests, the bench) and
 * the Kubernetes ConfigMap (deploy/k8s/base/config.env `NODE_OPTIONS`): they must say the same.
 */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot, SERVICE_NODE_FLAGS } from '@runplane/devstack';

describe('service Node flags', () => {
  it('deploy/k8s/base/config.env sets NODE_OPTIONS to the devstack flags', () => {
    const env = readFileSync(join(repoRoot(), 'deploy', 'k8s', 'base', 'config.env'), 'utf8');
    const line = env.split('\n').find((l) => l.startsWith('NODE_OPTIONS='));
    expect(line?.slice('NODE_OPTIONS='.length).trim().split(/\s+/)).toEqual([...SERVICE_NODE_FLAGS]);
  });

  it('are flags Node accepts in NODE_OPTIONS', () => {
    for (const flag of SERVICE_NODE_FLAGS) expect(process.allowedNodeEnvironmentFlags.has(flag.split('=')[0]!)).toBe(true);
  });
});
