/**
 * Reads the Kubernetes base in deploy/k8s (the files its kustomization.yaml lists, and
 * config.env) and checks what issue [8] promises of it: every service a Deployment of at least
 * two replicas with a RollingUpdate strategy, a PodDisruptionBudget that selects it and allows one
 * eviction, topology spread over nodes and zones, a termination grace period above the drain bound
 * RUNPLANE_DRAIN_SECONDS, and probes on a path the service serves (contracts `HttpRoutes`) on the
 * port the service listens on. Plain data in, a list of problems out, so that a test can also feed
 * it broken manifests and see each problem named.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { HttpRoutes, HttpServices, type HttpService } from '@runplane/contracts';

/** A label selector (only `matchLabels` is used in the base). */
export interface LabelSelector {
  matchLabels?: Record<string, string>;
}

/** A probe; the base probes over HTTP only. */
export interface Probe {
  httpGet?: { path?: string; port?: string | number };
}

/** The container fields the checks read. */
export interface Container {
  name?: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: { name: string; value?: string }[];
  startupProbe?: Probe;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
}

/** The pod fields the checks read. */
export interface PodSpec {
  terminationGracePeriodSeconds?: number;
  topologySpreadConstraints?: { topologyKey?: string; whenUnsatisfiable?: string; labelSelector?: LabelSelector }[];
  containers?: Container[];
}

/** The fields the checks read of a Deployment's spec or a PodDisruptionBudget's (YAML is untyped: each may be missing). */
export interface ObjectSpec {
  replicas?: number;
  selector?: LabelSelector;
  strategy?: { type?: string; rollingUpdate?: { maxSurge?: number | string; maxUnavailable?: number | string } };
  template?: { metadata?: { labels?: Record<string, string> }; spec?: PodSpec };
  maxUnavailable?: number | string;
  minAvailable?: number | string;
}

/** One parsed Kubernetes object (only the fields the checks read are typed). */
export interface K8sObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; labels?: Record<string, string> };
  spec?: ObjectSpec;
}

/** The base as the checks see it: its objects (with the file each came from) and config.env. */
export interface DeployBase {
  objects: { file: string; object: K8sObject }[];
  /** `KEY=value` lines of config.env (comments and blank lines left out). */
  config: Record<string, string>;
}

/**
 * Parses `<dir>/kustomization.yaml`, every file in its `resources` and its configMapGenerator's
 * `config.env`. @throws when a file is missing or is not valid YAML (every document is parsed
 * strictly: a YAML error is an error, not a warning).
 */
export function loadDeployBase(dir: string): DeployBase {
  const kustomization = parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as {
    resources: string[];
    configMapGenerator?: { name: string; envs?: string[] }[];
  };
  const objects: DeployBase['objects'] = [];
  for (const file of kustomization.resources) objects.push(...parseManifests(join(dir, file)).map((object) => ({ file, object })));
  const envFiles = (kustomization.configMapGenerator ?? []).flatMap((g) => g.envs ?? []);
  const config: Record<string, string> = {};
  for (const envFile of envFiles) Object.assign(config, parseEnvFile(readFileSync(join(dir, envFile), 'utf8')));
  return { objects, config };
}

/** Every YAML document of one file, parsed. @throws on the first YAML error or warning. */
export function parseManifests(path: string): K8sObject[] {
  const docs = parseAllDocuments(readFileSync(path, 'utf8'), { prettyErrors: true, strict: true });
  const out: K8sObject[] = [];
  for (const doc of docs) {
    const bad = [...doc.errors, ...doc.warnings];
    if (bad.length) throw new Error(`${path}: ${bad.map((e) => e.message).join('; ')}`);
    const value = doc.toJS() as K8sObject | null;
    if (value !== null) out.push(value);
  }
  return out;
}

/**
 * `KEY=value` lines of an env file (kustomize `envs` syntax: no quotes, no expansion).
 * @throws Error naming the key when a key is repeated: kustomize refuses such a file
 *   ("configmap ... illegally repeats the key"), so `kubectl apply -k` would fail.
 */
export function parseEnvFile(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const eq = line.indexOf('=');
    if (eq <= 0) continue;
    const key = line.slice(0, eq);
    if (key in out) throw new Error(`the env file repeats the key ${key} (kustomize refuses it: the ConfigMap would not render)`);
    out[key] = line.slice(eq + 1);
  }
  return out;
}

/** Every YAML file under `dir` (recursively), for a parse-only check of files not in the base. */
export function yamlFilesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && /\.ya?ml$/.test(e.name))
    .map((e) => join(e.parentPath, e.name));
}

/** True when every label of `matchLabels` is on `labels` (a selector with no labels selects nothing here). */
function selects(matchLabels: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  const entries = Object.entries(matchLabels ?? {});
  return entries.length > 0 && entries.every(([k, v]) => labels?.[k] === v);
}

/** The env variable naming the service's HTTP port, read from its entry (`portEnv: '...'` in apps/<svc>/src). */
export function portEnvOf(repo: string, service: HttpService): string | undefined {
  const src = join(repo, 'apps', service, 'src');
  for (const file of ['main.ts', 'app.ts']) {
    const path = join(src, file);
    if (!existsSync(path)) continue;
    const m = /portEnv:\s*'([A-Z_]+)'/.exec(readFileSync(path, 'utf8'));
    if (m) return m[1];
  }
  return undefined;
}

/**
 * Problems of the base against issue [8]'s deployment promises, one line each naming the service
 * (empty: none). `portEnv` gives each service's port variable (see {@link portEnvOf}).
 */
export function deployProblems(base: DeployBase, portEnv: (s: HttpService) => string | undefined): string[] {
  const problems: string[] = [];
  const drain = Number(base.config.RUNPLANE_DRAIN_SECONDS);
  if (!Number.isInteger(drain) || drain <= 0)
    problems.push(`config.env: RUNPLANE_DRAIN_SECONDS is not a positive whole number (${base.config.RUNPLANE_DRAIN_SECONDS})`);
  if (base.config.RUNPLANE_NATS_REPLICAS !== '3')
    problems.push(`config.env: RUNPLANE_NATS_REPLICAS is ${base.config.RUNPLANE_NATS_REPLICAS}, not 3 (the 3-node cluster)`);
  const partitions = Number(base.config.RUNPLANE_PARTITIONS);
  if (!Number.isInteger(partitions) || partitions < 1)
    problems.push(`config.env: RUNPLANE_PARTITIONS is not a positive whole number (${base.config.RUNPLANE_PARTITIONS})`);

  const deployments = base.objects.filter((o) => o.object.kind === 'Deployment').map((o) => o.object);
  const pdbs = base.objects.filter((o) => o.object.kind === 'PodDisruptionBudget').map((o) => o.object);

  for (const service of HttpServices) {
    const name = `runplane-${service}`;
    const say = (what: string) => problems.push(`${name}: ${what}`);
    const d = deployments.find((o) => o.metadata?.name === name);
    if (!d) {
      say('no Deployment');
      continue;
    }
    const spec: ObjectSpec = d.spec ?? {};
    const pod: PodSpec = spec.template?.spec ?? {};
    const podLabels = spec.template?.metadata?.labels;
    const replicas = spec.replicas ?? 1;
    if (!selects(spec.selector?.matchLabels, podLabels)) say('selector does not select its own pod template');

    if (replicas < 2) say(`replicas ${replicas} < 2`);
    if (replicas > partitions) say(`replicas ${replicas} > RUNPLANE_PARTITIONS ${partitions}: the replicas past it would get no partition`);

    const strategy: NonNullable<ObjectSpec['strategy']> = spec.strategy ?? {};
    if (strategy.type !== 'RollingUpdate') say(`strategy ${strategy.type ?? '(default)'} is not RollingUpdate`);
    else {
      const { maxSurge, maxUnavailable } = strategy.rollingUpdate ?? {};
      if (maxSurge !== 1) say(`rollingUpdate.maxSurge ${maxSurge} is not 1`);
      if (maxUnavailable !== 0 && maxUnavailable !== 1) say(`rollingUpdate.maxUnavailable ${maxUnavailable} is not 0 or 1`);
    }

    const matching = pdbs.filter((p) => selects(p.spec?.selector?.matchLabels, podLabels));
    if (matching.length !== 1) say(`${matching.length} PodDisruptionBudgets select it, not 1`);
    for (const p of matching) {
      const { maxUnavailable, minAvailable }: ObjectSpec = p.spec ?? {};
      // a budget that allows no eviction blocks every node drain; one that allows them all protects nothing
      const allowed = typeof maxUnavailable === 'number' ? maxUnavailable : typeof minAvailable === 'number' ? replicas - minAvailable : NaN;
      if (!(allowed >= 1 && allowed < replicas))
        say(`PodDisruptionBudget ${p.metadata?.name} allows ${allowed} evictions of ${replicas} pods (want 1..${replicas - 1})`);
    }

    const spread = pod.topologySpreadConstraints ?? [];
    for (const key of ['kubernetes.io/hostname', 'topology.kubernetes.io/zone']) {
      const c = spread.find((s) => s.topologyKey === key);
      if (!c) say(`no topology spread over ${key}`);
      else if (!selects(c.labelSelector?.matchLabels, podLabels)) say(`topology spread over ${key} does not select its own pods`);
    }
    const zone = spread.find((s) => s.topologyKey === 'topology.kubernetes.io/zone');
    if (zone && zone.whenUnsatisfiable !== 'ScheduleAnyway') say('zone spread is not ScheduleAnyway (a cluster in one zone could not schedule)');

    const grace = pod.terminationGracePeriodSeconds;
    if (typeof grace !== 'number') say('no terminationGracePeriodSeconds (the default 30 s is not tied to the drain bound)');
    else if (!(grace > drain)) say(`terminationGracePeriodSeconds ${grace} is not above RUNPLANE_DRAIN_SECONDS ${drain}`);

    const c = (pod.containers ?? []).find((x) => (x.args ?? []).includes(`apps/${service}/dist/main.js`));
    if (!c) {
      say(`no container runs apps/${service}/dist/main.js`);
      continue;
    }
    const variable = portEnv(service);
    const listen = Number(c.env?.find((e) => e.name === variable)?.value);
    if (!variable || !Number.isInteger(listen)) say(`the container does not set its port variable ${variable ?? '(unknown)'}`);
    const served = new Set(HttpRoutes.filter((r) => r.method === 'get' && r.services.includes(service)).map((r) => r.path));
    for (const kind of ['startupProbe', 'readinessProbe', 'livenessProbe'] as const) {
      const probe = c[kind];
      if (!probe?.httpGet) {
        say(`no ${kind} over HTTP`);
        continue;
      }
      const { path, port } = probe.httpGet;
      if (!path || !served.has(path)) say(`${kind} path ${path} is not a GET route ${service} serves (${[...served].join(', ')})`);
      const portNumber = typeof port === 'number' ? port : c.ports?.find((p) => p.name === port)?.containerPort;
      if (portNumber === undefined) say(`${kind} port ${port} is not a container port`);
      else if (portNumber !== listen) say(`${kind} port ${portNumber} is not the port the service listens on (${variable}=${listen})`);
    }
  }
  return problems;
}
