/**
 * Checks a rendered Kubernetes overlay of deploy/k8s (test/support/kustomize.ts renders it) for what docs/operations.md "Scaling" promises of it: every service a Deployment of at least
 * two replicas with a RollingUpdate strategy, a PodDisruptionBudget that selects it and allows one
 * eviction, topology spread over nodes and zones, a termination grace period above the shutdown bound
 * RUNPLANE_SHUTDOWN_GRACE_SECONDS plus the pod's preStop (itself above the drain bound
 * RUNPLANE_DRAIN_SECONDS), and probes on a path the service serves (contracts `HttpRoutes`) on the
 * port the service listens on. Plain data in, a list of problems out, so that a test can also feed
 * it broken manifests and see each problem named.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
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
  lifecycle?: { preStop?: { exec?: { command?: string[] } } };
}

/** The seconds a container's `preStop` hook sleeps (`sleep N`), 0 without one. */
export function preStopSeconds(c: Container): number {
  const command = c.lifecycle?.preStop?.exec?.command ?? [];
  return command[0] === 'sleep' ? Number(command[1]) || 0 : 0;
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

/** The base as the checks see it, from the objects of a rendered overlay (config: its ConfigMap runplane-config). */
export function deployBaseOf(objects: K8sObject[]): DeployBase {
  const config =
    (objects.find((o) => o.kind === 'ConfigMap' && o.metadata?.name === 'runplane-config') as { data?: Record<string, string> } | undefined)?.data ??
    {};
  return { objects: objects.map((object) => ({ file: '(rendered)', object })), config: { ...config } };
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
 * Problems of the base against the deployment promises of docs/operations.md "Scaling", one line each naming the service
 * (empty: none). `portEnv` gives each service's port variable (see {@link portEnvOf}).
 */
export function deployProblems(base: DeployBase, portEnv: (s: HttpService) => string | undefined): string[] {
  const problems: string[] = [];
  const drain = Number(base.config.RUNPLANE_DRAIN_SECONDS);
  if (!Number.isInteger(drain) || drain <= 0)
    problems.push(`config.env: RUNPLANE_DRAIN_SECONDS is not a positive whole number (${base.config.RUNPLANE_DRAIN_SECONDS})`);
  const shutdown = Number(base.config.RUNPLANE_SHUTDOWN_GRACE_SECONDS);
  if (!Number.isInteger(shutdown) || shutdown <= 0)
    problems.push(`config.env: RUNPLANE_SHUTDOWN_GRACE_SECONDS is not a positive whole number (${base.config.RUNPLANE_SHUTDOWN_GRACE_SECONDS})`);
  else if (!(shutdown > drain))
    problems.push(
      `config.env: RUNPLANE_SHUTDOWN_GRACE_SECONDS ${shutdown} is not above RUNPLANE_DRAIN_SECONDS ${drain} (the runtime and tools refuse to start)`,
    );
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

    const c = (pod.containers ?? []).find((x) => (x.args ?? []).includes(`apps/${service}/dist/main.bundle.js`));
    // the grace period includes the preStop hook; the process must be out by its own bound before the SIGKILL
    const grace = pod.terminationGracePeriodSeconds;
    const preStop = c ? preStopSeconds(c) : 0;
    if (typeof grace !== 'number') say('no terminationGracePeriodSeconds (the default 30 s is not tied to the shutdown bound)');
    else if (!(grace > shutdown + preStop))
      say(`terminationGracePeriodSeconds ${grace} is not above RUNPLANE_SHUTDOWN_GRACE_SECONDS ${shutdown} plus its ${preStop} s preStop`);
    if (!c) {
      say(`no container runs apps/${service}/dist/main.bundle.js`);
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

/** A label selector with `matchExpressions` (NetworkPolicy peers and pod selectors). */
export interface Selector {
  matchLabels?: Record<string, string>;
  matchExpressions?: { key: string; operator: string; values?: string[] }[];
}

/** One peer of a NetworkPolicy rule. */
export interface PolicyPeer {
  namespaceSelector?: Selector;
  podSelector?: Selector;
  ipBlock?: { cidr: string; except?: string[] };
}

/** One NetworkPolicy rule (ingress `from` or egress `to`). */
export interface PolicyRule {
  from?: PolicyPeer[];
  to?: PolicyPeer[];
  ports?: { protocol?: string; port?: number | string }[];
}

/** A container as {@link overlayProblems} reads it. */
export interface RenderedContainer {
  name?: string;
  image?: string;
  args?: string[];
  ports?: { name?: string; containerPort: number }[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }[];
  resources?: { requests?: Record<string, string | number>; limits?: Record<string, string | number> };
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

/** A rendered object, as {@link overlayProblems} reads it (plain JSON; the fields of every kind it looks at). */
export interface Rendered {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; labels?: Record<string, string> };
  spec?: {
    template?: {
      metadata?: { labels?: Record<string, string> };
      spec?: {
        containers?: RenderedContainer[];
        volumes?: { name: string; secret?: { secretName?: string }; configMap?: { name?: string } }[];
      };
    };
    /** a Service's selector (labels), a ServiceMonitor's (a label selector) */
    selector?: Selector & Record<string, unknown>;
    ports?: { name?: string; port?: number; targetPort?: string | number }[];
    endpoints?: { port?: string; path?: string }[];
    podSelector?: Selector;
    policyTypes?: string[];
    ingress?: PolicyRule[];
    egress?: PolicyRule[];
  };
  data?: Record<string, string>;
  [field: string]: unknown;
}

/** True when `sel` selects `labels` (an empty selector selects everything, as Kubernetes has it). */
export function selectorMatches(sel: Selector | undefined, labels: Record<string, string> = {}): boolean {
  if (!sel) return false;
  const byLabels = Object.entries(sel.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  const byExpr = (sel.matchExpressions ?? []).every((e) => {
    const has = e.key in labels;
    if (e.operator === 'In') return has && (e.values ?? []).includes(labels[e.key]!);
    if (e.operator === 'NotIn') return !has || !(e.values ?? []).includes(labels[e.key]!);
    if (e.operator === 'Exists') return has;
    if (e.operator === 'DoesNotExist') return !has;
    throw new Error(`unknown selector operator ${e.operator}`);
  });
  return byLabels && byExpr;
}

/** CPU (`500m`, `1`) in millicores, memory (`128Mi`, `1Gi`) in bytes; NaN when unreadable. */
export function quantity(q: string | number | undefined): number {
  if (q === undefined) return NaN;
  const m = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi|Ti|k|M|G)?$/.exec(String(q));
  if (!m) return NaN;
  const n = Number(m[1]);
  const unit: Record<string, number> = { m: 1, '': 1000, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, k: 1e3, M: 1e6, G: 1e9 };
  // CPU with no unit is cores (x1000 millicores); memory with no unit is bytes: callers compare like with like
  return n * unit[m[2] ?? '']!;
}

/** What an overlay must be (the facts {@link overlayProblems} checks it against). */
export interface OverlayExpectations {
  /** The overlay's name, for messages. */
  name: string;
  /** RUNPLANE_NATS_REPLICAS of the rendered ConfigMap. */
  natsReplicas: '1' | '3';
  /** Every container's image must match. */
  image: RegExp;
  /** Prometheus Operator objects expected (a ServiceMonitor and the metrics Service). */
  monitoring: boolean;
  /** Secrets the overlay itself must render (none: they come from outside). */
  rendersSecrets: boolean;
  /** Components (app.kubernetes.io/component) allowed beside the seven services and the provisioning Job. */
  extraComponents: string[];
}

/** The components that own facts and sign them, each with its own key (libs/contracts `Owner`). */
const SIGNING_OWNERS = ['admission', 'runtime', 'tools', 'publication', 'recovery', 'lifecycle'];

/**
 * Each workload's egress, by kind of destination. `public-https`: TCP 443 to public addresses only,
 * the runtime's model endpoint, and the identity provider's JWKS (`RUNPLANE_AUTH_JWKS_URL`) that
 * admission and publication fetch to verify every token (without it every request fails).
 */
const EGRESS_OF: Record<string, string[]> = {
  admission: ['dns', 'nats', 'postgresql', 'public-https'],
  publication: ['dns', 'nats', 'public-https'],
  runtime: ['dns', 'nats', 'public-https'],
  tools: ['dns', 'nats'],
  lifecycle: ['dns', 'nats'],
  recovery: ['dns', 'nats'],
  projector: ['dns', 'nats', 'postgresql'],
  provision: ['dns', 'nats'],
};

/**
 * The ranges a public-only egress peer must except: private, shared (CGNAT), loopback and
 * link-local (the cloud's instance metadata, 169.254.169.254 and fd00:ec2::254, inside fc00::/7).
 */
const NOT_PUBLIC: Record<string, string[]> = {
  '0.0.0.0/0': ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', '100.64.0.0/10', '169.254.0.0/16', '127.0.0.0/8'],
  '::/0': ['fc00::/7', 'fe80::/10', '::1/128'],
};

/** True when an egress peer reaches only public addresses: an ipBlock of everything that excepts {@link NOT_PUBLIC}. */
function publicOnly(peer: PolicyPeer): boolean {
  const must = peer.ipBlock ? NOT_PUBLIC[peer.ipBlock.cidr] : undefined;
  return !!must && !peer.namespaceSelector && !peer.podSelector && must.every((c) => peer.ipBlock!.except?.includes(c));
}

/** One NetworkPolicy egress rule named by where it goes, or `unknown: ...`. */
function egressKind(rule: PolicyRule): string {
  const ports = (rule.ports ?? [])
    .map((p) => `${p.protocol ?? 'TCP'}/${p.port}`)
    .sort()
    .join(',');
  const to = rule.to ?? [];
  const ns = (peer: PolicyPeer | undefined) => peer?.namespaceSelector?.matchLabels?.['kubernetes.io/metadata.name'];
  if (ports === 'TCP/53,UDP/53' && to.length === 1 && ns(to[0]) === 'kube-system' && to[0]?.podSelector?.matchLabels?.['k8s-app'] === 'kube-dns')
    return 'dns';
  if (ports === 'TCP/4222' && to.length === 1 && ns(to[0]) === 'nats' && to[0]?.podSelector?.matchLabels?.['app.kubernetes.io/name'] === 'nats')
    return 'nats';
  if (ports === 'TCP/5432' && to.length >= 1) return 'postgresql';
  if (ports === 'TCP/443' && to.length > 0 && to.every(publicOnly)) return 'public-https';
  if (
    ports === 'TCP/8090' &&
    to.length === 1 &&
    !to[0]?.namespaceSelector &&
    to[0]?.podSelector?.matchLabels?.['app.kubernetes.io/component'] === 'scripted-model'
  )
    return 'scripted-model';
  return `unknown: to ${JSON.stringify(to)} ports ${ports || 'all'}`;
}

/** One ingress peer named: `any` (no `from`), `namespace` (pods of this namespace), or what it selects outside. */
function ingressPeers(rule: PolicyRule): string[] {
  if (!rule.from?.length) return ['any'];
  return rule.from.map((peer) => {
    if (peer.ipBlock) return `ipBlock ${peer.ipBlock.cidr}`;
    if (!peer.namespaceSelector) return 'namespace';
    const ns = peer.namespaceSelector.matchLabels?.['kubernetes.io/metadata.name'];
    const pod = peer.podSelector?.matchLabels?.['app.kubernetes.io/name'];
    return ns && pod ? `${ns}/${pod}` : 'other namespaces';
  });
}

/**
 * Problems of one rendered overlay, one line each (empty: none): every object's kind known, every
 * container with CPU and memory requests and limits (limit at or above request), readiness on
 * `/readyz` and liveness on `/livez` where the service serves them, the Dockerfile exposing every
 * service's port, the images, the provisioning Job, the Secrets, `NATS_CA_FILE` mounted from the
 * Secret runplane-nats-ca in every workload that connects to NATS, the event signing public keys
 * (ConfigMap runplane-signing-public-keys) there too and each owner's own signing key (Secret
 * runplane-signing-<owner>, mounted to it alone), the ServiceMonitor, and the
 * NetworkPolicy set: a default deny; from outside the namespace only admission and publication
 * (and Prometheus where monitoring is on); egress to DNS, NATS, PostgreSQL (admission, projector),
 * public HTTPS for the model endpoint (runtime) and the identity provider's JWKS (admission,
 * publication) only.
 */
export function overlayProblems(objects: Rendered[], expect: OverlayExpectations, exposed: number[]): string[] {
  const problems: string[] = [];
  const say = (what: string) => problems.push(`${expect.name}: ${what}`);
  const workloads = objects.filter((o) => o.kind === 'Deployment' || o.kind === 'Job');
  const componentOf = (o: Rendered) => o.spec?.template?.metadata?.labels?.['app.kubernetes.io/component'];
  const allowed = new Set([...HttpServices, 'provision', ...expect.extraComponents]);

  const config = objects.find((o) => o.kind === 'ConfigMap' && o.metadata?.name === 'runplane-config')?.data;
  if (!config) say('no ConfigMap runplane-config');
  else if (config.RUNPLANE_NATS_REPLICAS !== expect.natsReplicas)
    say(`RUNPLANE_NATS_REPLICAS ${config.RUNPLANE_NATS_REPLICAS}, not ${expect.natsReplicas}`);

  for (const w of workloads) {
    const name = `${w.kind} ${w.metadata?.name}`;
    const component = componentOf(w);
    if (!component || !allowed.has(component)) say(`${name}: component ${component} is not expected in this overlay`);
    for (const c of w.spec?.template?.spec?.containers ?? []) {
      if (!expect.image.test(c.image ?? '')) say(`${name}: image ${c.image} does not match ${expect.image}`);
      for (const r of ['cpu', 'memory']) {
        const req = quantity(c.resources?.requests?.[r]);
        const lim = quantity(c.resources?.limits?.[r]);
        if (!(req > 0)) say(`${name}: no ${r} request`);
        if (!(lim > 0)) say(`${name}: no ${r} limit`);
        else if (lim < req) say(`${name}: ${r} limit below its request`);
      }
      for (const arg of c.args ?? [])
        if (/scripted-model|devstack|pglite/i.test(arg) && !expect.extraComponents.includes('scripted-model')) say(`${name}: runs ${arg}`);
    }
  }

  for (const service of HttpServices) {
    const d = workloads.find((w) => w.kind === 'Deployment' && componentOf(w) === service);
    if (!d) {
      say(`no Deployment of ${service}`);
      continue;
    }
    const c = d.spec?.template?.spec?.containers?.[0] ?? {};
    const served = new Set(HttpRoutes.filter((r) => r.method === 'get' && r.services.includes(service)).map((r) => r.path));
    if (served.has('/readyz') && c.readinessProbe?.httpGet?.path !== '/readyz')
      say(`${service}: readinessProbe on ${c.readinessProbe?.httpGet?.path}, not /readyz`);
    if (served.has('/livez') && c.livenessProbe?.httpGet?.path !== '/livez')
      say(`${service}: livenessProbe on ${c.livenessProbe?.httpGet?.path}, not /livez`);
    const port = (c.ports ?? []).find((p) => p.name === 'http')?.containerPort;
    if (port === undefined || !exposed.includes(port)) say(`${service}: port ${port} is not EXPOSEd by deploy/Dockerfile`);
  }

  // TLS to NATS: every workload that connects verifies the server against the CA of Secret runplane-nats-ca
  const caFile = config?.NATS_CA_FILE;
  if (!caFile) say('NATS_CA_FILE is not set: the services would not verify the NATS server (TLS)');
  else
    for (const w of workloads) {
      if (!EGRESS_OF[componentOf(w) ?? '']?.includes('nats')) continue;
      const c = w.spec?.template?.spec?.containers?.[0];
      const mount = c?.volumeMounts?.find((m) => caFile.startsWith(`${m.mountPath.replace(/\/$/, '')}/`));
      const volume = w.spec?.template?.spec?.volumes?.find((v) => v.name === mount?.name);
      if (volume?.secret?.secretName !== 'runplane-nats-ca')
        say(`${w.kind} ${w.metadata?.name}: NATS_CA_FILE ${caFile} is not mounted from Secret runplane-nats-ca`);
    }

  // event signatures: every workload that connects reads the public keys of ConfigMap
  // runplane-signing-public-keys; each owner signs with its own Secret runplane-signing-<owner>,
  // which no other workload mounts
  const publicKeys = config?.RUNPLANE_SIGNING_PUBLIC_KEYS_FILE;
  const volumeAt = (w: Rendered, file: string) => {
    const c = w.spec?.template?.spec?.containers?.[0];
    const mount = c?.volumeMounts?.find((m) => file.startsWith(`${m.mountPath.replace(/\/$/, '')}/`));
    return w.spec?.template?.spec?.volumes?.find((v) => v.name === mount?.name);
  };
  if (!publicKeys) say('RUNPLANE_SIGNING_PUBLIC_KEYS_FILE is not set: no service would check the signatures of events');
  for (const w of workloads) {
    const component = componentOf(w) ?? '';
    if (!EGRESS_OF[component]?.includes('nats')) continue;
    if (publicKeys && volumeAt(w, publicKeys)?.configMap?.name !== 'runplane-signing-public-keys')
      say(
        `${w.kind} ${w.metadata?.name}: RUNPLANE_SIGNING_PUBLIC_KEYS_FILE ${publicKeys} is not mounted from ConfigMap runplane-signing-public-keys`,
      );
    const keyFile = w.spec?.template?.spec?.containers?.[0]?.env?.find((e) => e.name === 'RUNPLANE_SIGNING_KEY_FILE')?.value;
    const own = `runplane-signing-${component}`;
    if (SIGNING_OWNERS.includes(component)) {
      if (!keyFile) say(`${w.kind} ${w.metadata?.name}: no RUNPLANE_SIGNING_KEY_FILE: its events would be unsigned and refused`);
      else if (volumeAt(w, keyFile)?.secret?.secretName !== own)
        say(`${w.kind} ${w.metadata?.name}: RUNPLANE_SIGNING_KEY_FILE ${keyFile} is not mounted from Secret ${own}`);
    }
    for (const v of w.spec?.template?.spec?.volumes ?? [])
      if (v.secret?.secretName?.startsWith('runplane-signing-') && v.secret.secretName !== own)
        say(`${w.kind} ${w.metadata?.name}: mounts another service's signing key (Secret ${v.secret.secretName})`);
  }

  const job = workloads.find((w) => w.kind === 'Job' && componentOf(w) === 'provision');
  const jobContainer = job?.spec?.template?.spec?.containers?.[0];
  if (!jobContainer?.args?.includes('apps/cli/dist/provision-main.js')) say('no provisioning Job running apps/cli/dist/provision-main.js');
  else if (jobContainer.env?.find((e) => e.name === 'NATS_USER')?.value !== 'runplane-admin')
    say('the provisioning Job does not connect as runplane-admin');

  const secrets = objects.filter((o) => o.kind === 'Secret');
  if (!expect.rendersSecrets && secrets.length) say(`renders Secrets ${secrets.map((s) => s.metadata?.name).join(', ')} (they belong outside)`);
  if (expect.rendersSecrets)
    for (const w of workloads)
      for (const c of w.spec?.template?.spec?.containers ?? [])
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref) continue;
          const s = secrets.find((x) => x.metadata?.name === ref.name);
          if (!s || !(ref.key in (s.data ?? {}))) say(`${w.metadata?.name}: Secret ${ref.name} has no key ${ref.key}`);
        }
  // an overlay that renders its Secrets renders the signing keys and their public keys too, under the file names the settings read
  if (expect.rendersSecrets)
    for (const w of workloads) {
      const env = w.spec?.template?.spec?.containers?.[0]?.env ?? [];
      for (const [setting, kind] of [
        ['RUNPLANE_SIGNING_KEY_FILE', 'Secret'],
        ['RUNPLANE_SIGNING_PUBLIC_KEYS_FILE', 'ConfigMap'],
      ] as const) {
        const file = env.find((e) => e.name === setting)?.value ?? (setting === 'RUNPLANE_SIGNING_PUBLIC_KEYS_FILE' ? publicKeys : undefined);
        if (!file || !EGRESS_OF[componentOf(w) ?? '']?.includes('nats')) continue;
        const v = volumeAt(w, file);
        const name = kind === 'Secret' ? v?.secret?.secretName : v?.configMap?.name;
        const o = objects.find((x) => x.kind === kind && x.metadata?.name === name);
        const key = file.split('/').pop()!;
        if (!o || !(key in ((o.data as object) ?? {}))) say(`${w.metadata?.name}: ${kind} ${name} has no key ${key} (${setting})`);
      }
    }

  const monitors = objects.filter((o) => o.kind === 'ServiceMonitor');
  if (!expect.monitoring && monitors.length) say('has a ServiceMonitor (the CRD may be missing here)');
  if (expect.monitoring) {
    if (monitors.length !== 1) say(`${monitors.length} ServiceMonitors, not 1`);
    for (const m of monitors) {
      const svc = objects.find((o) => o.kind === 'Service' && selectorMatches(m.spec?.selector, o.metadata?.labels));
      if (!svc) {
        say(`ServiceMonitor ${m.metadata?.name} selects no Service`);
        continue;
      }
      for (const ep of m.spec?.endpoints ?? []) {
        const port = (svc.spec?.ports ?? []).find((p) => p.name === ep.port);
        if (!port) say(`ServiceMonitor endpoint port ${ep.port} is not a port of Service ${svc.metadata?.name}`);
        if (ep.path !== '/metrics') say(`ServiceMonitor path ${ep.path} is not /metrics`);
        for (const service of HttpServices) {
          const d = workloads.find((w) => w.kind === 'Deployment' && componentOf(w) === service);
          if (!d || !selectorMatches({ matchLabels: svc.spec?.selector as Record<string, string> }, d.spec?.template?.metadata?.labels))
            say(`metrics Service ${svc.metadata?.name} does not select ${service}`);
          else if (!d.spec?.template?.spec?.containers?.[0]?.ports?.some((p) => p.name === port?.targetPort))
            say(`${service} has no container port named ${port?.targetPort} (the metrics Service's targetPort)`);
        }
      }
    }
  }

  // NetworkPolicies
  const policies = objects.filter((o) => o.kind === 'NetworkPolicy');
  const denyAll = policies.find(
    (p) =>
      Object.keys(p.spec?.podSelector ?? { x: 1 }).length === 0 &&
      ['Ingress', 'Egress'].every((t) => p.spec?.policyTypes?.includes(t)) &&
      !p.spec?.ingress?.length &&
      !p.spec?.egress?.length,
  );
  if (!denyAll) say('no default-deny NetworkPolicy (empty podSelector, Ingress and Egress, no rules)');
  for (const p of policies)
    if (!workloads.some((w) => selectorMatches(p.spec?.podSelector, w.spec?.template?.metadata?.labels)))
      say(`NetworkPolicy ${p.metadata?.name} selects no pod`);
  for (const w of workloads) {
    const component = componentOf(w) ?? '?';
    const labels = w.spec?.template?.metadata?.labels;
    const selecting = policies.filter((p) => selectorMatches(p.spec?.podSelector, labels));
    const egress = new Set(selecting.filter((p) => p.spec?.policyTypes?.includes('Egress')).flatMap((p) => (p.spec?.egress ?? []).map(egressKind)));
    const want = [
      ...(EGRESS_OF[component] ?? []),
      ...(component === 'runtime' && expect.extraComponents.includes('scripted-model') ? ['scripted-model'] : []),
    ];
    if (component in EGRESS_OF) {
      const got = [...egress].sort();
      if (JSON.stringify(got) !== JSON.stringify([...want].sort()))
        say(`${component}: egress to ${got.join(', ')}; want ${[...want].sort().join(', ')}`);
    }
    const peers = new Set(
      selecting.filter((p) => p.spec?.policyTypes?.includes('Ingress')).flatMap((p) => (p.spec?.ingress ?? []).flatMap(ingressPeers)),
    );
    const outside = [...peers].filter((x) => x !== 'namespace').sort();
    const wantOutside = [
      ...(component === 'admission' || component === 'publication' ? ['any'] : []),
      ...(expect.monitoring && (HttpServices as readonly string[]).includes(component) ? ['monitoring/prometheus'] : []),
    ].sort();
    if (JSON.stringify(outside) !== JSON.stringify(wantOutside))
      say(`${component}: reachable from outside the namespace by ${outside.join(', ') || 'nothing'}; want ${wantOutside.join(', ') || 'nothing'}`);
  }
  return problems;
}

/** The ports of deploy/Dockerfile's EXPOSE lines (every stage). */
export function exposedPorts(dockerfile: string): number[] {
  return [...dockerfile.matchAll(/^EXPOSE\s+(.+)$/gm)].flatMap((m) =>
    m[1]!
      .trim()
      .split(/\s+/)
      .map((p) => Number(p.split('/')[0])),
  );
}
