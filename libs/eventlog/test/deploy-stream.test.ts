/**
 * The deployed NATS (deploy/nats, deploy/k8s/base/config.env) says what the code creates: the Run
 * stream's JSON for `nats stream add` is the configuration `EventLog.ensureStream` would create at
 * 3 replicas, and the services are told to create everything at 3 replicas on the 3-node cluster.
 */
import { describe, expect, it } from '@jest/globals';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BusConfig, loadConfig } from '@runplane/contracts';
import { DEFAULT_DUPLICATE_WINDOW_MS, DEPLOYED_SPACE, runStreamConfig } from '@runplane/eventlog';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const read = (...p: string[]) => readFileSync(join(root, ...p), 'utf8');

/** KEY=value lines of an env file (comments and blank lines skipped). */
function envFile(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split('\n')
      .filter((l) => /^[A-Z_][A-Z0-9_]*=/.test(l))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

describe('the deployed NATS cluster and the code agree', () => {
  it('deploy/nats/stream-RUNPLANE.json is the Run stream ensureStream creates, at 3 replicas', () => {
    const deployed = JSON.parse(read('deploy', 'nats', 'stream-RUNPLANE.json')) as Record<string, unknown>;
    const created = runStreamConfig(DEPLOYED_SPACE, { replicas: 3, duplicateWindowMs: DEFAULT_DUPLICATE_WINDOW_MS });
    expect(deployed).toMatchObject(created);
  });

  it('deploy/k8s/base/config.env creates the stream, buckets and object store at 3 replicas and names the cluster', () => {
    const env = envFile(read('deploy', 'k8s', 'base', 'config.env'));
    const bus = loadConfig(BusConfig, env);
    expect(bus.RUNPLANE_NATS_REPLICAS).toBe(3);
    expect(bus.RUNPLANE_STREAM).toBe(DEPLOYED_SPACE.stream);
    expect(bus.RUNPLANE_SUBJECT_PREFIX).toBe(DEPLOYED_SPACE.prefix);
  });

  it('deploy/nats/values.yaml runs 3 clustered servers with JetStream on files', () => {
    const values = read('deploy', 'nats', 'values.yaml');
    expect(values).toMatch(/cluster:\s*\n\s*enabled: true\s*\n\s*replicas: 3/);
    expect(values).toMatch(/jetstream:\s*\n\s*enabled: true\s*\n\s*fileStore:\s*\n\s*enabled: true/);
  });
});
