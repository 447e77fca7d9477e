/**
 * The Kubernetes base (deploy/k8s) keeps issue [8]'s promises: every service runs at least two
 * replicas with RollingUpdate, a PodDisruptionBudget, topology spread, a grace period above the
 * drain bound and probes on a path it serves (test/support/deploy-manifests.ts). No cluster is
 * needed: the files are parsed, and refused where kustomize refuses them (a repeated key in an env
 * file of the ConfigMap: `kubectl apply -k` then renders nothing).
 */
import { describe, expect, it } from '@jest/globals';
import { join } from 'node:path';
import { repoRoot } from '@runplane/devstack';
import {
  deployProblems,
  loadDeployBase,
  parseEnvFile,
  parseManifests,
  portEnvOf,
  yamlFilesUnder,
  type DeployBase,
} from '../support/deploy-manifests.js';

const repo = repoRoot();
const portEnv = (s: Parameters<typeof portEnvOf>[1]) => portEnvOf(repo, s);

describe('deploy/k8s', () => {
  it('every YAML file under deploy/ parses (the examples and the NATS values too)', () => {
    const files = yamlFilesUnder(join(repo, 'deploy'));
    expect(files.length).toBeGreaterThan(10);
    for (const file of files) expect(() => parseManifests(file)).not.toThrow();
  });

  it('refuses an env file that repeats a key, as kustomize does (config.env once set RUNPLANE_PARTITIONS twice)', () => {
    expect(parseEnvFile('A=1\n# note\nB=2\n')).toEqual({ A: '1', B: '2' });
    expect(() => parseEnvFile('RUNPLANE_PARTITIONS=8\nB=2\nRUNPLANE_PARTITIONS=8\n')).toThrow(/repeats the key RUNPLANE_PARTITIONS/);
  });

  it('runs every service as a replicated, disruption-budgeted, spread Deployment with probes it serves', () => {
    const base = loadDeployBase(join(repo, 'deploy', 'k8s'));
    expect(base.objects.filter((o) => o.object.kind === 'Deployment')).toHaveLength(7);
    expect(deployProblems(base, portEnv)).toEqual([]);
  });

  it('names each broken promise (the checks can fail)', () => {
    const base = loadDeployBase(join(repo, 'deploy', 'k8s'));
    const broken: DeployBase = structuredClone(base);
    const deployment = (name: string) => broken.objects.find((o) => o.object.kind === 'Deployment' && o.object.metadata?.name === name)!.object;
    // the runtime as it was before issue [8]: one pod, Recreate, no spread
    const runtime = deployment('runplane-runtime').spec!;
    runtime.replicas = 1;
    runtime.strategy = { type: 'Recreate' };
    delete runtime.template!.spec!.topologySpreadConstraints;
    // tools without a budget, a grace period under the drain bound
    broken.objects = broken.objects.filter((o) => !(o.object.kind === 'PodDisruptionBudget' && o.object.metadata?.name === 'runplane-tools'));
    deployment('runplane-tools').spec!.template!.spec!.terminationGracePeriodSeconds = Number(base.config.RUNPLANE_DRAIN_SECONDS);
    // a probe on a path the projector does not serve, another on the wrong port
    const projector = deployment('runplane-projector').spec!.template!.spec!.containers![0]!;
    projector.readinessProbe!.httpGet!.path = '/health';
    projector.livenessProbe!.httpGet!.port = 9999;
    // a budget that blocks every drain
    broken.objects.find((o) => o.object.kind === 'PodDisruptionBudget' && o.object.metadata?.name === 'runplane-lifecycle')!.object.spec = {
      minAvailable: deployment('runplane-lifecycle').spec!.replicas,
      selector: { matchLabels: { 'app.kubernetes.io/name': 'runplane-lifecycle' } },
    };

    const problems = deployProblems(broken, portEnv);
    const expected = [
      /^runplane-runtime: replicas 1 < 2$/,
      /^runplane-runtime: strategy Recreate is not RollingUpdate$/,
      /^runplane-runtime: PodDisruptionBudget runplane-runtime allows 1 evictions of 1 pods/, // a budget that protects nothing
      /^runplane-runtime: no topology spread over kubernetes\.io\/hostname$/,
      /^runplane-runtime: no topology spread over topology\.kubernetes\.io\/zone$/,
      /^runplane-tools: 0 PodDisruptionBudgets select it, not 1$/,
      /^runplane-tools: terminationGracePeriodSeconds \d+ is not above RUNPLANE_DRAIN_SECONDS \d+$/,
      /^runplane-projector: readinessProbe path \/health is not a GET route projector serves/,
      /^runplane-projector: livenessProbe port 9999 is not the port the service listens on \(PROJECTOR_PORT=8085\)$/,
      /^runplane-lifecycle: PodDisruptionBudget runplane-lifecycle allows 0 evictions/,
    ];
    for (const re of expected) expect(problems.filter((p) => re.test(p))).toHaveLength(1);
    expect(problems).toHaveLength(expected.length);
  });
});
