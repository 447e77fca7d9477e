/**
 * deploy/k8s as an SRE applies it: each overlay (dev, prod) rendered the way `kubectl kustomize`
 * does (test/support/kustomize.ts; compared with kubectl itself where it is installed), every
 * object validated against the Kubernetes OpenAPI schemas (`kubernetes-models`,
 * `@kubernetes-models/prometheus-operator` for the ServiceMonitor and `@kubernetes-models/cert-manager`
 * for the NATS TLS example's issuers, certificates and trust bundle), and the promises checked: the
 * services replicated, disruption-budgeted, spread, with a grace period above the drain bound and
 * probes on the paths and ports the code serves (test/support/deploy-manifests.ts); resources on
 * every container; the NetworkPolicy set; the ServiceMonitor; the Secrets outside the base and
 * the prod overlay; the provisioning Job; the Dockerfile exposing every service's port.
 * No cluster is needed.
 */
import { describe, expect, it } from '@jest/globals';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { repoRoot } from '@runplane/devstack';
import {
  deployBaseOf,
  deployProblems,
  exposedPorts,
  overlayProblems,
  parseEnvFile,
  parseManifests,
  portEnvOf,
  yamlFilesUnder,
  type DeployBase,
  type OverlayExpectations,
  type Rendered,
} from '../support/deploy-manifests.js';
import { kustomize, type KObject } from '../support/kustomize.js';

const repo = repoRoot();
const k8s = join(repo, 'deploy', 'k8s');
const portEnv = (s: Parameters<typeof portEnvOf>[1]) => portEnvOf(repo, s);
const exposed = exposedPorts(readFileSync(join(repo, 'deploy', 'Dockerfile'), 'utf8'));

const OVERLAYS: OverlayExpectations[] = [
  {
    name: 'prod',
    natsReplicas: '3',
    image: /^registry\.example\.com\/runplane:\d+\.\d+\.\d+$/,
    monitoring: true,
    rendersSecrets: false,
    extraComponents: [],
  },
  { name: 'dev', natsReplicas: '1', image: /^runplane:[\w.]+-dev$/, monitoring: false, rendersSecrets: true, extraComponents: ['scripted-model'] },
];
const render = (overlay: string) => kustomize(join(k8s, 'overlays', overlay)) as Rendered[];

/** The kubernetes-models class of an object's apiVersion and kind. @throws when there is none (an unknown kind). */
async function modelOf(o: KObject): Promise<new (data: unknown) => { validate(): void }> {
  const [group, version] = o.apiVersion?.includes('/') ? o.apiVersion.split('/') : ['', o.apiVersion];
  const module = (await (group === 'monitoring.coreos.com'
    ? import(`@kubernetes-models/prometheus-operator/${group}/${version}/${o.kind}`)
    : group === 'cert-manager.io' || group === 'trust.cert-manager.io'
      ? import(`@kubernetes-models/cert-manager/${group}/${version}/${o.kind}`)
      : import(group ? `kubernetes-models/${group}/${version}/${o.kind}` : `kubernetes-models/${version}/${o.kind}`))) as Record<
    string,
    new (data: unknown) => { validate(): void }
  >;
  const Model = module[o.kind ?? ''];
  if (!Model) throw new Error(`kubernetes-models has no ${o.apiVersion} ${o.kind}`);
  return Model;
}

/** Schema errors of every object, `Kind/name: message` each (empty: all valid). */
async function schemaErrors(objects: KObject[]): Promise<string[]> {
  const errors: string[] = [];
  for (const o of objects) {
    try {
      const Model = await modelOf(o);
      new Model(o).validate();
    } catch (e) {
      errors.push(`${o.kind}/${o.metadata?.name}: ${(e as Error).message}`);
    }
  }
  return errors;
}

/** Sorted, with the configMapGenerator's content hash and kubectl's base64 line breaks taken out. */
function normalized(objects: unknown[]): unknown[] {
  const text = JSON.stringify(objects).replace(/(runplane-config)-[a-z0-9]{10}/g, '$1');
  const sorted = (JSON.parse(text) as KObject[]).map((o) =>
    o.kind === 'Secret'
      ? { ...o, data: Object.fromEntries(Object.entries(o.data as Record<string, string>).map(([k, v]) => [k, v.replace(/\s/g, '')])) }
      : o,
  );
  return sorted.sort((a, b) => `${a.kind}/${a.metadata?.name}`.localeCompare(`${b.kind}/${b.metadata?.name}`));
}

const kubectl = (() => {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

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

  it.each(['base', 'overlays/dev', 'overlays/prod', 'components/monitoring'])('%s renders only with what the test renderer implements', (dir) => {
    if (dir === 'components/monitoring') expect(() => kustomize(join(k8s, dir))).toThrow(/kind Component, expected Kustomization/);
    else expect(kustomize(join(k8s, dir)).length).toBeGreaterThan(20);
  });

  (kubectl ? it : it.skip)(
    'the test renderer gives what `kubectl kustomize` gives, for the base and each overlay (runs where kubectl is installed)',
    () => {
      for (const dir of ['base', 'overlays/dev', 'overlays/prod']) {
        const real = parseAllDocuments(execFileSync('kubectl', ['kustomize', join(k8s, dir)], { encoding: 'utf8' })).map((d) => d.toJS() as unknown);
        expect(normalized(kustomize(join(k8s, dir)))).toEqual(normalized(real));
      }
    },
  );

  it.each(['dev', 'prod'])('every object of the %s overlay is valid against the Kubernetes schemas', async (overlay) => {
    const objects = render(overlay);
    expect(await schemaErrors(objects)).toEqual([]);
  });

  it('the examples are valid against the Kubernetes schemas', async () => {
    const objects = yamlFilesUnder(join(k8s, 'examples')).flatMap((f) => parseManifests(f) as KObject[]);
    expect(objects.length).toBeGreaterThanOrEqual(4);
    expect(await schemaErrors(objects)).toEqual([]);
  });

  it('the schema validation can fail: a string port, a missing container name, an unknown kind', async () => {
    const [deployment] = render('prod').filter((o) => o.kind === 'Deployment');
    const broken = structuredClone(deployment!);
    const container = broken.spec!.template!.spec!.containers![0]! as { name?: string; ports?: { containerPort: unknown }[] };
    container.ports![0]!.containerPort = 'eighty';
    delete container.name;
    const errors = await schemaErrors([broken, { apiVersion: 'v1', kind: 'NoSuchKind', metadata: { name: 'x' } }]);
    expect(errors).toHaveLength(2);
    expect(errors[0]).toMatch(/containerPort must be integer/);
    expect(errors[0]).toMatch(/containers\/0 must have required property name/);
    expect(errors[1]).toMatch(/^NoSuchKind\/x:/);
  });

  it('the base holds no Secret; the prod overlay neither (they come from the secret manager)', () => {
    expect(kustomize(join(k8s, 'base')).filter((o) => o.kind === 'Secret')).toEqual([]);
    expect(render('prod').filter((o) => o.kind === 'Secret')).toEqual([]);
  });

  it('examples/secrets.yaml names every Secret key the prod overlay reads', () => {
    const example = parseManifests(join(k8s, 'examples', 'secrets.yaml')) as KObject[];
    const refs = render('prod').flatMap((o) =>
      (o.spec?.template?.spec?.containers ?? []).flatMap((c) =>
        (c.env ?? []).flatMap((e) => (e.valueFrom?.secretKeyRef ? [e.valueFrom.secretKeyRef] : [])),
      ),
    );
    expect(refs.length).toBeGreaterThan(8);
    for (const ref of refs) expect(Object.keys((example.find((s) => s.metadata?.name === ref.name)?.stringData as object) ?? {})).toContain(ref.key);
    // and every Secret and ConfigMap a pod mounts (the NATS CA, each service's signing key, the signing public keys)
    const volumes = render('prod').flatMap(
      (o) => (o.spec?.template?.spec?.volumes ?? []) as { secret?: { secretName?: string }; configMap?: { name?: string } }[],
    );
    const mounted = [
      ...volumes.flatMap((v) => (v.secret?.secretName ? [`Secret/${v.secret.secretName}`] : [])),
      ...volumes.flatMap((v) => (v.configMap?.name ? [`ConfigMap/${v.configMap.name}`] : [])),
    ];
    expect(mounted).toContain('Secret/runplane-signing-lifecycle');
    expect(mounted).toContain('ConfigMap/runplane-signing-public-keys');
    for (const m of new Set(mounted)) expect(example.map((o) => `${o.kind}/${o.metadata?.name}`)).toContain(m);
  });

  it.each(OVERLAYS.map((o) => [o.name, o] as const))(
    'the %s overlay: replicated, budgeted, spread services with probes they serve; resources, images, Job, Secrets, monitoring and network policies as promised',
    (name, expectations) => {
      const objects = render(name);
      expect(objects.filter((o) => o.kind === 'Deployment').length).toBe(7 + expectations.extraComponents.length);
      expect(deployProblems(deployBaseOf(objects), portEnv)).toEqual([]);
      expect(overlayProblems(objects, expectations, exposed)).toEqual([]);
    },
  );

  it('the prod overlay runs neither the scripted model nor anything of the devstack; the dev overlay runs the scripted model', () => {
    const args = (overlay: string) => render(overlay).flatMap((o) => (o.spec?.template?.spec?.containers ?? []).flatMap((c) => c.args ?? []));
    expect(args('prod').filter((a) => /scripted-model|devstack|pglite/i.test(a))).toEqual([]);
    expect(args('dev')).toContain('apps/scripted-model/dist/main.js');
  });

  it('every container and the Dockerfile run a file the build makes: each service its bundle', () => {
    const files = (overlay: string) =>
      render(overlay).flatMap((o) =>
        (o.spec?.template?.spec?.containers ?? []).flatMap((c) => (c.args?.[0] === 'node' && c.args[1] ? [c.args[1]] : [])),
      );
    // which file each service runs is deployProblems' check (above); here: that the file exists
    const run = [...new Set([...files('prod'), ...files('dev')])];
    expect(run.length).toBeGreaterThanOrEqual(8);
    expect(run.filter((f) => !existsSync(join(repo, f)))).toEqual([]);
    const cmd = /^CMD \["node", "([^"]+)"\]/m.exec(readFileSync(join(repo, 'deploy', 'Dockerfile'), 'utf8'))?.[1];
    expect(cmd).toBe('apps/admission/dist/main.bundle.js');
  });

  it('deploy/Dockerfile exposes every service port (recovery 8087 included)', () => {
    expect(exposed.sort()).toEqual([8081, 8082, 8083, 8084, 8085, 8086, 8087]);
  });

  it('names each broken promise of the base (the checks can fail)', () => {
    const base = deployBaseOf(render('prod'));
    const broken: DeployBase = structuredClone(base);
    const deployment = (name: string) => broken.objects.find((o) => o.object.kind === 'Deployment' && o.object.metadata?.name === name)!.object;
    // the runtime as it was before it scaled out: one pod, Recreate, no spread
    const runtime = deployment('runplane-runtime').spec!;
    runtime.replicas = 1;
    runtime.strategy = { type: 'Recreate' };
    delete runtime.template!.spec!.topologySpreadConstraints;
    // tools without a budget, a grace period under the shutdown bound (at the drain bound)
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
      /^runplane-tools: terminationGracePeriodSeconds \d+ is not above RUNPLANE_SHUTDOWN_GRACE_SECONDS \d+ plus its 0 s preStop$/,
      /^runplane-projector: readinessProbe path \/health is not a GET route projector serves/,
      /^runplane-projector: livenessProbe port 9999 is not the port the service listens on \(PROJECTOR_PORT=8085\)$/,
      /^runplane-lifecycle: PodDisruptionBudget runplane-lifecycle allows 0 evictions/,
    ];
    for (const re of expected) expect(problems.filter((p) => re.test(p))).toHaveLength(1);
    expect(problems).toHaveLength(expected.length);
  });

  it('names each broken promise of an overlay (the checks can fail)', () => {
    const prod = OVERLAYS[0]!;
    const objects = structuredClone(render('prod'));
    const byName = (kind: string, name: string) => objects.find((o) => o.kind === kind && o.metadata?.name === name)!;
    const container = (name: string) => byName('Deployment', name).spec!.template!.spec!.containers![0]!;
    // no default deny
    objects.splice(objects.indexOf(byName('NetworkPolicy', 'runplane-default-deny')), 1);
    // the projector opened to every namespace
    objects.push({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: 'open-projector' },
      spec: {
        podSelector: { matchLabels: { 'app.kubernetes.io/component': 'projector' } },
        policyTypes: ['Ingress'],
        ingress: [{ from: [{ namespaceSelector: {} }] }],
      },
    });
    // tools may call anywhere
    objects.push({
      apiVersion: 'networking.k8s.io/v1',
      kind: 'NetworkPolicy',
      metadata: { name: 'tools-anywhere' },
      spec: { podSelector: { matchLabels: { 'app.kubernetes.io/component': 'tools' } }, policyTypes: ['Egress'], egress: [{}] },
    });
    // the runtime's model egress open to every address on 443 again (the cloud's metadata, the cluster)
    byName('NetworkPolicy', 'runplane-egress-model').spec!.egress = [{ ports: [{ protocol: 'TCP', port: 443 }] }];
    // the lifecycle without a memory limit; liveness of the runtime on /readyz (a NATS outage would restart it)
    delete container('runplane-lifecycle').resources!.limits!.memory;
    container('runplane-runtime').livenessProbe!.httpGet!.path = '/readyz';
    // a dev image in prod; a Secret in prod; no ServiceMonitor
    container('runplane-recovery').image = 'runplane:0.1.0-dev';
    // the tools without the NATS CA: it could not verify the server
    byName('Deployment', 'runplane-tools').spec!.template!.spec!.volumes = byName(
      'Deployment',
      'runplane-tools',
    ).spec!.template!.spec!.volumes!.filter((v) => v.name !== 'nats-ca');
    // the runtime without its signing key's volume, the projector mounting the tools' key, the lifecycle without the public keys
    const spec = (name: string) => byName('Deployment', name).spec!.template!.spec!;
    spec('runplane-runtime').volumes = spec('runplane-runtime').volumes!.filter((v) => v.name !== 'signing-key');
    spec('runplane-projector').volumes!.push({ name: 'stolen', secret: { secretName: 'runplane-signing-tools' } });
    spec('runplane-lifecycle').volumes = spec('runplane-lifecycle').volumes!.filter((v) => v.name !== 'signing-public-keys');
    objects.push({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 'runplane-secrets' }, data: {} });
    objects.splice(
      objects.findIndex((o) => o.kind === 'ServiceMonitor'),
      1,
    );

    const problems = overlayProblems(objects, prod, exposed);
    const expected = [
      /^prod: no default-deny NetworkPolicy/,
      /^prod: projector: reachable from outside the namespace by monitoring\/prometheus, other namespaces; want monitoring\/prometheus$/,
      /^prod: tools: egress to dns, nats, unknown: to \[\] ports all; want dns, nats$/,
      /^prod: runtime: egress to dns, nats, unknown: to \[\] ports TCP\/443; want dns, nats, public-https$/,
      /^prod: Deployment runplane-lifecycle: no memory limit$/,
      /^prod: runtime: livenessProbe on \/readyz, not \/livez$/,
      /^prod: Deployment runplane-recovery: image runplane:0\.1\.0-dev does not match/,
      /^prod: Deployment runplane-tools: NATS_CA_FILE \/etc\/runplane\/nats-ca\/ca\.crt is not mounted from Secret runplane-nats-ca$/,
      /^prod: Deployment runplane-runtime: RUNPLANE_SIGNING_KEY_FILE \/etc\/runplane\/signing\/signing\.key is not mounted from Secret runplane-signing-runtime$/,
      /^prod: Deployment runplane-projector: mounts another service's signing key \(Secret runplane-signing-tools\)$/,
      /^prod: Deployment runplane-lifecycle: RUNPLANE_SIGNING_PUBLIC_KEYS_FILE \S+ is not mounted from ConfigMap runplane-signing-public-keys$/,
      /^prod: renders Secrets runplane-secrets/,
      /^prod: 0 ServiceMonitors, not 1$/,
    ];
    for (const re of expected) expect(problems.filter((p) => re.test(p))).toHaveLength(1);
    expect(problems).toHaveLength(expected.length);
    // without egress to the identity provider's JWKS, admission and publication could verify no token
    expect(
      overlayProblems(
        render('prod').filter((o) => !(o.kind === 'NetworkPolicy' && o.metadata?.name === 'runplane-egress-identity-provider')),
        prod,
        exposed,
      ),
    ).toEqual([
      'prod: admission: egress to dns, nats, postgresql; want dns, nats, postgresql, public-https',
      'prod: publication: egress to dns, nats; want dns, nats, public-https',
    ]);
    // and a Dockerfile without recovery's port
    expect(overlayProblems(render('prod'), prod, [8081, 8082, 8083, 8084, 8085, 8086])).toEqual([
      'prod: recovery: port 8087 is not EXPOSEd by deploy/Dockerfile',
    ]);
  });
});
